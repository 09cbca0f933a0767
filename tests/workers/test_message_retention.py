"""MESSAGE_RETENTION_DAYS: old bodies that are summarised and extracted become empty; nothing else does."""
from __future__ import annotations

import numpy as np
import pytest

from memory import meta, pipeline, services
from memory.models import Change, Message
from memory.pipeline.tasks import expire_message_bodies_task
from memory.privacy.forget import expire_message_bodies
from tests import lexical_probe
from tests.workers.conftest import make_person, make_stream

pytestmark = pytest.mark.django_db

NOW = 1_700_000_000_000
DAY = 86_400_000


def _docs(term: str) -> int:
    return lexical_probe.docs("messages_fts", term)


def _setup():
    stream, person = make_stream("keep1"), make_person("kp")
    old = [services.append_message(stream_id=stream.pk, role="user", content=f"很久以前的旧事第{i}件琥珀",
                                   sender_person_id=person.pk, at=NOW - 40 * DAY + i)[0] for i in range(3)]
    recent = services.append_message(stream_id=stream.pk, role="user", content="昨天的新事琥珀",
                                     sender_person_id=person.pk, at=NOW - DAY)[0]
    services.add_episode(stream_id=stream.pk, summary="旧事", cues=["旧事"], started_at=old[0].created_at,
                         ended_at=recent.created_at, message_ids=[m.pk for m in old[:2]] + [recent.pk], at=NOW)
    pipeline.advance_cursor(stream.pk, old[1].pk)  # extraction has read the first two only
    services.store_message_vector(message_id=old[0].pk, vector=np.ones(4, dtype=np.float32) / 2)
    return old, recent


def test_old_summarised_and_extracted_bodies_are_emptied(settings):
    old, recent = _setup()
    assert _docs("琥珀") == 4
    assert expire_message_bodies(days=30, at=NOW) == 2
    rows = {m.pk: m for m in Message.objects.all()}
    assert rows[old[0].pk].content == rows[old[1].pk].content == ""
    assert rows[old[0].pk].embedding is None and rows[old[0].pk].episode_id is not None  # the row and link stay
    assert rows[old[2].pk].content and rows[recent.pk].content  # not summarised / too recent
    assert _docs("琥珀") == 2
    assert meta.meta_get("message_retention")["total"] == 2
    # the change log keeps no copy of the emptied bodies' tokens (it did: migration 0025's triggers)
    logged = Change.objects.filter(source="messages", row_id__in=[old[0].pk, old[1].pk])
    assert not logged.exists() and not Change.objects.filter(old_tokens__contains="旧事").exists()


def test_the_task_is_off_by_default_and_a_rerun_empties_nothing_more(settings):
    _setup()
    assert settings.MESSAGE_RETENTION_DAYS == 0
    assert expire_message_bodies_task() == 0
    settings.MESSAGE_RETENTION_DAYS = 30
    assert expire_message_bodies_task() == 2
    assert expire_message_bodies_task() == 0


def test_the_sweep_is_on_the_beat_schedule(settings):
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "memory.tasks.expire_message_bodies_task" in tasks
