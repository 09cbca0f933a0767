"""The read path of a bot turn: prepare (read-only) then confirm (dense channel, fused re-rank, reinforce)."""
from __future__ import annotations

import pytest
from django.apps import apps

from memory import recall, services
from memory.engine import decay
from memory.engine.scoring import blend_score, fused_relevance
from memory.models import Fact, PipelineEvent, Turn
from tests.memory.conftest import DAY, NOW, events, fact_row


def _fact(person, content, **kw):
    kw.setdefault("at", NOW)
    kw.setdefault("kind", "偏好")
    return services.add_fact(person_id=person.pk, content=content, **kw).fact_id


def _snapshot(ids):
    return {i: Fact.objects.values_list("strength", "updated_at", "hit_count", "active").get(pk=i) for i in ids}


def _prepare(stream, person, text, **kw):
    kw.setdefault("at", NOW + DAY)
    return recall.prepare_turn(stream_id=stream.pk, speaker_id=person.pk, text=text, **kw)


def test_prepare_is_read_only_for_facts_and_records_the_turn(person, direct_stream):
    fid = _fact(person, "玩家不喜欢吃香菜")
    other = _fact(person, "玩家养了一只猫")
    before = _snapshot([fid, other])
    ctx = _prepare(direct_stream, person, "香菜好吃吗")
    assert [p.fact.id for p in ctx.facts] == [fid]
    assert _snapshot([fid, other]) == before
    turn = Turn.objects.get(pk=ctx.turn_id)
    assert turn.prompt_fact_ids == [] and turn.confirmed_at is None
    assert [p["factId"] for p in turn.pool] == [fid]
    trace = events("memory_retrieval_trace")
    assert len(trace) == 1
    assert trace[0]["turnId"] == ctx.turn_id and trace[0]["candidateCount"] == 1
    assert trace[0]["candidatePool"] == [{"factId": fid, "score": ctx.pool[0].score}]
    assert PipelineEvent.objects.get(kind="memory_retrieval_trace").turn_id == ctx.turn_id


def test_pool_merges_text_and_impression(person, other_person, group_stream):
    services.append_message(stream_id=group_stream.pk, role="user", content="在吗", sender_person_id=other_person.pk,
                            at=NOW)
    a = _fact(person, "玩家不喜欢吃香菜", origin_kind="group")
    b = _fact(other_person, "她养了一只猫", origin_kind="group")
    ctx = _prepare(group_stream, person, "香菜", impression="大家在聊猫")
    assert ctx.present_person_ids == [person.pk, other_person.pk]
    assert {f.id for f in ctx.pool} == {a, b}
    scores = [f.score for f in ctx.pool]
    assert scores == sorted(scores, reverse=True)


def test_pool_ties_keep_current_text_first(person, direct_stream):
    a = _fact(person, "他喜欢苹果")
    b = _fact(person, "他喜欢香蕉")
    ctx = _prepare(direct_stream, person, "苹果", impression="香蕉")
    assert [f.id for f in ctx.pool] == [a, b]
    assert ctx.pool[0].score == ctx.pool[1].score


def test_conflict_completion_appends_missing_members(person, other_person, group_stream):
    services.append_message(stream_id=group_stream.pk, role="user", content="在吗", sender_person_id=other_person.pk,
                            at=NOW)
    chengdu = _fact(person, "他现在住在成都", slot="居住地", origin_kind="group")
    hangzhou = _fact(person, "他现在住在杭州", slot="居住地", origin_kind="group")
    beijing = _fact(other_person, "她住在北京的海淀", slot="居住地", origin_kind="group")
    shanghai = _fact(other_person, "她住在上海的徐汇", slot="居住地", origin_kind="group")
    ctx = _prepare(group_stream, person, "成都", impression="北京")
    recalled = [p for p in ctx.facts if not p.completed]
    completed = [p for p in ctx.facts if p.completed]
    assert {p.fact.id for p in recalled} == {chengdu, beijing}
    # both persons' groups are shown whole, even though they share the slot name
    assert {p.fact.id for p in completed} == {hangzhou, shanghai}
    assert all(p.conflict_slot == "居住地" for p in ctx.facts)
    # the confirm completes them too, from the groups it read with its write
    confirmed = recall.confirm_turn(turn_id=ctx.turn_id, at=ctx.now + 1)
    assert {p.fact.id for p in confirmed.facts} == {chengdu, beijing}
    assert [(p.fact.id, p.fact.retention, p.conflict_slot) for p in confirmed.conflict_members] == [
        (p.fact.id, p.fact.retention, "居住地") for p in completed]


def test_record_false_writes_nothing_at_all(person, direct_stream):
    services.append_message(stream_id=direct_stream.pk, role="user", content="在吗", sender_person_id=person.pk, at=NOW)
    _fact(person, "他今天心情不好", kind="事件", at=0)  # due for the sweep
    _fact(person, "他私下说喜欢咖啡", origin_kind="direct")

    def counts():
        return {m._meta.db_table: m.objects.count() for m in apps.get_models()}

    before = counts()
    frozen_before = Fact.objects.filter(active=False).count()
    ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="心情 咖啡", at=NOW,
                              record=False)
    assert ctx.turn_id is None and len(ctx.pool) == 2
    assert counts() == before
    assert Fact.objects.filter(active=False).count() == frozen_before


def test_confirm_reinforces_exactly_the_prompt_facts(person, direct_stream, settings):
    settings.FACT_RECALL_LIMIT = 2
    ids = [_fact(person, t) for t in ("他喜欢咖啡", "他常去咖啡馆", "他讨厌咖啡因")]
    untouched = _fact(person, "他养了一只猫")
    ctx = _prepare(direct_stream, person, "咖啡")
    assert len(ctx.pool) == 3
    when = NOW + DAY + 1000
    result = recall.confirm_turn(turn_id=ctx.turn_id, at=when)
    prompt = [p.fact.id for p in result.facts]
    assert len(prompt) == 2 and set(prompt) <= set(ids)
    assert sorted(result.reinforced) == sorted(prompt)
    assert result.used_vector is False
    for fid in ids + [untouched]:
        row = fact_row(fid)
        if fid in prompt:
            assert row.hit_count == 1 and row.updated_at == when
            ret = decay.retention(1.0, NOW, 2160, NOW + DAY)
            assert row.strength == pytest.approx(decay.reinforce(ret))
        else:
            assert row.hit_count == 0 and row.updated_at == NOW
    turn = Turn.objects.get(pk=ctx.turn_id)
    assert turn.prompt_fact_ids == prompt and turn.confirmed_at == when
    assert events("memory_retrieval_confirmed")[0]["promptFactIds"] == prompt
    with pytest.raises(recall.TurnStateError):
        recall.confirm_turn(turn_id=ctx.turn_id, at=when + 1)
    assert fact_row(prompt[0]).hit_count == 1


def test_confirm_unknown_turn(db):
    with pytest.raises(recall.TurnNotFound):
        recall.confirm_turn(turn_id=424242)


def test_confirm_skips_facts_invalidated_in_between(person, direct_stream):
    from curation import services as curation

    a = _fact(person, "他喜欢咖啡")
    b = _fact(person, "他常去咖啡馆")
    ctx = _prepare(direct_stream, person, "咖啡")
    curation.invalidate_fact(fact_id=a, at=NOW + DAY)
    result = recall.confirm_turn(turn_id=ctx.turn_id, at=NOW + DAY)
    assert [p.fact.id for p in result.facts] == [b]
    assert fact_row(a).hit_count == 0


def test_confirm_with_a_vector_checks_the_pool_against_the_store(person, other_person, direct_stream):
    # the confirm reads the present persons' valid facts once (dense channel, validity, cosines):
    # a pool fact invalidated in between leaves, one moved to another person meanwhile is still
    # ranked (read on its own) but not reinforced, and the turn records what was
    from curation import services as curation

    gone = _fact(person, "他喜欢咖啡")
    moved = _fact(person, "他常去咖啡馆")
    kept = _fact(person, "他讨厌咖啡因")
    for fid, vector in ((gone, [1.0, 0.0, 0.0, 0.0]), (moved, [0.0, 1.0, 0.0, 0.0]), (kept, [0.6, 0.8, 0.0, 0.0])):
        services.store_fact_vector(fact_id=fid, vector=vector)
    ctx = _prepare(direct_stream, person, "咖啡")
    assert {f.id for f in ctx.pool} == {gone, moved, kept}
    curation.invalidate_fact(fact_id=gone, at=NOW + DAY)
    Fact.objects.filter(pk=moved).update(person=other_person)
    result = recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=[0.0, 1.0, 0.0, 0.0], at=NOW + DAY + 5)
    assert [p.fact.id for p in result.facts] == [moved, kept]  # by cosine: 1.0, then 0.8
    assert result.facts[0].fact.cosine == pytest.approx(1.0)
    assert result.reinforced == [kept]
    turn = Turn.objects.get(pk=ctx.turn_id)
    assert (turn.prompt_fact_ids, turn.reinforced_fact_ids) == ([moved, kept], [kept])
    assert fact_row(moved).hit_count == 0 and fact_row(kept).hit_count == 1 and fact_row(gone).hit_count == 0


def test_dense_channel_adds_a_fact_without_lexical_match(person, direct_stream):
    # The reference's numbers (docs/REFERENCE.md) under the built-in reference profile; the default
    # ranking is checked in test_dense_channel_default_ranking_terms.
    from memory.overrides import overrides_scope

    lexical = _fact(person, "他喜欢喝咖啡")
    dense = _fact(person, "他每天早上都要来一杯浓缩", at=NOW - 30 * DAY)
    services.store_fact_vector(fact_id=lexical, vector=[0.0, 1.0, 0.0, 0.0])
    services.store_fact_vector(fact_id=dense, vector=[1.0, 0.0, 0.0, 0.0])
    with overrides_scope({"reference_blend": 1}):
        ctx = _prepare(direct_stream, person, "咖啡")
        assert [f.id for f in ctx.pool] == [lexical]
        result = recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=[1.0, 0.0, 0.0, 0.0], at=NOW + DAY)
    assert result.used_vector is True
    by_id = {p.fact.id: p.fact for p in result.facts}
    assert set(by_id) == {lexical, dense}
    now = NOW + DAY
    # retention is applied after fusion
    d = by_id[dense]
    assert d.lexical_relevance == 0.0 and d.cosine == pytest.approx(1.0)
    ret_dense = decay.retention(1.0, NOW - 30 * DAY, 2160, now)
    assert d.retention == pytest.approx(ret_dense)
    assert d.score == pytest.approx(blend_score(fused_relevance(0.0, 1.0), ret_dense))
    lx = by_id[lexical]
    assert lx.cosine == pytest.approx(0.0)
    assert lx.score == pytest.approx(blend_score(fused_relevance(lx.lexical_relevance, 0.0), lx.retention))
    assert [p.fact.id for p in result.facts] == sorted(by_id, key=lambda i: -by_id[i].score)
    assert sorted(result.reinforced) == sorted([lexical, dense])


def test_dense_channel_respects_scope(person, group_stream):
    services.append_message(stream_id=group_stream.pk, role="user", content="在吗", sender_person_id=person.pk, at=NOW)
    hidden = _fact(person, "他私下在学大提琴", origin_kind="direct")
    services.store_fact_vector(fact_id=hidden, vector=[1.0, 0.0, 0.0, 0.0])
    ctx = _prepare(group_stream, person, "咖啡")
    result = recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=[1.0, 0.0, 0.0, 0.0], at=NOW + DAY)
    assert result.facts == [] and result.reinforced == []


def test_prepare_sweeps_due_facts(person, direct_stream):
    fid = _fact(person, "他今天心情不好", kind="事件", at=0)
    _prepare(direct_stream, person, "你好", at=NOW)
    assert fact_row(fid).active is False


def test_unknown_stream(person):
    with pytest.raises(services.NotFound):
        recall.prepare_turn(stream_id=9999, speaker_id=person.pk, text="x", at=NOW)


@pytest.mark.postgresql_only("synchronous_commit is PostgreSQL's; SQLite's WAL + synchronous=NORMAL never flushes at commit")
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_turns_writes_do_not_wait_for_a_flush_but_a_message_does(person, direct_stream):
    """Each of a turn's two writes is one statement that turns the flush off for its own transaction;
    a message's write leaves it on."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    def flush() -> str:
        with connection.cursor() as cur:
            cur.execute("SHOW synchronous_commit")
            return cur.fetchone()[0]

    _fact(person, "玩家不喜欢吃香菜")
    relaxed = "set_config('synchronous_commit', 'off', true)"
    with CaptureQueriesContext(connection) as message:
        services.append_message(stream_id=direct_stream.pk, role="user", content="香菜好吃吗", at=NOW + DAY,
                                sender_person_id=person.pk)
    with CaptureQueriesContext(connection) as turn:
        ctx = _prepare(direct_stream, person, "香菜好吃吗")
        recall.confirm_turn(turn_id=ctx.turn_id, at=NOW + DAY + 1)
    sent = [q["sql"] for q in turn.captured_queries]
    assert not any("synchronous_commit" in q["sql"] for q in message.captured_queries)
    assert len([q for q in sent if relaxed in q]) == 2  # prepare's trace, confirm's writes
    assert not [q for q in sent if q.strip().upper() in ("BEGIN", "COMMIT")]  # each a transaction of its own
    assert flush() == "on"
    # PostgreSQL evaluates the setting only where the statement reads it: inside a transaction (where
    # it lasts to the end) both writes are seen to have set it
    with transaction.atomic():
        again = _prepare(direct_stream, person, "香菜")
        assert flush() == "off"
    with transaction.atomic():
        assert flush() == "on"
        recall.confirm_turn(turn_id=again.turn_id, at=NOW + DAY + 2)
        assert flush() == "off"
    assert flush() == "on"


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_turns_rows_and_events_agree_outside_a_transaction(person, direct_stream):
    """Outside a transaction (as the API runs), PostgreSQL writes a turn and its trace in one statement and
    confirms in another: the same rows and events as SQLite's statements."""
    fid = _fact(person, "玩家不喜欢吃香菜")
    gone = _fact(person, "玩家觉得香菜像肥皂")
    ctx = _prepare(direct_stream, person, "香菜")
    trace = PipelineEvent.objects.get(kind="memory_retrieval_trace")
    assert trace.turn_id == ctx.turn_id and trace.payload["turnId"] == ctx.turn_id
    assert trace.stream_id == direct_stream.pk and trace.stage == "turn" and trace.at == NOW + DAY
    turn = Turn.objects.get(pk=ctx.turn_id)
    assert turn.prompt_fact_ids == [] and turn.reinforced_fact_ids == [] and turn.held_back_fact_ids == []
    assert sorted(turn.present_person_ids) == [person.pk] and turn.confirmed_at is None
    Fact.objects.filter(pk=gone).update(person_id=services.resolve_person(platform="qq", external_id="x").pk)
    result = recall.confirm_turn(turn_id=ctx.turn_id, at=NOW + DAY + 5)
    turn.refresh_from_db()
    assert result.reinforced == [fid] and turn.reinforced_fact_ids == [fid]  # the moved fact is not reinforced
    assert turn.prompt_fact_ids == [p.fact.id for p in result.facts] and turn.confirmed_at == NOW + DAY + 5
    confirmed = PipelineEvent.objects.get(kind="memory_retrieval_confirmed")
    assert confirmed.turn_id == ctx.turn_id and confirmed.payload["turnId"] == ctx.turn_id
    assert confirmed.payload["promptFactIds"] == turn.prompt_fact_ids and confirmed.stream_id == direct_stream.pk
    assert fact_row(fid).hit_count == 1 and fact_row(gone).hit_count == 0
    with pytest.raises(recall.TurnStateError):
        recall.confirm_turn(turn_id=ctx.turn_id, at=NOW + DAY + 6)
    assert PipelineEvent.objects.filter(kind="memory_retrieval_confirmed").count() == 1


def test_a_group_turn_records_what_visibility_held_back_with_the_turn(person, group_stream):
    """One memory_fact_scope_blocked event per query (text, impression) whose facts visibility held
    back, written with the turn (PostgreSQL: in the turn's one statement) — none without a record."""
    _fact(person, "他私下说喜欢咖啡", origin_kind="direct")
    shown = _fact(person, "他请群里的人喝了咖啡", origin_kind="group")
    ctx = _prepare(group_stream, person, "咖啡", impression="他想喝咖啡")
    assert [f.id for f in ctx.pool] == [shown] and ctx.blocked == 2
    assert events("memory_fact_scope_blocked") == [{"streamKind": "group", "blocked": 1}] * 2
    blocked = PipelineEvent.objects.filter(kind="memory_fact_scope_blocked")
    assert {(e.at, e.stream_id, e.turn_id, e.stage) for e in blocked} == {(NOW + DAY, None, None, "")}
    assert PipelineEvent.objects.filter(kind="memory_retrieval_trace", turn_id=ctx.turn_id).count() == 1
    again = _prepare(group_stream, person, "咖啡", record=False)
    assert again.blocked == 1 and PipelineEvent.objects.filter(kind="memory_fact_scope_blocked").count() == 2


def _episode(stream, summary, cue, ended_at):
    return services.add_episode(stream_id=stream.pk, summary=summary, cues=[cue], started_at=ended_at - 1000,
                                ended_at=ended_at, message_ids=[], at=ended_at).pk


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # as the API runs: outside a transaction
def test_a_turns_episodes_are_the_recalled_ones_then_the_newest_each_once(person, direct_stream, group_stream):
    """Cue-recalled first (best cue first), then the stream's newest, at most EPISODE_CONTEXT_LIMIT (3);
    another stream's episodes never; the same with nothing recorded (the console's playground)."""
    hiking = _episode(direct_stream, "周末去爬山", "他说周末想去爬山", NOW - 5 * DAY)
    old = _episode(direct_stream, "聊了工作", "他说工作很忙", NOW - 4 * DAY)
    cats = _episode(direct_stream, "聊了猫", "他家的猫很调皮", NOW - 2 * DAY)
    newest = _episode(direct_stream, "聊了天气", "今天很热", NOW - DAY)
    _episode(group_stream, "群里也聊爬山", "大家周末去爬山", NOW - DAY)
    ctx = _prepare(direct_stream, person, "爬山累不累")
    assert [e.id for e in ctx.episodes] == [hiking, newest, cats]
    assert ctx.episodes[1].score == 1.0 and ctx.episodes[0].score != 1.0  # the newest; recalled by its cue
    assert [e.id for e in _prepare(direct_stream, person, "猫呢", record=False).episodes] == [cats, newest]
    assert [e.id for e in _prepare(direct_stream, person, "随便聊聊").episodes] == [newest, cats]
    assert old not in {e.id for e in ctx.episodes}


@pytest.mark.postgresql_only("SQLite reads in-process: there is no round trip to save")
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_turns_recalled_episodes_are_read_with_its_write(person, direct_stream, monkeypatch):
    from memory.backends import postgresql

    hiking = _episode(direct_stream, "周末去爬山", "他说周末想去爬山", NOW - 5 * DAY)
    sent: list[list[str]] = []
    together = postgresql.read_together
    monkeypatch.setattr(postgresql, "read_together", lambda statements: sent.append([s for s, *_ in statements])
                        or together(statements))
    ctx = _prepare(direct_stream, person, "爬山累不累")
    assert [e.id for e in ctx.episodes] == [hiking]
    [write] = [s for s in sent if any("INSERT INTO turns" in q for q in s)]
    assert len(write) == 2 and "FROM episodes WHERE id IN" in write[1]
    assert Turn.objects.filter(pk=ctx.turn_id).exists()
