"""The default ranking through prepare/confirm: relevance leads, forgetting is a prior.

Each behaviour is also checked against the built-in "reference" profile where the two differ,
so the tests show what changed (they fail with the reference ranking as the default).
"""
from __future__ import annotations

import numpy as np
import pytest

from memory import recall, services
from memory.models import Turn
from memory.overrides import overrides_scope
from tests.memory.conftest import DAY, NOW, events

REFERENCE = {"reference_blend": 1}
FILLER = ["她养了一只猫", "她是一名护士", "她住在北京", "她喜欢爬山", "她对芒果过敏", "她的生日是六月", "她在学游泳", "她不喝咖啡"]


@pytest.fixture(autouse=True)
def _filler(db):
    """Unrelated facts of another person: FTS5's IDF is degenerate in a two-row corpus."""
    from tests.memory.conftest import make_person

    stranger = make_person("filler", "路人")
    for text in FILLER:
        services.add_fact(person_id=stranger.pk, content=text, at=NOW, kind="身份")


def _fact(person, content, *, at=NOW, kind="偏好", **kw):
    return services.add_fact(person_id=person.pk, content=content, at=at, kind=kind, **kw).fact_id


def _turn(stream, person, text, *, vector=None, at=NOW + DAY):
    ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=person.pk, text=text, at=at)
    result = recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=vector, at=at + 1)
    return ctx, result


def _ids(result):
    return [p.fact.id for p in result.facts]


def test_a_clearly_relevant_old_fact_beats_a_fresh_fact_sharing_common_words(person, direct_stream):
    old = _fact(person, "玩家不喜欢吃香菜", at=NOW - 180 * DAY)  # 偏好: half-life 90 days
    fresh = _fact(person, "玩家昨天去吃了火锅", kind="事件")
    ctx, result = _turn(direct_stream, person, "玩家吃香菜吗")
    assert [f.id for f in ctx.pool] == [old, fresh]
    assert _ids(result) == [old, fresh]
    by_id = {f.id: f for f in ctx.pool}
    # the fresh fact shares only 玩家/吃: clearly less relevant (by more than the prior's 0.02)
    assert by_id[old].calibrated == 1.0 and by_id[fresh].calibrated < 0.95


def test_the_reference_profile_lets_the_fresh_fact_win(person, direct_stream):
    old = _fact(person, "玩家不喜欢吃香菜", at=NOW - 180 * DAY)
    fresh = _fact(person, "玩家昨天去吃了火锅", kind="事件")
    with overrides_scope(REFERENCE):
        _ctx, result = _turn(direct_stream, person, "玩家吃香菜吗")
    assert _ids(result) == [fresh, old]


@pytest.fixture
def bank(monkeypatch):
    """The gate's background bank, in the tests' four dimensions: small talk points along the first axis."""
    from memory.search import background

    vectors = np.array([[1.0, 0.0, 0.0, 0.0], [0.6, 0.0, 0.0, 0.8]], dtype=np.float32)
    monkeypatch.setattr(background, "bank_vectors", lambda: vectors)
    return vectors


def test_small_talk_brings_nothing(person, other_person, direct_stream, bank):
    run = _fact(person, "主人每天早上跑步", kind="习惯")
    cook = _fact(person, "主人最近在学做菜", kind="习惯")
    _fact(other_person, "老周住在杭州", kind="身份")
    services.store_fact_vector(fact_id=run, vector=[0.3, 1.0, 0.0, 0.0])
    services.store_fact_vector(fact_id=cook, vector=[0.25, 0.0, 1.0, 0.0])
    query = [1.0, 0.0, 0.0, 0.0]  # sits on the bank: background 1.0; cosines 0.29 and 0.24, no clear leader
    ctx, result = _turn(direct_stream, person, "早上好", vector=query)
    assert {f.id for f in ctx.pool} == {run}  # 早上 matches lexically, but it is a generic chat word
    assert all(not f.eligible for f in ctx.pool) and ctx.facts == []
    assert result.facts == [] and result.reinforced == [] and result.held_back == []
    with overrides_scope(REFERENCE):
        _ctx, multiplied = _turn(direct_stream, person, "早上好", vector=query, at=NOW + 2 * DAY)
    assert sorted(_ids(multiplied)) == sorted([run, cook])


def test_a_cosine_standing_out_of_the_querys_background_passes(person, other_person, direct_stream, bank):
    cook = _fact(person, "主人最近在学做菜", kind="习惯")
    _fact(other_person, "老周住在杭州", kind="身份")
    services.store_fact_vector(fact_id=cook, vector=[0.0, 0.5, 1.0, 0.0])
    # far from small talk (background 0.6), close to the fact (cosine 0.89)
    _ctx, result = _turn(direct_stream, person, "我最近想去杭州玩", vector=[0.0, 0.0, 1.0, 0.0])
    assert _ids(result) == [cook]
    fact = result.facts[0].fact
    assert fact.cosine == pytest.approx(0.894, abs=0.01) and fact.gate in ("dense", "leads_dense")
    assert fact.margin == pytest.approx(0.894 - 0.0, abs=0.01)  # the query's best cosine with the bank is 0


def test_at_comparable_relevance_the_fresher_fact_wins(person, direct_stream):
    older = _fact(person, "他喜欢吃苹果", at=NOW - 60 * DAY)
    fresher = _fact(person, "他喜欢吃香蕉", at=NOW)
    _ctx, result = _turn(direct_stream, person, "他喜欢吃什么")
    assert _ids(result) == [fresher, older]
    a, b = (p.fact for p in result.facts)
    assert a.calibrated == b.calibrated == 1.0 and a.prior > b.prior


def test_frozen_facts_rank_below_active_ones_of_comparable_relevance(person, direct_stream):
    frozen = _fact(person, "他在准备考试", kind="状态", at=NOW - 3 * DAY)  # 12 h half-life: frozen by the sweep
    active = _fact(person, "他在准备搬家", kind="习惯", at=NOW - 3 * DAY)
    ctx, result = _turn(direct_stream, person, "他在准备什么")
    by_id = {f.id: f for f in ctx.pool}
    assert by_id[frozen].active is False and by_id[frozen].prior == 0.0
    assert _ids(result) == [active, frozen]


def test_pinned_facts_stay(person, direct_stream):
    from curation.services import pin_fact

    other = _fact(person, "他的生日是五月一日", kind="日期", at=NOW - 400 * DAY)
    pinned = _fact(person, "他的生日是三月一日", kind="日期", at=NOW - 400 * DAY)
    pin_fact(fact_id=pinned, at=NOW - 400 * DAY)
    ctx, result = _turn(direct_stream, person, "他的生日", at=NOW + 200 * DAY)
    assert [f.id for f in ctx.pool] == [pinned, other]  # same relevance: the pin's retention decides
    assert _ids(result) == [pinned, other]


def test_slot_conflict_groups_are_still_completed_whole(person, direct_stream):
    chengdu = _fact(person, "他现在住在成都", slot="居住地", kind="身份", at=NOW - 200 * DAY)
    hangzhou = _fact(person, "他现在住在杭州", slot="居住地", kind="身份")
    _ctx, result = _turn(direct_stream, person, "成都")
    assert _ids(result) == [chengdu]
    assert [p.fact.id for p in result.conflict_members] == [hangzhou]


def test_what_forgetting_held_back_is_recorded(person, direct_stream):
    # relevance alone puts the older, slightly more relevant fact first; the prior swaps them
    older = _fact(person, "他喜欢吃苹果", at=NOW - 150 * DAY)
    fresher = _fact(person, "他很喜欢吃苹果和梨", at=NOW)
    with overrides_scope({"fact_recall_limit": 1, "retention_prior": 0.2}):
        ctx, result = _turn(direct_stream, person, "苹果")
    by_id = {f.id: f for f in ctx.pool}
    assert by_id[older].calibrated == 1.0 and by_id[fresher].calibrated < 1.0
    assert _ids(result) == [fresher]
    assert [f.id for f in result.held_back] == [older]
    turn = Turn.objects.get(pk=ctx.turn_id)
    assert turn.prompt_fact_ids == [fresher] and turn.held_back_fact_ids == [older]
    confirmed = events("memory_retrieval_confirmed")[-1]
    assert confirmed["heldBackFactIds"] == [older]
    assert [t["factId"] for t in confirmed["promptTerms"]] == [fresher]
    assert events("memory_retrieval_trace")[-1]["heldBackFactIds"] == [older]


def _day_of(ms: int) -> str:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from django.conf import settings

    return datetime.fromtimestamp(ms / 1000, ZoneInfo(settings.TIME_ZONE)).strftime("%Y年%m月%d日")


def test_a_question_naming_a_date_ranks_what_was_told_then_first(person, direct_stream):
    then = NOW - 200 * DAY
    told_then = _fact(person, "玩家在杭州看了一场汽车发布会", at=then, kind="事件")
    told_later = _fact(person, "玩家在杭州看了周杰伦的演唱会", at=NOW - 10 * DAY, kind="事件")
    plain, _ = _turn(direct_stream, person, "玩家在杭州看了什么")
    assert [f.id for f in plain.pool][:2] == [told_later, told_then]  # as relevant: the fresher first
    ctx, result = _turn(direct_stream, person, f"玩家{_day_of(then)}在杭州看了什么")
    assert _ids(result)[:2] == [told_then, told_later]
    by_id = {f.id: f for f in ctx.pool}
    assert by_id[told_then].timed and not by_id[told_later].timed
    with overrides_scope(REFERENCE):
        ref, _ = _turn(direct_stream, person, f"玩家{_day_of(then)}在杭州看了什么")
    assert not any(f.timed for f in ref.pool)
