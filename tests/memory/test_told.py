"""Where a fact was told: its source message recorded, the neighbourhood's match with the query, the
lift in the ranking, the extractor's guess of the message and forget's reach."""
from __future__ import annotations

import pytest

from memory import selectors, services
from memory.engine.scoring import DEFAULT_TOLD_GAIN
from memory.models import Fact, Message
from memory.pipeline import heard_in
from memory.privacy import forget
from memory.selectors.told import told_shares
from tests.memory.conftest import NOW

MINUTE = 60_000
GAP = 60 * MINUTE


def _say(stream, person, text, at, role="user"):
    message, _ = services.append_message(stream_id=stream.pk, role=role, content=text,
                                         sender_person_id=person.pk if role == "user" else None, at=at)
    return message


def _conversation(stream, person, lines, start):
    return [_say(stream, person, text, start + k * MINUTE) for k, text in enumerate(lines)]


@pytest.fixture
def told(person, direct_stream):
    """Two conversations a day apart, a fact heard in each, in words the questions do not use."""
    hike = _conversation(direct_stream, person, ["周六我们去爬了黄山", "对，就是那个", "山顶的云海特别壮观"], NOW - 48 * 3_600_000)
    music = _conversation(direct_stream, person, ["昨晚去听了一场演唱会", "嗯，你猜他们唱了什么", "乐队唱了很多老歌"], NOW - 24 * 3_600_000)
    a = services.add_fact(person_id=person.pk, content="凌白去过那里", kind="事件", at=NOW - 47 * 3_600_000,
                          source_message_id=hike[1].pk).fact_id
    b = services.add_fact(person_id=person.pk, content="凌白喜欢现场", kind="偏好", at=NOW - 23 * 3_600_000,
                          source_message_id=music[1].pk).fact_id
    plain = services.add_fact(person_id=person.pk, content="凌白的云海照片", kind="事件", at=NOW - 3_600_000).fact_id
    return {"hike": hike, "music": music, "a": a, "b": b, "plain": plain}


def _shares(fact_ids, query, **knobs):
    """told_shares of facts as a caller has them: with the message each was heard in (their rows carry it)."""
    sources = dict(Fact.objects.filter(pk__in=fact_ids, source_message__isnull=False).values_list("id", "source_message"))
    return told_shares(sources, query, **{"window": 2, "gap_ms": GAP, **knobs})


def test_the_neighbourhood_of_the_source_message_matches_the_query(told):
    shares = _shares([told["a"], told["b"], told["plain"]], "黄山云海")
    assert shares == {told["a"]: 1.0}  # its neighbours hold the words; the other conversation does not
    shares = _shares([told["a"], told["b"]], "演唱会")
    assert shares == {told["b"]: 1.0}
    # only the message itself ("对，就是那个"): nothing to match
    assert _shares([told["a"]], "黄山云海", window=0) == {}
    # one line on each side: the first line holds 黄山 but not the last one's 云海 — still a match
    assert _shares([told["a"]], "黄山", window=1) == {told["a"]: 1.0}


def test_a_silence_ends_the_neighbourhood(person, direct_stream):
    before = _say(direct_stream, person, "我们去爬了黄山", NOW - 10 * GAP)
    source = _say(direct_stream, person, "好累啊", NOW - 2 * GAP)  # hours later: another conversation
    fact = services.add_fact(person_id=person.pk, content="凌白累了", kind="状态", at=NOW - GAP,
                             source_message_id=source.pk).fact_id
    assert before.pk < source.pk
    assert _shares([fact], "黄山") == {}
    assert _shares([fact], "黄山", gap_ms=20 * GAP) == {fact: 1.0}


def test_the_share_is_the_querys_informative_mass_held(told):
    # three words, each in one message: the hike's neighbourhood holds one of them, the concert's two
    shares = _shares([told["a"], told["b"]], "黄山 演唱会 老歌")
    assert shares == {told["a"]: pytest.approx(1 / 3), told["b"]: pytest.approx(2 / 3)}
    # a generic chat word weighs nothing (the gate's bank): 最近 is in neither the mass nor the match
    assert _shares([told["a"]], "黄山 最近") == {told["a"]: 1.0}
    assert _shares([told["a"], told["b"]], "最近怎么样") == {}
    # nor a function word: 什么 in what was said says nothing about what the question asks
    assert _shares([told["a"], told["b"]], "什么") == {}
    # a word no message holds is no part of the mass either (凌白 is only the facts' name for the person)
    assert _shares([told["a"]], "凌白 黄山") == {told["a"]: 1.0}


def test_recall_lifts_the_fact_heard_in_the_matching_conversation(told, person):
    options = {"person_ids": [person.pk], "now": NOW, "stream_kind": "direct", "return_candidates": True}
    query = "凌白 云海 黄山"
    plain = {f.id: f for f in selectors.recall_facts_in_scope(query=query, overrides={"told_gain": 0.0}, **options)}
    assert told["a"] in plain and all(not f.told for f in plain.values())
    # a caller's final ranking (no return_candidates) reads where each candidate was told
    ranked = selectors.rank_facts(list(plain.values()), {}, query=query)
    by_id = {f.id: f for f in ranked}
    assert by_id[told["a"]].told == 1.0 and by_id[told["plain"]].told is None  # no message: nothing read
    assert by_id[told["a"]].score == pytest.approx(plain[told["a"]].score + DEFAULT_TOLD_GAIN)
    assert by_id[told["a"]].terms()["told"] == 1.0
    # the reference ranking and told_gain 0 leave it out
    assert all(f.told is None for f in selectors.rank_facts(list(plain.values()), {"reference_blend": 1}, query=query))
    assert all(f.told is None for f in selectors.rank_facts(list(plain.values()), {"told_gain": 0.0}, query=query))


def test_a_reinforced_fact_keeps_the_message_it_was_first_heard_in(told, person):
    again = services.add_fact(person_id=person.pk, content="凌白去过那里", kind="事件", at=NOW,
                              source_message_id=told["music"][0].pk)
    assert again.fact_id == told["a"] and not again.created
    assert Fact.objects.get(pk=told["a"]).source_message_id == told["hike"][1].pk
    services.add_fact(person_id=person.pk, content="凌白的云海照片", kind="事件", at=NOW,
                      source_message_id=told["hike"][2].pk)
    assert Fact.objects.get(pk=told["plain"]).source_message_id == told["hike"][2].pk  # it had none


def test_the_extractor_guesses_the_message_a_fact_was_heard_in(person, other_person):
    batch = [
        Message(pk=1, content="我下个月要搬去成都了", sender_person_id=person.pk),
        Message(pk=2, content="成都挺好的，吃的多", sender_person_id=other_person.pk),
        Message(pk=3, content="哈哈是啊", sender_person_id=person.pk),
    ]
    assert heard_in("凌白下个月搬去成都", batch, person.pk) == 1  # the person's own line first
    assert heard_in("成都吃的东西多", batch, other_person.pk) == 2
    assert heard_in("成都吃的东西多", batch, 999) == 2  # nobody's own: the best of all
    assert heard_in("喜欢猫", batch, person.pk) is None  # nothing shared: no guess


def test_forgetting_a_message_forgets_the_facts_heard_in_it(told):
    plan = forget.plan_forget(target="message", target_id=told["hike"][1].pk)
    assert told["a"] in plan.facts and told["b"] not in plan.facts
    forget.forget(target="message", target_id=told["hike"][1].pk, user="tester", expected_digest=plan.digest())
    assert not Fact.objects.filter(pk=told["a"]).exists() and Fact.objects.filter(pk=told["b"]).exists()


NEIGHBOURS = "JOIN messages m ON m.stream_id = s.stream_id"  # the neighbourhood statement


def test_a_turn_records_where_each_candidate_was_heard_and_its_confirm_lifts_by_it(told, person, direct_stream):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory import overrides, recall

    ctx = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="凌白去过黄山看云海吗", at=NOW)
    pool = {f.id: f for f in ctx.pool}
    assert pool[told["a"]].source_message_id == told["hike"][1].pk and pool[told["a"]].told > 0
    assert pool[told["plain"]].source_message_id is None and pool[told["plain"]].told is None
    with CaptureQueriesContext(connection) as confirm:
        result = recall.confirm_turn(turn_id=ctx.turn_id, at=NOW + 1)
    confirmed = {p.fact.id: p.fact for p in result.facts}
    assert confirmed[told["a"]].told == pool[told["a"]].told  # the recorded pool keeps the message and the share
    assert not [q for q in confirm.captured_queries if NEIGHBOURS in q["sql"]]  # read by the prepare, not again
    # a profile changed between prepare and confirm: the shares are read again under it
    again = recall.prepare_turn(stream_id=direct_stream.pk, speaker_id=person.pk, text="凌白去过黄山看云海吗", at=NOW + 2)
    with overrides.overrides_scope({"told_window": 0}), CaptureQueriesContext(connection) as confirm:
        result = recall.confirm_turn(turn_id=again.turn_id, at=NOW + 3)
    assert [q for q in confirm.captured_queries if "SELECT id, id, created_at, tokens FROM messages" in q["sql"]]
    assert told["a"] not in {p.fact.id: p.fact for p in result.facts if p.fact.told}  # its own line holds nothing


def test_only_candidates_the_gate_lets_pass_are_read(told, person):
    from memory.engine.scoring import Gate

    services.add_fact(person_id=person.pk, content="凌白拍的云海照片很美", kind="事件", at=NOW - 46 * 3_600_000,
                      source_message_id=told["hike"][2].pk)
    query = "凌白 云海 照片"  # 凌白 alone (in every fact) covers too little of it: those facts are held
    pool = selectors.recall_facts_in_scope(person_ids=[person.pk], query=query, now=NOW, stream_kind="direct",
                                           return_candidates=True, overrides={})
    ranked = {f.id: f for f in selectors.rank_facts(pool, {}, query=query)}
    held = [f for f in ranked.values() if f.gate not in Gate.PASSING and f.source_message_id]
    passing = [f for f in ranked.values() if f.gate in Gate.PASSING and f.source_message_id]
    assert passing and all(f.told is not None for f in passing)
    assert held and all(f.told is None for f in held)


def test_a_deleted_message_lifts_nothing(told):
    Message.objects.filter(pk=told["hike"][1].pk).delete()
    assert Fact.objects.get(pk=told["a"]).source_message_id is None  # SET_NULL
    assert told_shares({told["a"]: told["hike"][1].pk}, "黄山云海", window=2, gap_ms=GAP) == {}  # a stale id
