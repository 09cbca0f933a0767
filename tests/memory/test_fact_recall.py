"""FTS fact recall, duplicate detection and visibility scope through the store.

docs/REFERENCE.md §2, §3 and §9, plus a property: no user text can
reach the FTS5 parser as syntax.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory import selectors, services
from memory.models import Fact
from tests.memory.conftest import NOW, events, fact_row

SIX_FACTS = [
    "玩家不喜欢吃香菜",
    "玩家习惯在深夜写代码",
    "月璃今天穿了水母主题的连衣裙",
    "玩家养了一只叫团子的猫",
    "玩家的生日是三月七日",
    "玩家最近在学 Rust",
]


def _recall(person_ids, query, stream_kind="direct", **kw):
    return selectors.recall_facts_in_scope(person_ids=person_ids, query=query, now=NOW, stream_kind=stream_kind, **kw)


@pytest.fixture
def six(person):
    return [services.add_fact(person_id=person.pk, content=c, kind="偏好", at=NOW).fact_id for c in SIX_FACTS]


def _contents(person, query):
    return [f.content for f in _recall([person.pk], query)]


class TestFts5Recall:
    def test_jieba_word(self, person, six):
        assert _contents(person, "香菜")[0] == "玩家不喜欢吃香菜"

    def test_custom_name_via_bigram(self, person, six):
        result = _contents(person, "月璃")
        assert result and "月璃" in result[0]

    def test_compound_word(self, person, six):
        result = _contents(person, "连衣裙")
        assert result and "连衣裙" in result[0]

    def test_normal_segmentation_first(self, person, six):
        assert _contents(person, "深夜写代码")[0] == "玩家习惯在深夜写代码"
        assert _contents(person, "猫")[0] == "玩家养了一只叫团子的猫"

    def test_english(self, person, six):
        result = _contents(person, "Rust")
        assert result and "Rust" in result[0]
        assert _contents(person, "rust")[0] == result[0]

    def test_natural_question(self, person, six):
        assert _contents(person, "我上次说的那个香菜是什么")[0] == "玩家不喜欢吃香菜"

    def test_a_word_jieba_cuts_otherwise_still_covers_the_query(self, person):
        # jieba reads "这部手机" as 部手机 and the fact's "我的手机" as 手机: without credit for the part that
        # memory holds, the phone fact covered nothing of the question and the gate held it back
        phone = services.add_fact(person_id=person.pk, content="我的手机是苹果的iPhone14", kind="偏好", at=NOW).fact_id
        laptop = services.add_fact(person_id=person.pk, content="我的电脑型号是ThinkPad", kind="偏好", at=NOW).fact_id
        services.add_fact(person_id=person.pk, content="我家在龙湖小区，绿化很好", kind="偏好", at=NOW)
        found = {f.id: f for f in _recall([person.pk], "我手上拿的这部手机是什么型号来着？", return_candidates=True)}
        # 型号 and 部手机 (by 手机, all of it that memory holds) weigh alike: each fact covers half the question
        assert found[phone].coverage == found[laptop].coverage == 0.5 and found[phone].eligible

    def test_a_fragment_of_a_word_alone_does_not_open_the_gate(self, person):
        services.add_fact(person_id=person.pk, content="主人每天早上跑步", kind="习惯", at=NOW)
        services.add_fact(person_id=person.pk, content="主人最近在学做菜", kind="习惯", at=NOW)
        found = _recall([person.pk], "早上好", return_candidates=True)  # 早上好: one word; 早上 is all memory holds
        assert [f.coverage for f in found] == [0.0] and not found[0].eligible

    def test_unrelated_query_is_empty(self, person, six):
        assert _contents(person, "量子力学薛定谔") == []

    @pytest.mark.parametrize("query", ["", "   ", "！？。，", "*", "()"])
    def test_queries_without_terms_are_empty(self, person, six, query):
        assert _recall([person.pk], query) == []

    def test_scores_and_bm25_are_consistent(self, person, six):
        from memory.engine import decay

        # the reference's numbers hold under the built-in reference profile (the default ranking changed on purpose)
        hit = _recall([person.pk], "香菜", overrides={"reference_blend": 1})[0]
        assert hit.bm25 < 0
        assert hit.lexical_relevance == decay.relevance_from_bm25(hit.bm25)
        assert hit.score == decay.score(hit.bm25, hit.retention)  # bit-identical under the reference profile
        # default: the best candidate is the pool's relevance unit, plus the retention prior
        best = _recall([person.pk], "香菜")[0]
        assert best.id == hit.id and best.calibrated == 1.0 and best.coverage == 1.0
        assert best.score == 1.0 + 0.02 * best.retention

    def test_limit_and_return_candidates(self, person, six):
        assert len(_recall([person.pk], "玩家", limit=2)) == 2
        assert len(_recall([person.pk], "玩家", limit=2, return_candidates=True)) == 5  # pool = limit·3, 5 rows match
        assert _recall([person.pk], "玩家", limit=0) == []

    def test_empty_person_list(self, person, six):
        assert _recall([], "香菜") == []


class TestDuplicates:
    def test_reordered_text_is_the_same_fact(self, person):
        a = services.add_fact(person_id=person.pk, content="玩家不喜欢吃香菜", kind="偏好", at=NOW)
        b = services.add_fact(person_id=person.pk, content="香菜玩家不喜欢吃", kind="偏好", at=NOW)
        assert a.created is True
        assert b.fact_id == a.fact_id and b.created is False
        assert Fact.objects.filter(person=person).count() == 1

    def test_opposite_order_is_not_merged(self, person):
        services.add_fact(person_id=person.pk, content="玩家喜欢猫", kind="偏好", at=NOW)
        services.add_fact(person_id=person.pk, content="猫喜欢玩家", kind="偏好", at=NOW)
        assert Fact.objects.filter(person=person).count() == 2

    def test_minor_variation_is_merged(self, person):
        a = services.add_fact(person_id=person.pk, content="玩家习惯在深夜写代码", kind="习惯", at=NOW)
        b = services.add_fact(person_id=person.pk, content="玩家习惯深夜写代码。", kind="习惯", at=NOW)
        assert b.fact_id == a.fact_id
        assert fact_row(a.fact_id).content == "玩家习惯在深夜写代码"  # the stored text is kept

    def test_frozen_fact_is_still_a_duplicate(self, person):
        a = services.add_fact(person_id=person.pk, content="他今天心情不好", kind="事件", at=NOW)
        services.sweep(at=NOW + 100 * 86_400_000)
        b = services.add_fact(person_id=person.pk, content="他今天心情很不好", kind="事件", at=NOW + 100 * 86_400_000)
        # char Jaccard 6/7 ≥ 0.85, bigram 5/7 ≥ 0.55 → reinforced, not duplicated
        assert b.fact_id == a.fact_id


class TestScope:
    @pytest.fixture
    def direct_fact(self, person):
        return services.add_fact(person_id=person.pk, content="他私下说喜欢咖啡", origin_kind="direct", at=NOW).fact_id

    def test_direct_origin_hidden_in_group(self, person, direct_fact):
        assert _recall([person.pk], "咖啡", "group") == []
        assert selectors.recall_facts_across_persons(query="咖啡", now=NOW, stream_kind="group") == []
        assert selectors.top_facts(person_id=person.pk, now=NOW, stream_kind="group") == []

    def test_direct_origin_visible_with_private_in_group(self, person, direct_fact):
        assert [f.id for f in _recall([person.pk], "咖啡", "group", private_in_group=True)] == [direct_fact]
        assert [
            f.id for f in selectors.recall_facts_across_persons(
                query="咖啡", now=NOW, stream_kind="group", private_in_group=True
            )
        ] == [direct_fact]
        assert [
            f.id for f in selectors.top_facts(person_id=person.pk, now=NOW, stream_kind="group", private_in_group=True)
        ] == [direct_fact]

    def test_private_in_group_setting_is_the_default(self, person, direct_fact, settings):
        settings.PRIVATE_FACTS_IN_GROUP = True
        assert [f.id for f in _recall([person.pk], "咖啡", "group")] == [direct_fact]

    @pytest.mark.parametrize("kind", ["direct", "desktop"])
    def test_direct_origin_visible_in_direct_and_desktop(self, person, direct_fact, kind):
        assert [f.id for f in _recall([person.pk], "咖啡", kind)] == [direct_fact]
        assert [f.id for f in selectors.top_facts(person_id=person.pk, now=NOW, stream_kind=kind)] == [direct_fact]

    def test_blocked_event_counts_the_hidden_rows(self, person):
        for text in ("他私下喝了咖啡", "他在家煮咖啡", "他说咖啡太苦"):
            services.add_fact(person_id=person.pk, content=text, origin_kind="direct", at=NOW)
        services.add_fact(person_id=person.pk, content="他请群里的人喝了咖啡", origin_kind="group", at=NOW)
        result = _recall([person.pk], "咖啡", "group")
        assert [f.content for f in result] == ["他请群里的人喝了咖啡"]
        assert events("memory_fact_scope_blocked") == [{"streamKind": "group", "blocked": 3}]

    def test_no_event_when_nothing_is_blocked(self, person):
        services.add_fact(person_id=person.pk, content="他请群里的人喝了咖啡", origin_kind="group", at=NOW)
        assert len(_recall([person.pk], "咖啡", "group")) == 1
        assert events("memory_fact_scope_blocked") == []

    def test_playground_reads_write_no_event(self, person, direct_fact):
        assert _recall([person.pk], "咖啡", "group", events=False) == []
        assert events("memory_fact_scope_blocked") == []

    def test_stream_kind_is_required(self, person):
        with pytest.raises(TypeError):
            selectors.recall_facts_in_scope(person_ids=[person.pk], query="咖啡", now=NOW)
        with pytest.raises(TypeError):
            selectors.recall_facts_across_persons(query="咖啡", now=NOW)
        with pytest.raises(TypeError):
            selectors.top_facts(person_id=person.pk, now=NOW)

    def test_episodes_are_per_stream(self, person, group_stream):
        services.add_episode(
            stream_id=1, summary="聊了熬夜", cues=["他提到熬夜的时候"], started_at=1000, ended_at=2000,
            message_ids=[], at=NOW,
        )
        assert selectors.recall_episodes(stream_id=group_stream.pk, query="熬夜") == []
        assert len(selectors.recall_episodes(stream_id=1, query="熬夜")) == 1

    def test_origin_only_upgrades_direct_to_group(self, person, other_person):
        a = services.add_fact(person_id=person.pk, content="他喜欢喝冰美式", origin_kind="direct", at=NOW)
        b = services.add_fact(person_id=person.pk, content="他喜欢喝冰美式", origin_kind="group", at=NOW)
        assert b.fact_id == a.fact_id and b.origin_promoted is True
        assert fact_row(a.fact_id).origin_kind == "group"

        c = services.add_fact(person_id=other_person.pk, content="他喜欢喝冰美式", origin_kind="group", at=NOW)
        d = services.add_fact(person_id=other_person.pk, content="他喜欢喝冰美式", origin_kind="direct", at=NOW)
        assert d.fact_id == c.fact_id and d.origin_promoted is False
        assert fact_row(c.fact_id).origin_kind == "group"

    @pytest.mark.parametrize("kind", ["group", "direct", "desktop"])
    def test_legacy_rows_visible_everywhere(self, person, kind):
        texts = ["他喜欢咖啡", "他讨厌咖啡因", "他常去咖啡馆"]
        for t in texts:
            services.add_fact(person_id=person.pk, content=t, at=NOW)
        in_scope = _recall([person.pk], "咖啡", kind)
        across = selectors.recall_facts_across_persons(query="咖啡", now=NOW, stream_kind=kind)
        assert [f.id for f in in_scope] == [f.id for f in across]
        assert sorted(f.content for f in selectors.top_facts(person_id=person.pk, now=NOW, stream_kind=kind)) == sorted(
            texts
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=40))
def test_arbitrary_unicode_queries_never_reach_the_parser(person, query):
    if not Fact.objects.filter(person=person).exists():
        for c in SIX_FACTS:
            services.add_fact(person_id=person.pk, content=c, kind="偏好", at=NOW)
    result = _recall([person.pk], query)
    assert all(f.person_id == person.pk for f in result)
    selectors.recall_facts_across_persons(query=query, now=NOW, stream_kind="group")
    selectors.recall_episodes(stream_id=1, query=query)
    selectors.search_knowledge(query=query)
    selectors.search_messages(stream_id=1, query=query)


FTS_OPERATORS = '"*()-:^+'


def _without_operators(query: str) -> str:
    return "".join(" " if c in FTS_OPERATORS else c for c in query)


@pytest.mark.parametrize("query", ['香菜 AND 猫', '"香菜"', '香菜*', 'NOT 香菜', 'tokens:香菜', '(香菜', '香菜 NEAR(a b)',
                                   'C++ 和香菜', 'C# 香菜', 'AT&T 香菜'])
def test_fts_operators_are_always_quoted_a_word_beside_one_is_still_found(person, query):
    """Terms the tokenizer keeps whole with an operator character in them (``c++``, ``c#``, ``at&t``) would be
    FTS5 syntax errors unquoted; every operator of a query is text and 香菜 finds its fact."""
    fid = services.add_fact(person_id=person.pk, content="玩家不喜欢吃香菜", kind="偏好", at=NOW).fact_id
    assert [f.id for f in _recall([person.pk], query)] == [fid]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.sampled_from(['a*b NEAR c', '"', '""', 'AND OR NOT', '-x', 'tokens:香菜', '^猫', '(香菜', 'NEAR(a b)',
                             'C++ 香菜', 'c#', 'AT&T'])
       | st.text(alphabet='"*()-:^+ NEARORANDOT香菜猫a', max_size=20))
def test_fts_operators_are_always_quoted(person, query):
    """Whatever operators a query holds, it finds what its words alone find (and never raises)."""
    if not Fact.objects.filter(person=person).exists():
        services.add_fact(person_id=person.pk, content="玩家不喜欢吃香菜", kind="偏好", at=NOW)
        services.add_fact(person_id=person.pk, content="and or not near 都是英文单词", kind="偏好", at=NOW)
    found = [f.id for f in _recall([person.pk], query)]
    assert found == [f.id for f in _recall([person.pk], _without_operators(query))]



def test_a_scoped_fact_copy_is_what_dataclasses_replace_makes():
    """ScopedFact.copy_with: the ranking's cheap copy — equal to dataclasses.replace, the original untouched."""
    from dataclasses import replace

    fact = selectors.ScopedFact(
        id=1, person_id=2, kind="偏好", content="喜欢打篮球", slot="", origin_kind="observation", retention=0.9,
        score=0.5, lexical_relevance=0.7, bm25=-3.2, half_life_hours=720.0, active=True,
    )
    changed = fact.copy_with(score=0.8, cosine=0.4, eligible=False)
    assert changed == replace(fact, score=0.8, cosine=0.4, eligible=False)
    assert (fact.score, fact.cosine, fact.eligible) == (0.5, None, True)
    assert hash(changed) == hash(replace(fact, score=0.8, cosine=0.4, eligible=False))
    with pytest.raises(TypeError, match="no field scroe"):
        fact.copy_with(scroe=0.8)


def test_a_scoped_fact_recorded_in_a_turn_reads_back_as_it_was():
    """ScopedFact.as_dict / from_dict: every recorded field comes back (the cosine and the source
    included); the ranking's terms are not recorded (the confirm ranks again); a turn recorded
    before a key was added reads that key's default."""
    fact = selectors.ScopedFact(
        id=7, person_id=3, kind="偏好", content="喜欢打篮球", slot="爱好", origin_kind="group", retention=0.42,
        score=0.31, lexical_relevance=0.6, bm25=-2.5, half_life_hours=2160.0, active=False, cosine=0.37,
        source="context", coverage=0.5, rarest=True, eligible=False,
        relevance=0.55, calibrated=0.9, prior=0.01, margin=0.12, gate="held",
    )
    back = selectors.ScopedFact.from_dict(fact.as_dict())
    assert back == fact.copy_with(relevance=None, calibrated=None, prior=None, margin=None, gate="")
    assert back.as_dict() == fact.as_dict()
    assert (back.cosine, back.source) == (0.37, "context")
    old = {"factId": 7, "personId": 3, "score": 0.31, "lexical": 0.6, "retention": 0.42, "halfLife": 2160.0}
    assert selectors.ScopedFact.from_dict(old) == selectors.ScopedFact(
        id=7, person_id=3, kind="", content="", slot="", origin_kind="legacy", retention=0.42, score=0.31,
        lexical_relevance=0.6, bm25=None, half_life_hours=2160.0, active=True,
    )
