"""bench/live_chat.py: what it counts of a turn's context lines before the confirm."""
from __future__ import annotations

import pytest

from bench import live_chat
from memory import services
from memory.models import Turn

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000_000


def test_context_vectors_counts_the_lines_that_already_carry_one():
    stream = services.resolve_stream(platform="qq", kind="group", external_id="live", name="live")
    speaker = services.resolve_person(platform="qq", external_id="u1", name="小明", at=T0)
    lines = [services.append_message(stream_id=stream.pk, role="user", content=f"第{i}句", sender_person_id=speaker.pk,
                                     at=T0 + i)[0].pk for i in range(3)]
    services.store_message_vector(message_id=lines[1], vector=[0.6, 0.8, 0.0])
    turn = Turn.objects.create(stream=stream, speaker=speaker, at=T0 + 10, text="问", stream_kind="group",
                               context_message_ids=list(reversed(lines)))
    empty = Turn.objects.create(stream=stream, speaker=speaker, at=T0 + 11, text="问", stream_kind="group")

    assert live_chat.context_vectors(turn.pk) == (3, 1)
    assert live_chat.context_vectors(empty.pk) == (0, 0)
