"""A turn's recall reads the conversation, not only its own line (issue 16, item 3).

The lexical channel queries the recent user lines, weighted by recency; the dense channel
takes the weighted maximum of the cosines with the turn's vector and the recent messages'
vectors (each computed at most once). The "reference" profile keeps the turn's own line only.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from django.db import transaction

from memory import recall, services
from memory.engine.background import BANK
from memory.models import Message, Turn
from memory.overrides import builtin_params, overrides_scope
from memory.search import background
from tests.memory.conftest import DAY, NOW, make_person

FILLER = ["她养了一只猫", "她是一名护士", "她住在北京", "她喜欢爬山", "她对芒果过敏", "她的生日是六月", "她在学游泳", "她不喝咖啡"]
REFERENCE = builtin_params


@pytest.fixture(autouse=True)
def _filler(db):
    stranger = make_person("filler", "路人")
    for text in FILLER:
        services.add_fact(person_id=stranger.pk, content=text, at=NOW, kind="身份")


def _say(stream, person, text, at, role="user"):
    message, _ = services.append_message(
        stream_id=stream.pk, role=role, content=text, sender_person_id=person.pk if role == "user" else None, at=at
    )
    return message


def _turn(stream, person, text, at, vector=None):
    ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=person.pk, text=text, at=at)
    return ctx, recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=vector, at=at + 1)


def test_the_previous_user_line_brings_the_fact_the_turn_is_about_into_the_pool(person, direct_stream):
    """The lexical channel finds it (weighted by recency: two lines back, 0.25) and it is the only
    candidate covering an informative word: it passes the gate and enters the prompt."""
    basketball = services.add_fact(person_id=person.pk, content="玩家周末喜欢打篮球", kind="偏好", at=NOW - 30 * DAY)
    _say(direct_stream, person, "下午一起去打篮球吗", NOW)
    _say(direct_stream, person, "好啊，几点？", NOW + 1000, role="assistant")
    _say(direct_stream, person, "当然是三点啊", NOW + 2000)
    ctx, result = _turn(direct_stream, person, "当然是三点啊", NOW + 3000)
    [line] = [f for f in ctx.pool if f.id == basketball.fact_id]
    assert line.source == "context" and line.eligible and line.gate == "lexical" and line.coverage > 0
    assert [p.fact.id for p in result.facts] == [basketball.fact_id]
    # after an hour of silence the conversation is over: the same line alone brings nothing
    ctx, result = _turn(direct_stream, person, "当然是三点啊", NOW + 2000 + 61 * 60_000)
    assert ctx.pool == [] and result.facts == [] and ctx.context == []
    with overrides_scope({"context_gap_minutes": 120.0}):
        ctx, result = _turn(direct_stream, person, "当然是三点啊", NOW + 2000 + 61 * 60_000)
    assert [p.fact.id for p in result.facts] == [basketball.fact_id]
    turn = Turn.objects.get(pk=ctx.turn_id)
    assert len(turn.context_message_ids) == 2  # the two lines before the turn's own line, newest first
    assert Message.objects.get(pk=turn.context_message_ids[1]).content == "下午一起去打篮球吗"


def test_the_reference_profile_hears_only_the_turns_own_line(person, direct_stream):
    services.add_fact(person_id=person.pk, content="玩家周末喜欢打篮球", kind="偏好", at=NOW - 30 * DAY)
    _say(direct_stream, person, "下午一起去打篮球吗", NOW)
    _say(direct_stream, person, "当然是三点啊", NOW + 2000)
    with overrides_scope(REFERENCE("reference")):
        ctx, result = _turn(direct_stream, person, "当然是三点啊", NOW + 3000)
    assert result.facts == [] and ctx.pool == []
    assert Turn.objects.get(pk=ctx.turn_id).context_message_ids == []


def test_an_old_line_weighs_less_than_the_turns_own_line(person, direct_stream):
    """The turn's words win over a line three messages back that matches as well."""
    tea = services.add_fact(person_id=person.pk, content="玩家喜欢喝乌龙茶", kind="偏好", at=NOW)
    cat = services.add_fact(person_id=person.pk, content="玩家喜欢黑色的猫", kind="偏好", at=NOW)
    _say(direct_stream, person, "你喜欢黑色的猫吗", NOW)
    for i in range(2):
        _say(direct_stream, person, f"嗯嗯第{i}句", NOW + 1000 * (i + 1))
    ctx, _result = _turn(direct_stream, person, "来一杯乌龙茶", NOW + 9000)
    by_id = {f.id: f for f in ctx.pool}
    assert [f.id for f in ctx.pool][:2] == [tea.fact_id, cat.fact_id]
    assert by_id[cat.fact_id].source == "context"
    assert by_id[cat.fact_id].lexical_relevance < by_id[tea.fact_id].lexical_relevance


class CountingEmbedder:
    """Each text on its own axis family: 篮球 lines point one way, everything else another."""

    name = "counting"
    label = "test:counting"
    dim = 4

    def __init__(self):
        self.texts: list[str] = []
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.texts.extend(texts)
        self.calls.append(list(texts))
        out = []
        for text in texts:
            v = np.array([1.0, 0.0, 0.0, 0.0]) if "篮球" in text or "运动" in text else np.array([0.0, 1.0, 0.0, 0.0])
            out.append(v.astype(np.float32))
        return out


def serving(monkeypatch, embedder):
    """``embedder`` as the server's, the gate's background bank embedded afresh by it."""
    from memory.providers import config

    monkeypatch.setattr(config, "get_embedder", lambda **_: embedder)
    background.reset()
    return embedder


def test_the_dense_channel_reads_the_recent_messages_vectors_once(person, direct_stream, monkeypatch):
    embedder = serving(monkeypatch, CountingEmbedder())
    sport = services.add_fact(person_id=person.pk, content="玩家热爱运动", kind="偏好", at=NOW - 30 * DAY).fact_id
    other = services.add_fact(person_id=person.pk, content="玩家养了一条狗", kind="身份", at=NOW).fact_id
    services.store_fact_vector(fact_id=sport, vector=[1.0, 0.0, 0.0, 0.0])
    services.store_fact_vector(fact_id=other, vector=[0.0, 0.0, 1.0, 0.0])
    first = _say(direct_stream, person, "下午一起去打篮球吗", NOW)
    _say(direct_stream, person, "几点", NOW + 1000)
    turn_vector = np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32)  # the turn's line says nothing of sport
    with overrides_scope({"context_window_weight": 0, "context_whole_weight": 0}):  # the messages' own vectors only
        ctx, result = _turn(direct_stream, person, "几点", NOW + 2000, vector=turn_vector)
        assert [p.fact.id for p in result.facts] == [sport]
        assert result.facts[0].fact.cosine == pytest.approx(2 ** -0.25, abs=0.02)  # the weight of the line before
        assert [t for t in embedder.texts if t not in BANK] == ["下午一起去打篮球吗"]  # and the gate's bank, once
        # the next turn reuses the stored vector: nothing is embedded twice
        _say(direct_stream, person, "三点吧", NOW + 3000)
        _turn(direct_stream, person, "三点吧", NOW + 4000, vector=turn_vector)
    assert embedder.texts.count("下午一起去打篮球吗") == 1
    assert Message.objects.get(pk=first.pk).embedding_q8 is not None
    with overrides_scope(REFERENCE("reference")):
        _ctx, reference = _turn(direct_stream, person, "三点吧", NOW + 5000, vector=turn_vector)
    [seen] = [p.fact for p in reference.facts if p.fact.id == sport]
    assert seen.cosine == pytest.approx(0.0, abs=0.02)  # the reference profile compares with the turn's line only


def test_a_chat_is_also_read_whole_as_if_its_user_lines_were_pasted(person, direct_stream, monkeypatch):
    """The user lines of the window and the turn's line, one text, one more row of the dense query
    (weight ``context_whole_weight``): embedded in the call that embeds the turn's line."""
    embedder = serving(monkeypatch, CountingEmbedder())
    sport = services.add_fact(person_id=person.pk, content="玩家热爱运动", kind="偏好", at=NOW - 30 * DAY).fact_id
    services.store_fact_vector(fact_id=sport, vector=[1.0, 0.0, 0.0, 0.0])
    first = _say(direct_stream, person, "下午一起去打篮球吗", NOW)
    services.store_message_vector(message_id=first.pk, vector=[0.0, 0.0, 0.0, 1.0])  # its own vector says nothing
    _say(direct_stream, person, "好啊", NOW + 500, role="assistant")  # the bot's lines are not the user's words
    _say(direct_stream, person, "几点", NOW + 1000)
    with overrides_scope({"context_window_weight": 0}):
        ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="几点", at=NOW + 2000)
        result = recall.confirm_turn(turn_id=ctx.turn_id, at=NOW + 2001)
        assert ["几点", "下午一起去打篮球吗\n几点"] in embedder.calls  # one call: the line, then the chat read whole
        assert [p.fact.id for p in result.facts] == [sport] and result.facts[0].fact.cosine == pytest.approx(1.0, abs=0.02)
        with overrides_scope({"context_window_weight": 0, "context_whole_weight": 0}):
            ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="几点", at=NOW + 3000)
            result = recall.confirm_turn(turn_id=ctx.turn_id, at=NOW + 3001)
        assert sport not in [p.fact.id for p in result.facts]  # without it, no vector of the window names sport


def test_a_chat_read_whole_is_never_longer_than_a_turns_text(person, direct_stream, monkeypatch):
    """The newest user lines that fit in the turn's bound: a chat of long messages is not embedded whole."""
    from memory.engine import context

    monkeypatch.setattr(context, "TURN_TEXT_MAX_CHARS", 30)
    for k, text in enumerate(["很早的一句话" * 3, "中间那句", "刚才那句"]):
        _say(direct_stream, person, text, NOW + k * 1000)
    _say(direct_stream, person, "几点", NOW + 5000)
    ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="几点", at=NOW + 6000, record=False)
    whole = recall.read_whole("几点", ctx.line, ctx.context, ctx.overrides)
    assert whole == "中间那句\n刚才那句\n几点" and len(whole) <= 30  # the oldest line (18 characters) did not fit


def test_a_confirmed_turns_vector_is_its_lines_and_no_one_embeds_the_line_again(person, direct_stream, monkeypatch):
    from memory.engine.quantize import unpack_float32
    embedder = serving(monkeypatch, CountingEmbedder())

    def turn_at(text, at, vector):
        line = _say(direct_stream, person, text, at)
        ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text=text,
                                  watermark_message_id=line.pk, at=at + 1)
        recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=vector, at=at + 2)
        stored = Message.objects.get(pk=line.pk).embedding
        return None if stored is None else unpack_float32(bytes(stored)).tolist()

    assert turn_at("下午一起去打篮球吗", NOW, [0.0, 0.0, 0.5, 0.5]) == [0.0, 0.0, 0.5, 0.5]  # the bot's vector
    assert turn_at("几点", NOW + 1000, [0.0, 0.0, 1.0, 0.0]) == [0.0, 0.0, 1.0, 0.0]
    # the earlier line's vector was read, not embedded; what is new is the chat read whole (recall.read_whole)
    assert [t for t in embedder.texts if t not in BANK] == ["下午一起去打篮球吗\n几点"]
    assert turn_at("三点吧", NOW + 2000, None) == [0.0, 1.0, 0.0, 0.0]  # the server's own vector of the line
    assert turn_at("好的", NOW + 3000, [1.0, 0.0, 0.0]) is None  # another dimension: not the stored vectors' space
    # a text of several lines: the server's vector is its last line's, not the message's
    assert turn_at("我去过杭州\n你呢", NOW + 4000, None) is None


def test_trace_replay_of_a_turn_with_its_conversation_reproduces_the_pool(person, direct_stream):
    """The turn records which messages joined its query; the tuning replay reads them back."""
    from tuning import evaluation

    services.add_fact(person_id=person.pk, content="玩家周末喜欢打篮球", kind="偏好", at=NOW - 30 * DAY)
    services.add_fact(person_id=person.pk, content="玩家三点要开会", kind="事件", at=NOW)
    _say(direct_stream, person, "下午一起去打篮球吗", NOW)
    _say(direct_stream, person, "当然是三点啊", NOW + 2000)
    # prepared only: a confirm would reinforce the prompt facts and move their scores since
    ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="当然是三点啊", at=NOW + 3000)
    assert {f.source for f in ctx.pool} == {"lexical", "context"}
    report = evaluation.evaluate(evaluation.build_samples(), {})
    assert report["reconcile"] == {"matched": 1, "mismatched": 0, "drift_only": 0}
    # without the conversation the replayed pool loses the fact the previous line found
    off = evaluation.evaluate(evaluation.build_samples(), {"context_lexical_lines": 0})
    assert off["reconcile"]["mismatched"] == 1


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # resident indexes answer outside transactions
def test_a_turn_reads_one_state_of_the_lexical_tables(person, direct_stream):
    """The turn's line and its conversation's lines are separate queries, but each resident
    index is brought up to date once per prepare and once per confirm (read_ahead.one_state), and
    the present persons' facts are read once."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    services.add_fact(person_id=person.pk, content="玩家周末喜欢打篮球", kind="偏好", at=NOW - 30 * DAY)
    for k, line in enumerate(["下午一起去打篮球吗", "还是去游泳吧", "北京今天好热"]):
        _say(direct_stream, person, line, NOW + k * 1000)
    recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="几点", at=NOW + 8000, record=False)
    with CaptureQueriesContext(connection) as prepare:  # the indexes are loaded: one poll each from here on
        ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="当然是三点啊", at=NOW + 9000)
    with CaptureQueriesContext(connection) as confirm:
        recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=np.ones(512, dtype=np.float32), at=NOW + 9001)
    assert len(recall.conversation_lines(ctx.context, {})) == 3  # four lexical queries of the facts

    def polls(queries, table):
        return [q for q in queries.captured_queries if f"lexical_revision:{table}" in q["sql"]]

    assert len(polls(prepare, "facts")) == 1 and len(polls(prepare, "episode_cues")) <= 1
    assert len(polls(confirm, "facts")) <= 1
    scope_reads = [q for q in prepare.captured_queries if "FROM facts f WHERE f.person_id" in q["sql"]]
    assert len(scope_reads) == 1  # the persons' facts with their tokens: no row or token read per query line
    fact_tokens = re.compile(r"\b(f\.)?tokens\b.* FROM (facts|knowledge)\b")
    assert not [q for q in prepare.captured_queries if fact_tokens.search(q["sql"]) and q not in scope_reads]
    assert len([q for q in prepare.captured_queries if "lexical_stats" in q["sql"]]) <= 1  # PostgreSQL's row count
    # the confirm: one read of the persons' facts (dense channel, the pool's validity, cosines and
    # tokens), one statement reinforcing the prompt facts
    fact_reads = [q for q in confirm.captured_queries if q["sql"].startswith("SELECT") and " FROM facts " in q["sql"]]
    assert len(fact_reads) == 1
    assert len([q for q in confirm.captured_queries if q["sql"].startswith("UPDATE facts")]) <= 1


@pytest.mark.postgresql_only("SQLite reads in-process: there is no round trip to save")
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the change log is read outside transactions
def test_a_confirm_sends_its_turn_the_persons_facts_and_the_context_vectors_together(person, direct_stream, monkeypatch):
    """With a query vector, the turn's row, the facts of the persons it recorded and the vectors of its
    context are read in one round trip before the turn is known; nothing of them is read again."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory.backends import postgresql

    sport = services.add_fact(person_id=person.pk, content="玩家热爱运动", kind="偏好", at=NOW - 30 * DAY).fact_id
    services.store_fact_vector(fact_id=sport, vector=[1.0, 0.0, 0.0, 0.0])
    line = _say(direct_stream, person, "下午一起去打篮球吗", NOW)
    services.store_message_vector(message_id=line.pk, vector=[1.0, 0.0, 0.0, 0.0])
    _say(direct_stream, person, "几点", NOW + 1000)
    ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="几点", at=NOW + 2000)
    sent: list[list[str]] = []
    together = postgresql.read_together
    monkeypatch.setattr(postgresql, "read_together", lambda statements: sent.append([s for s, *_ in statements])
                        or together(statements))
    with CaptureQueriesContext(connection) as confirm:
        result = recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=[0.0, 1.0, 0.0, 0.0], at=NOW + 2001)
    assert [p.fact.id for p in result.facts] == [sport]
    assert result.facts[0].fact.cosine == pytest.approx(2 ** -0.25, abs=0.02)  # the line before, by its stored vector
    [first] = sent
    assert [s for s in first if "FROM turns WHERE id" in s] and [s for s in first if "FROM facts WHERE" in s]
    assert [s for s in first if "FROM messages WHERE" in s]
    statements = [q["sql"] for q in confirm.captured_queries]
    assert len(statements) == len(first) + 1 and "set_config" in statements[-1]  # then only the write


def test_the_reads_a_turn_sends_ahead_read_nothing_for_no_ids(db):
    """Built for an empty list (a turn without context, persons or recalled episodes) they are valid SQL
    (PostgreSQL has no empty ``IN ()``; SQLite accepts one)."""
    from memory import selectors
    from memory.search import read_ahead

    assert read_ahead.read(selectors.message_vectors_read([])) == []
    assert read_ahead.read(selectors.dense_scope_read([])) == []
    assert read_ahead.read(selectors.episodes_read([])) == {}


class TopicEmbedder:
    """A vector per topic a text names (sport, pets; else "other"), normalised: a text naming two
    topics lies between them, as one embedding of several lines does."""

    name = "topics"
    label = "test:topics"
    dim = 4

    def __init__(self):
        self.texts: list[str] = []
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.texts.extend(texts)
        self.calls.append(list(texts))
        out = []
        for text in texts:
            v = np.array([float("篮球" in text), float("狗" in text), 0.0, 0.0], dtype=np.float32)
            v = v if v.any() else np.array([0.0, 0.0, 1.0, 0.0], dtype=np.float32)
            out.append(v / np.linalg.norm(v))
        return out


def test_the_window_is_the_centroid_of_the_turn_and_the_recent_user_lines(person, direct_stream, monkeypatch):
    """The window's vector joins the turn's query with weight ``context_window_weight``: the centroid
    of the turn's vector and the vectors of the user lines of the dense window; the bot's lines stay
    out, and no text is embedded for it (the chat read whole, another row, is off here: recall.read_whole)."""
    monkeypatch.setattr(recall, "_whole_weights", lambda overrides: (0.0, 0.0))
    embedder = serving(monkeypatch, TopicEmbedder())
    both = services.add_fact(person_id=person.pk, content="玩家常带狗去打篮球", kind="偏好", at=NOW - 30 * DAY).fact_id
    services.store_fact_vector(fact_id=both, vector=[0.7071, 0.7071, 0.0, 0.0])
    _say(direct_stream, person, "我家的狗今天很乖", NOW)
    _say(direct_stream, person, "你说的是哪只狗和篮球", NOW + 500, role="assistant")
    _say(direct_stream, person, "下午一起去打篮球吗", NOW + 1000)
    _say(direct_stream, person, "几点", NOW + 1500)
    _ctx, result = _turn(direct_stream, person, "几点", NOW + 2000)
    # each message and the turn's line embedded alone: the window is made of their vectors
    assert not [t for t in embedder.texts if "\n" in t] and embedder.texts.count("几点") == 1
    assert ("我家的狗今天很乖", "你说的是哪只狗和篮球", "下午一起去打篮球吗") in map(tuple, embedder.calls)
    [fact] = [p.fact for p in result.facts if p.fact.id == both]
    # the window (狗 + 篮球 + the turn's 几点, the bot's line left out) names both topics: cosine
    # 2 × 0.7071 / √3 with the fact, where each line alone gives 0.71 at most (and less by recency)
    assert fact.cosine == pytest.approx(2 * 0.7071 / 3 ** 0.5, abs=0.01)
    with overrides_scope({"context_window_weight": 0.4}):
        _say(direct_stream, person, "三点吧", NOW + 2500)
        _ctx, half = _turn(direct_stream, person, "三点吧", NOW + 3000)
    [fact] = [p.fact for p in half.facts if p.fact.id == both]
    # the lines' own vectors lead again: the bot's line names both, three messages back
    assert fact.cosine == pytest.approx(2 ** -0.75, abs=0.02)


def test_no_window_without_earlier_user_lines_or_in_the_reference_profile(person, direct_stream, monkeypatch):
    serving(monkeypatch, TopicEmbedder())
    hello = _say(direct_stream, person, "你好呀，打篮球吗", NOW, role="assistant")
    ball = _say(direct_stream, person, "下午一起去打篮球吗", NOW + 1000)
    turn = np.array([0.0, 0.0, 1.0, 0.0], dtype=np.float32)
    defaults = dict(recall.live_profile()[1])
    bot_only = recall.conversation_query(turn, recall.context_positions([hello.pk]), defaults)
    assert bot_only.weights == (1.0, pytest.approx(2 ** -0.25))  # the turn and the bot's line: no window
    with_user = recall.conversation_query(turn, recall.context_positions([ball.pk, hello.pk]), defaults)
    assert len(with_user.weights) == 4 and with_user.weights[1] == 1.0  # the window, then the two lines
    assert with_user.vectors[1] == pytest.approx(np.array([1.0, 0.0, 1.0, 0.0]) / 2 ** 0.5, abs=1e-4)
    reference = recall.conversation_query(turn, recall.context_positions([ball.pk, hello.pk]), REFERENCE("reference"))
    assert reference is turn  # the reference profile hears only the turn's own line


def _ranking(result):
    return [(p.fact.id, round(p.fact.score, 6)) for p in result.facts]


def test_a_whole_text_ranks_as_the_same_lines_sent_as_a_chat(person, direct_stream, monkeypatch):
    """A turn whose text is several lines is read as the chat it would have been: its last line is
    the turn's line and the lines before it the conversation's newest user lines (lexical queries with
    their recency weights, and in the window), so it brings what the chat brings, ranked alike."""
    embedder = serving(monkeypatch, TopicEmbedder())
    basketball = services.add_fact(person_id=person.pk, content="玩家周末喜欢打篮球", kind="偏好", at=NOW - 30 * DAY).fact_id
    dog = services.add_fact(person_id=person.pk, content="玩家家里养了一只狗", kind="身份", at=NOW - 30 * DAY).fact_id
    services.store_fact_vector(fact_id=basketball, vector=[1.0, 0.0, 0.0, 0.0])
    services.store_fact_vector(fact_id=dog, vector=[0.0, 1.0, 0.0, 0.0])
    lines = ["我家的狗今天很乖", "下午一起去打篮球吗", "几点"]
    for k, line in enumerate(lines):
        _say(direct_stream, person, line, NOW + k * 1000)
    with transaction.atomic():  # a confirm reinforces its prompt facts: the other form must see them as they were
        _chat_ctx, chat = _turn(direct_stream, person, "几点", NOW + 3000)
        transaction.set_rollback(True)
    pasted = services.resolve_stream(platform="qq", kind="direct", external_id="pasted", name="粘贴")
    with overrides_scope({"context_whole_weight": 0.0}):  # the whole text's own vector: the next test
        ctx, whole = _turn(pasted, person, "\n".join(lines), NOW + 3000)
    assert ctx.line == "几点" and [(c.message_id, c.content, c.position) for c in ctx.context] == [
        (0, "下午一起去打篮球吗", 1), (0, "我家的狗今天很乖", 2)]
    assert {basketball, dog} <= {p.fact.id for p in chat.facts}

    assert _ranking(whole) == _ranking(chat)
    # the text's other lines embedded with the turn's line in one call (the window is their centroid)
    assert ["几点", "下午一起去打篮球吗", "我家的狗今天很乖"] in embedder.calls
    # read as one query (the reference profile's reading), the same text ranks otherwise
    with overrides_scope({"context_text_lines": 0}):
        ctx, _ = _turn(pasted, person, "\n".join(lines), NOW + 4000)
    assert ctx.line == "\n".join(lines) and ctx.context == []


def _dog_and_basketball(person, monkeypatch):
    """A topic embedder, a fact naming both topics and a text of three lines naming one each (the last
    line, 几点, neither): ``(embedder, fact id, text)``."""
    embedder = serving(monkeypatch, TopicEmbedder())
    both = services.add_fact(person_id=person.pk, content="玩家常带狗去打篮球", kind="偏好", at=NOW - 30 * DAY).fact_id
    services.store_fact_vector(fact_id=both, vector=[0.7071, 0.7071, 0.0, 0.0])
    return embedder, both, "我家的狗今天很乖\n下午一起去打篮球吗\n几点"


def test_a_whole_text_keeps_its_own_vector_as_one_more_row(person, direct_stream, monkeypatch):
    """A text read as a chat keeps its own vector (``context_whole_weight``, 1): embedded in the one
    call with its lines, one more row of the dense query. Its background is the chattiest row's, so a
    text of small-talk lines stays small talk however far its vector lies from each line."""
    embedder, both, text = _dog_and_basketball(person, monkeypatch)
    ctx, result = _turn(direct_stream, person, text, NOW)
    assert ctx.line == "几点" and recall.whole_text(text, ctx.line) == text
    assert ["几点", "下午一起去打篮球吗", "我家的狗今天很乖", text] in embedder.calls  # one call
    [fact] = [p.fact for p in result.facts if p.fact.id == both]
    # the whole text names both topics as the fact does: cosine 1, where the window (狗 + 篮球 + 几点)
    # gives 2 × 0.7071 / √3; its background is the turn's line's (几点 sits on the bank: 1), not its own 0
    assert fact.cosine == pytest.approx(1.0, abs=0.01)
    assert fact.margin == pytest.approx(0.0, abs=0.01)
    with overrides_scope({"context_whole_weight": 0.0}):
        _ctx, without = _turn(direct_stream, person, text, NOW + 1000)
    [fact] = [p.fact for p in without.facts if p.fact.id == both]
    assert fact.cosine == pytest.approx(2 * 0.7071 / 3 ** 0.5, abs=0.01)
    # a turn of one line has no whole text: its query is unchanged
    assert recall.whole_text("几点", "几点") is None


def test_a_bots_vector_leaves_the_texts_other_lines_to_one_call(person, direct_stream, monkeypatch):
    """A bot that sends its line's vector with a text of several lines: the other lines and the whole
    text are embedded together, in one call, not one call each — and rank as they would one by one."""
    embedder, both, text = _dog_and_basketball(person, monkeypatch)
    own = embedder.embed(["几点"])[0]
    embedder.calls.clear()
    _ctx, result = _turn(direct_stream, person, text, NOW, vector=list(own))
    asked = [call for call in embedder.calls if set(call) & {"下午一起去打篮球吗", "我家的狗今天很乖", text}]
    assert asked == [["下午一起去打篮球吗", "我家的狗今天很乖", text]]  # one call, the turn's line not in it
    [fact] = [p.fact for p in result.facts if p.fact.id == both]
    assert fact.cosine == pytest.approx(1.0, abs=0.01)  # the whole text's row, as without the bot's vector


def test_a_provider_answering_fewer_vectors_leaves_each_line_asked_alone(person, direct_stream, monkeypatch):
    """A provider that answers a batch with fewer vectors than texts: the turn is not lost, each line is
    embedded alone, and the text ranks as with a provider that answers right."""
    embedder, both, text = _dog_and_basketball(person, monkeypatch)
    answer = embedder.embed

    def short(texts):
        found = answer(texts)
        return found[:-1] if len(texts) > 1 else found

    monkeypatch.setattr(embedder, "embed", short)
    own = answer(["几点"])[0]
    embedder.calls.clear()
    _ctx, result = _turn(direct_stream, person, text, NOW, vector=list(own))
    assert ["下午一起去打篮球吗"] in embedder.calls and ["我家的狗今天很乖"] in embedder.calls and [text] in embedder.calls
    [fact] = [p.fact for p in result.facts if p.fact.id == both]
    assert fact.cosine == pytest.approx(1.0, abs=0.01)


def test_a_whole_text_may_be_one_more_lexical_query(person, direct_stream):
    """``context_whole_lexical`` (0 by default): the whole text of a text read as a chat is one more
    lexical query line of that weight; a turn of one line has none."""
    text = "我家的狗今天很乖\n下午一起去打篮球吗\n几点"
    line, context = recall.read_turn(text, [], {})
    assert recall.conversation_lines(context, {}, whole=recall.whole_text(text, line)) == recall.conversation_lines(context, {})
    lines = recall.conversation_lines(context, {"context_whole_lexical": 0.5}, whole=recall.whole_text(text, line))
    assert lines[-1] == (text, 0.5) and len(lines) == 3
    assert recall.conversation_lines([], {"context_whole_lexical": 0.5}, whole=None) == []


def test_the_text_lines_come_before_the_streams_own_messages(person, direct_stream):
    """A multi-line text in a chat: its lines are the newest, the stream's messages move back by as many."""
    _say(direct_stream, person, "我昨天去爬山了", NOW)
    text = "今天好累。刚下班！对了，我周末去哪了？"
    _say(direct_stream, person, text, NOW + 1000)
    ctx, _ = _turn(direct_stream, person, text, NOW + 2000)
    assert ctx.line == "对了，我周末去哪了？"
    assert [(c.content, c.position) for c in ctx.context] == [("刚下班！", 1), ("今天好累。", 2), ("我昨天去爬山了", 3)]
    turn = Turn.objects.get(pk=ctx.turn_id)
    assert turn.text == text and len(turn.context_message_ids) == 1  # only stored messages are recorded


def test_the_reference_profile_reads_a_text_of_several_lines_as_one_query(person, direct_stream):
    text = "今天好累。刚下班！对了，我周末去哪了？"
    with overrides_scope(REFERENCE("reference")):
        ctx, _ = _turn(direct_stream, person, text, NOW)
    assert ctx.line == text and ctx.context == []
