"""pipeline_events and turns are bounded by age and count; replayable turns and skip reasons stay."""
from __future__ import annotations

import pytest

from memory.models import PipelineEvent, Turn
from memory.pipeline import retention
from memory.pipeline.tasks import retention_sweep_task
from tests.workers.conftest import make_person, make_stream

pytestmark = pytest.mark.django_db

NOW = 1_700_000_000_000
HOUR = 3_600_000


def _events(n: int, *, at: int, kind: str = "memory_spread") -> None:
    PipelineEvent.objects.bulk_create([PipelineEvent(at=at, kind=kind, payload={"i": i}) for i in range(n)],
                                      batch_size=2000)


def _turns(n: int, *, at: int) -> list[int]:
    stream, person = make_stream("r1"), make_person("ru")
    Turn.objects.bulk_create([Turn(stream=stream, speaker=person, at=at + i, text=f"t{i}", stream_kind="group")
                              for i in range(n)], batch_size=2000)
    return list(Turn.objects.order_by("id").values_list("id", flat=True))


def test_events_older_than_the_age_limit_go(settings):
    settings.EVENT_RETENTION_HOURS = 72
    settings.EVENT_RETENTION_COUNT = 20_000
    _events(5, at=NOW - 73 * HOUR)
    _events(3, at=NOW - 71 * HOUR)
    assert retention.prune_events(now=NOW) == 5
    assert PipelineEvent.objects.count() == 3
    assert retention.prune_events(now=NOW) == 0  # a rerun deletes nothing more


def test_events_beyond_the_count_go_newest_kept_in_chunks(settings):
    settings.EVENT_RETENTION_COUNT = 1_000
    _events(12_000, at=NOW - HOUR)
    newest = list(PipelineEvent.objects.order_by("-seq").values_list("seq", flat=True)[:1000])
    assert retention.prune_events(now=NOW) == 11_000  # three chunks of ≤ 5 000
    assert sorted(PipelineEvent.objects.values_list("seq", flat=True)) == sorted(newest)


def test_skip_reasons_of_placeholder_episodes_are_kept():
    _events(2, at=NOW - 1000 * HOUR, kind="summary_batch_skipped")
    _events(2, at=NOW - 1000 * HOUR)
    assert retention.prune_events(now=NOW, max_count=1, max_hours=72) == 2
    assert set(PipelineEvent.objects.values_list("kind", flat=True)) == {"summary_batch_skipped"}


def test_turns_beyond_the_count_go_but_never_below_what_replay_reads(settings):
    from tuning.evaluation import MAX_TURNS_LIMIT, build_samples

    ids = _turns(MAX_TURNS_LIMIT + 40, at=NOW - HOUR)
    assert retention.prune_turns(now=NOW, max_count=10, max_hours=720) == 40  # the count floor is 500
    assert list(Turn.objects.order_by("id").values_list("id", flat=True)) == ids[40:]
    assert [s.turn_id for s in build_samples(max_turns=MAX_TURNS_LIMIT)] == ids[40:]


def test_old_turns_go_except_the_newest_replayable_ones(settings):
    from tuning.evaluation import MAX_TURNS_LIMIT

    ids = _turns(MAX_TURNS_LIMIT + 25, at=NOW - 2000 * HOUR)  # all older than 30 days
    assert retention.prune_turns(now=NOW, max_count=5_000, max_hours=720) == 25
    assert Turn.objects.count() == MAX_TURNS_LIMIT and Turn.objects.order_by("id").first().id == ids[25]


def test_the_sweep_task_uses_the_settings(settings):
    settings.EVENT_RETENTION_COUNT = 2
    settings.EVENT_RETENTION_HOURS = 72
    _events(5, at=NOW)  # "now" of the task is the real clock: these are far in the past
    assert retention_sweep_task() == {"events": 5, "turns": 0}
    assert retention_sweep_task() == {"events": 0, "turns": 0}


def test_the_sweep_is_on_the_beat_schedule(settings):
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"memory.tasks.retention_sweep_task", "memory.tasks.jobs_recover_task"} <= tasks


@pytest.mark.postgresql_only("the lexical statistics are delta rows on PostgreSQL; FTS5 keeps its own")
def test_the_sweep_folds_the_statistics_every_message_adds_a_row_to():
    from django.db import connection

    from memory import services

    stream, person = make_stream("r-stats"), make_person("r-stats-u")
    for i in range(80):
        services.append_message(stream_id=stream.pk, role="user", content=f"第{i}条消息 杭州", sender_person_id=person.pk,
                                at=NOW + i)

    def stats() -> tuple[int, int, int]:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*), sum(docs), sum(tokens) FROM lexical_stats WHERE source = 4")
            return cur.fetchone()

    rows, docs, tokens = stats()
    assert rows >= 80 and docs == 80
    retention.retention_sweep(at=NOW)
    assert stats() == (1, docs, tokens)
