"""A memory that is word for word a line the conversation shows is no candidate of the turn.

The bot reads the conversation's recent messages (and a pasted text's lines) in its prompt
already; a prompt slot spent on the same words, stored as a memory, repeats them and keeps
out a memory it does not see (``context_shown_out``, 1 by default). The turn's own line is
not "shown": a memory the user says again is recalled and reinforced as before.
"""
from __future__ import annotations

import numpy as np
import pytest

from memory import recall, services
from memory.overrides import builtin_params, overrides_scope
from tests.memory.conftest import DAY, NOW, events
from tests.memory.test_conversation_query import CountingEmbedder, _say, serving


def test_a_memory_the_conversation_shows_leaves_the_pool_and_the_next_one_is_recalled(person, direct_stream):
    said = services.add_fact(person_id=person.pk, content="我家的猫叫咪咪", kind="偏好", at=NOW - 30 * DAY).fact_id
    age = services.add_fact(person_id=person.pk, content="玩家的猫今年三岁", kind="身份", at=NOW - 30 * DAY).fact_id
    _say(direct_stream, person, "我家的猫叫咪咪", NOW)
    _say(direct_stream, person, "好可爱", NOW + 1000, role="assistant")

    ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="猫几岁了", at=NOW + 2000)
    assert said not in {f.id for f in ctx.pool} and age in {f.id for f in ctx.pool}
    assert ctx.shown_out == [said] and events("memory_retrieval_trace")[-1]["shownFactIds"] == [said]
    result = recall.confirm_turn(turn_id=ctx.turn_id, at=NOW + 2001)
    assert [p.fact.id for p in result.facts] == [age]

    # the knob off: it is ranked as any other memory
    with overrides_scope({"context_shown_out": 0}):
        ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="猫几岁了", at=NOW + 3000)
    assert said in {f.id for f in ctx.pool} and ctx.shown_out == []
    # the reference ranking replays its turns as recorded: nothing is shown to it
    assert recall.shown_in_conversation(ctx.context, {}) == frozenset({"我家的猫叫咪咪", "好可爱"})
    assert recall.shown_in_conversation(ctx.context, builtin_params("reference")) == frozenset()


def test_the_turns_own_line_is_not_shown(person, direct_stream):
    said = services.add_fact(person_id=person.pk, content="我家的猫叫咪咪", kind="偏好", at=NOW - 30 * DAY).fact_id
    ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="我家的猫叫咪咪", at=NOW)
    assert said in {f.id for f in ctx.pool} and ctx.shown_out == []
    result = recall.confirm_turn(turn_id=ctx.turn_id, at=NOW + 1)
    assert [p.fact.id for p in result.facts] == [said] and result.reinforced == [said]


def test_a_pasted_texts_earlier_lines_are_shown_too(person, direct_stream):
    said = services.add_fact(person_id=person.pk, content="我家的猫叫咪咪", kind="偏好", at=NOW - 30 * DAY).fact_id
    age = services.add_fact(person_id=person.pk, content="玩家的猫今年三岁", kind="身份", at=NOW - 30 * DAY).fact_id
    ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="我家的猫叫咪咪\n猫几岁了", at=NOW)
    assert ctx.line == "猫几岁了" and ctx.shown_out == [said] and age in {f.id for f in ctx.pool}


def test_only_the_conversations_window_is_shown_not_a_long_pasted_historys_older_lines(person, direct_stream):
    """The window is the newest 12 lines (``context_dense_messages``): a pasted history's older lines are
    memories the question may well be about, and stay candidates."""
    old = services.add_fact(person_id=person.pk, content="我家的猫叫咪咪", kind="偏好", at=NOW - 30 * DAY).fact_id
    recent = services.add_fact(person_id=person.pk, content="玩家的猫今年三岁", kind="身份", at=NOW - 30 * DAY).fact_id
    history = ["我家的猫叫咪咪", *(f"第{k}句闲话" for k in range(12)), "玩家的猫今年三岁", "猫叫什么名字"]
    ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="\n".join(history), at=NOW)
    assert ctx.shown_out == [recent] and old in {f.id for f in ctx.pool}
    with overrides_scope({"context_dense_messages": 14}):
        ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="\n".join(history), at=NOW)
    assert sorted(ctx.shown_out) == sorted([old, recent])


def test_the_dense_channel_takes_its_top_among_the_memories_not_shown(person, direct_stream, monkeypatch):
    """With one prompt place the dense channel would have given it to the shown line's copy
    (cosine 1); it goes to the next memory, and the confirmed event names what was left out."""
    serving(monkeypatch, CountingEmbedder())
    copy = services.add_fact(person_id=person.pk, content="我下午要去打篮球", kind="偏好", at=NOW - 30 * DAY).fact_id
    sport = services.add_fact(person_id=person.pk, content="玩家热爱运动", kind="偏好", at=NOW - 30 * DAY).fact_id
    services.store_fact_vector(fact_id=copy, vector=[1.0, 0.0, 0.0, 0.0])
    services.store_fact_vector(fact_id=sport, vector=[0.95, 0.0, 0.31, 0.0])
    _say(direct_stream, person, "我下午要去打篮球", NOW)
    turn_vector = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)

    def confirmed(at):
        ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="几点", at=at)
        return recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=turn_vector, at=at + 1)

    with overrides_scope({"fact_recall_limit": 1}):
        result = confirmed(NOW + 1000)
        assert [p.fact.id for p in result.facts] == [sport]
        assert events("memory_retrieval_confirmed")[-1]["shownFactIds"] == [copy]
        with overrides_scope({"fact_recall_limit": 1, "context_shown_out": 0}):
            result = confirmed(NOW + 2000)
        assert [p.fact.id for p in result.facts] == [copy]
        assert result.facts[0].fact.cosine == pytest.approx(1.0, abs=0.02)
