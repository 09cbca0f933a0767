"""Association edges and the recall action's spreading filters — docs/REFERENCE.md §8 and §16."""
from __future__ import annotations

import math

import pytest

from memory import recall, services
from memory.models import MemoryEdge, MemoryNode
from tests.memory.conftest import NOW, H, events


def _edge(a: tuple[str, int], b: tuple[str, int]) -> MemoryEdge | None:
    na = MemoryNode.objects.get(ref_kind=a[0], ref_id=a[1]).pk
    nb = MemoryNode.objects.get(ref_kind=b[0], ref_id=b[1]).pk
    return MemoryEdge.objects.filter(source_id=min(na, nb), target_id=max(na, nb)).first()


class TestLinkTogether:
    def test_three_refs_make_three_edges(self, db):
        assert services.link_together(refs=[("fact", 1), ("episode", 2), ("knowledge", 3)], at=NOW) == 3
        assert MemoryEdge.objects.count() == 3
        assert set(MemoryEdge.objects.values_list("strength", flat=True)) == {0.35}
        assert all(e.source_id < e.target_id for e in MemoryEdge.objects.all())

    def test_successive_reinforcement(self, db):
        pair = [("fact", 1), ("fact", 2)]
        expected = [0.35, 0.5775, 0.725375, 0.82149375]
        for i, value in enumerate(expected):
            services.link_together(refs=pair, at=NOW + i)
            edge = _edge(*pair)
            assert edge.strength == pytest.approx(value, abs=1e-12)
            assert edge.updated_at == NOW + i
        assert MemoryEdge.objects.count() == 1

    def test_order_does_not_matter_and_duplicates_are_ignored(self, db):
        services.link_together(refs=[("fact", 2), ("fact", 1)], at=NOW)
        assert services.link_together(refs=[("fact", 1), ("fact", 1), ("fact", 2), ("fact", 2)], at=NOW) == 1
        assert MemoryEdge.objects.count() == 1
        assert _edge(("fact", 1), ("fact", 2)).strength == pytest.approx(0.5775)

    def test_fewer_than_two_distinct_refs(self, db):
        assert services.link_together(refs=[("fact", 1), ("fact", 1)], at=NOW) == 0
        assert services.link_together(refs=[], at=NOW) == 0
        assert MemoryNode.objects.count() == 0

    def test_unknown_layer(self, db):
        with pytest.raises(services.MemoryInputError):
            services.link_together(refs=[("fact", 1), ("person", 2)], at=NOW)
        assert MemoryNode.objects.count() == 0  # one transaction: nothing half-written

    def test_reinforcement_uses_stored_strength_and_reactivates(self, db):
        pair = [("fact", 1), ("fact", 2)]
        services.link_together(refs=pair, at=0)
        assert services.decay_edges(at=2000 * H) == 1
        assert _edge(*pair).active is False
        services.link_together(refs=pair, at=2000 * H)
        edge = _edge(*pair)
        assert edge.active is True and edge.strength == pytest.approx(0.5775)


class TestDecayEdges:
    BOUNDARY_H = 720 * math.log2(3.5)  # 1301.3 h for strength 0.35

    def _edge_aged(self, hours: float, ref: int) -> None:
        services.link_together(refs=[("fact", ref), ("fact", ref + 1)], at=NOW - round(hours * H))

    def test_boundary(self, db):
        assert self.BOUNDARY_H == pytest.approx(1301.3, abs=0.01)
        self._edge_aged(2000, 10)
        self._edge_aged(10, 20)
        self._edge_aged(self.BOUNDARY_H - 24, 30)
        self._edge_aged(self.BOUNDARY_H + 24, 40)
        assert services.decay_edges(at=NOW) == 2
        assert _edge(("fact", 10), ("fact", 11)).active is False
        assert _edge(("fact", 20), ("fact", 21)).active is True
        assert _edge(("fact", 30), ("fact", 31)).active is True
        assert _edge(("fact", 40), ("fact", 41)).active is False
        assert MemoryEdge.objects.count() == 4  # never deletes
        assert services.decay_edges(at=NOW) == 0
        assert events("edges_decayed")[0] == {"frozen": 2}

    def test_strong_and_future_edges(self, db):
        for _ in range(10):
            services.link_together(refs=[("fact", 1), ("fact", 2)], at=NOW)
        services.link_together(refs=[("fact", 3), ("fact", 4)], at=NOW + 1000 * H)  # future: no decay
        assert services.decay_edges(at=NOW + 2000 * H) == 0


class TestRecallSpreadVisibility:
    """The recall action's spreading filters through memory.recall.cognitive_recall (hops 2; the product default is 0)."""

    @pytest.fixture
    def seed(self, person):
        return self._fact(person, "他喜欢手冲咖啡", "group")

    @staticmethod
    def _fact(person, content, origin):
        return services.add_fact(person_id=person.pk, content=content, kind="偏好", origin_kind=origin, at=NOW).fact_id

    @staticmethod
    def _episode(stream, summary):
        return services.add_episode(stream_id=stream.pk, summary=summary, cues=[], started_at=1000, ended_at=2000,
                                    message_ids=[], at=NOW).pk

    @staticmethod
    def _recall(stream, person, hops=2, query="咖啡"):
        return recall.cognitive_recall(stream_id=stream.pk, speaker_id=person.pk, query=query, hops=hops, at=NOW)

    @staticmethod
    def _hit_count(result):
        return len(result.facts) + len(result.episodes) + len(result.spread)

    def test_group_recall_hides_direct_origin_spread_hit(self, person, seed, group_stream, direct_stream):
        hidden = self._fact(person, "他私下在学大提琴", "direct")
        services.link_together(refs=[("fact", seed), ("fact", hidden)], at=NOW)
        in_group = self._recall(group_stream, person)
        assert "大提琴" not in in_group.observation
        assert "顺带想起来的" not in in_group.observation
        assert self._hit_count(in_group) == 1
        in_direct = self._recall(direct_stream, person)
        assert "大提琴" in in_direct.observation
        assert "顺带想起来的" in in_direct.observation

    def test_group_recall_shows_only_group_episodes(self, person, seed, group_stream, direct_stream):
        direct_ep = self._episode(direct_stream, "私聊里聊过他的演唱会门票")
        group_ep = self._episode(group_stream, "群里聊过周末烧烤")
        services.link_together(refs=[("fact", seed), ("episode", direct_ep)], at=NOW)
        services.link_together(refs=[("fact", seed), ("episode", group_ep)], at=NOW)
        in_group = self._recall(group_stream, person)
        assert "演唱会门票" not in in_group.observation and "周末烧烤" in in_group.observation
        in_direct = self._recall(direct_stream, person)
        assert "周末烧烤" not in in_direct.observation and "演唱会门票" in in_direct.observation

    def test_blocked_hit_is_not_linked(self, person, seed, group_stream):
        hidden = self._fact(person, "他私下在学大提琴", "direct")
        visible_ep = self._episode(group_stream, "群里聊过周末烧烤")
        services.link_together(refs=[("fact", seed), ("fact", hidden)], at=NOW - 1000)
        services.link_together(refs=[("fact", seed), ("episode", visible_ep)], at=NOW - 1000)
        hidden_node = MemoryNode.objects.get(ref_kind="fact", ref_id=hidden).pk
        before = _edge(("fact", seed), ("fact", hidden))
        touching = MemoryEdge.objects.filter(source_id=hidden_node).count() + MemoryEdge.objects.filter(
            target_id=hidden_node).count()

        result = self._recall(group_stream, person)
        assert "周末烧烤" in result.observation
        adopted = _edge(("fact", seed), ("episode", visible_ep))
        assert adopted.updated_at == NOW and adopted.strength == pytest.approx(0.5775)
        after = _edge(("fact", seed), ("fact", hidden))
        assert (after.strength, after.updated_at) == (before.strength, before.updated_at)
        assert MemoryEdge.objects.filter(source_id=hidden_node).count() + MemoryEdge.objects.filter(
            target_id=hidden_node).count() == touching

    def test_blocked_accounting(self, person, seed, group_stream, direct_stream):
        hidden_fact = self._fact(person, "他私下在学大提琴", "direct")
        hidden_ep = self._episode(direct_stream, "私聊里聊过他的演唱会门票")
        services.link_together(refs=[("fact", seed), ("fact", hidden_fact)], at=NOW)
        services.link_together(refs=[("fact", seed), ("episode", hidden_ep)], at=NOW)
        result = self._recall(group_stream, person)
        assert self._hit_count(result) == 1
        assert events("memory_fact_scope_blocked") == [{"streamKind": "group", "blocked": 1}]
        spread = events("memory_spread")
        assert len(spread) == 1
        assert (spread[0]["blockedEpisodes"], spread[0]["spread"], spread[0]["seeds"]) == (1, 0, 1)

    def test_no_blocked_event_when_all_visible(self, person, seed, group_stream):
        ep = self._episode(group_stream, "群里聊过周末烧烤")
        services.link_together(refs=[("fact", seed), ("episode", ep)], at=NOW)
        result = self._recall(group_stream, person)
        assert "周末烧烤" in result.observation
        assert events("memory_fact_scope_blocked") == []
        spread = events("memory_spread")
        assert (spread[0]["blockedEpisodes"], spread[0]["spread"]) == (0, 1)

    def test_superseded_spread_hit_blocked_before_scope(self, person, seed, group_stream):
        stale = self._fact(person, "他在星野公司上班", "direct")
        services.add_fact(person_id=person.pk, content="他现在在云岚公司上班", origin_kind="direct", supersedes=stale,
                          at=NOW)
        services.link_together(refs=[("fact", seed), ("fact", stale)], at=NOW - 5)
        result = self._recall(group_stream, person)
        assert "星野" not in result.observation
        assert events("memory_fact_scope_blocked") == []
        spread = events("memory_spread")[0]
        assert (spread["blockedSuperseded"], spread["spread"]) == (1, 0)
        assert _edge(("fact", seed), ("fact", stale)).updated_at == NOW - 5

    def test_knowledge_is_never_filtered(self, person, seed, group_stream):
        kid = services.add_knowledge(content="手冲咖啡的水温通常在九十度上下", source="test", at=NOW)
        services.link_together(refs=[("fact", seed), ("knowledge", kid)], at=NOW)
        result = self._recall(group_stream, person)
        assert "水温" in result.observation
        assert self._hit_count(result) == 2

    def test_hops_zero_observation_is_exact(self, person, seed, group_stream, direct_stream):
        hidden_fact = self._fact(person, "他私下在学大提琴", "direct")
        hidden_ep = self._episode(direct_stream, "私聊里聊过他的演唱会门票")
        services.link_together(refs=[("fact", seed), ("fact", hidden_fact)], at=NOW)
        services.link_together(refs=[("fact", seed), ("episode", hidden_ep)], at=NOW)
        for result in (self._recall(group_stream, person, hops=0), self._recall(group_stream, person, hops=None)):
            assert result.observation == "关于「咖啡」，你想起这些：\n- 你记得关于凌白：他喜欢手冲咖啡"
            assert self._hit_count(result) == 1

    def test_recall_does_not_reinforce_facts(self, person, seed, group_stream):
        from memory.models import Fact

        before = Fact.objects.values_list("strength", "updated_at", "hit_count").get(pk=seed)
        self._recall(group_stream, person)
        assert Fact.objects.values_list("strength", "updated_at", "hit_count").get(pk=seed) == before

    def test_nothing_found(self, person, group_stream):
        result = self._recall(group_stream, person, query="量子力学")
        assert result.observation == "你想了一下，没有想起任何和「量子力学」有关的事。"
        assert events("memory_spread") == []


def test_decay_edges_walks_the_edges_in_id_ranges(db, monkeypatch):
    """Chunked by id: every stale edge in every range is frozen, fresh ones stay, counts add up."""
    monkeypatch.setattr(services, "EDGE_DECAY_CHUNK", 2)
    for ref in range(0, 14, 2):  # 7 edges: old ones at even positions
        age = 2000 if ref % 4 == 0 else 1
        services.link_together(refs=[("fact", 100 + ref), ("fact", 101 + ref)], at=NOW - age * H)
    assert services.decay_edges(at=NOW) == 4
    assert MemoryEdge.objects.filter(active=True).count() == 3
    assert services.decay_edges(at=NOW) == 0


class TestConceptMapping:
    """Concept scores go back to every registered node whose text contains the concept (docs/REFERENCE.md §8)."""

    @staticmethod
    def _concepts(*pairs: tuple[str, str]) -> None:
        from django.db import connection

        from memory.models import KnowledgeEdge, KnowledgeNode

        for a, b in pairs:
            na, _ = KnowledgeNode.objects.get_or_create(concept=a, defaults={"created_at": NOW})
            nb, _ = KnowledgeNode.objects.get_or_create(concept=b, defaults={"created_at": NOW})
            KnowledgeEdge.objects.create(source=na, target=nb, strength=1.0, updated_at=NOW)
        with connection.cursor() as cur:
            services.bump_revision(cur, services.CONCEPT_GRAPH_REVISION)

    @staticmethod
    def _fact(person, content):
        ref = services.add_fact(person_id=person.pk, content=content, kind="偏好", at=NOW).fact_id
        MemoryNode.objects.get_or_create(ref_kind="fact", ref_id=ref)  # registered, no edge
        return ref

    @staticmethod
    def _episode(stream, summary):
        ref = services.add_episode(stream_id=stream.pk, summary=summary, cues=["聊天"], started_at=1000,
                                   ended_at=2000, message_ids=[], at=NOW).pk
        MemoryNode.objects.get_or_create(ref_kind="episode", ref_id=ref)
        return ref

    @staticmethod
    def _hits(seed_ref, limit=40):
        from memory import selectors

        result = selectors.spread(seeds=[("fact", seed_ref, 1.0)], now=NOW, hops=2, limit=limit, events=False)
        return {(h.kind, h.ref_id) for h in result.hits}

    def test_whole_concept_only_and_episodes_by_summary(self, person, group_stream):
        self._concepts(("隐身", "光学迷彩"))
        seed = self._fact(person, "他在研究隐身技术")
        whole = self._fact(person, "他想要一件光学迷彩外套")
        self._fact(person, "他大学学的是光学")
        self._fact(person, "他买了一条迷彩裤")
        self._fact(person, "他喜欢彩色光学仪器的迷")
        episode = self._episode(group_stream, "大家聊了光学迷彩的原理")
        self._episode(group_stream, "大家聊了迷彩和光学")
        assert self._hits(seed) == {("fact", whole), ("episode", episode)}

    def test_latin_concepts_are_case_folded_substrings(self, person):
        self._concepts(("rust", "Python"))
        seed = self._fact(person, "他在写RUST")
        lower = self._fact(person, "他用python写脚本")
        inside = self._fact(person, "他是PYTHONISTA社区的")
        self._fact(person, "他用py写脚本")
        assert self._hits(seed) == {("fact", lower), ("fact", inside)}

    def test_seed_concepts_are_substrings_too(self, person):
        # jieba keeps "Rustacean" whole: the seed concept "rust" is found only as a substring
        self._concepts(("rust", "Python"))
        seed = self._fact(person, "他自称Rustacean")
        target = self._fact(person, "他也写Python")
        assert self._hits(seed) == {("fact", target)}

    def test_every_holder_is_mapped(self, person):
        self._concepts(("隐身", "光学迷彩"))
        seed = self._fact(person, "他在研究隐身技术")
        holders = {("fact", self._fact(person, f"第{i}件光学迷彩外套是{i}号")) for i in range(24)}
        assert self._hits(seed, limit=40) == holders


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_resident_node_texts_map_like_the_rows_and_stay_fresh():
    """Outside a transaction the resident texts answer; new nodes are appended, deletions rebuild."""
    from django.db import connection

    from memory import selectors
    from memory.models import Fact
    from memory.selectors import graph as graph_selectors

    selectors.resident_node_texts() and selectors.resident_node_texts().reset()
    person = services.resolve_person(platform="t", external_id="r1", name="阿明", at=NOW)
    stream = services.resolve_stream(platform="t", kind="group", external_id="rg")
    first = services.add_fact(person_id=person.pk, content="光学迷彩外套", kind="偏好", at=NOW).fact_id
    services.link_together(refs=[("fact", first), ("fact", first + 10_000)], at=NOW)  # a node without a row
    index = selectors.resident_node_texts()
    assert index is not None and not connection.in_atomic_block
    node_of = dict(MemoryNode.objects.values_list("ref_id", "id"))
    assert graph_selectors._nodes_containing({"光学迷彩"}) == {"光学迷彩": [node_of[first]]}
    rebuilds = index.rebuilds
    episode = services.add_episode(stream_id=stream.pk, summary="聊到光学迷彩", cues=["x"], started_at=1,
                                   ended_at=2, message_ids=[], at=NOW).pk
    services.link_together(refs=[("fact", first), ("episode", episode)], at=NOW)
    episode_node = MemoryNode.objects.get(ref_kind="episode", ref_id=episode).pk
    assert graph_selectors._nodes_containing({"光学迷彩"}) == {"光学迷彩": [node_of[first], episode_node]}
    assert index.rebuilds == rebuilds  # appended, not rebuilt
    Fact.objects.filter(pk=first).delete()
    assert graph_selectors._nodes_containing({"光学迷彩"}) == {"光学迷彩": [episode_node]}
    assert index.rebuilds == rebuilds + 1
    index.reset()
    from memory.search import lexical, lexical_index

    for table in lexical.TABLES:  # flush does not empty the contentless FTS tables
        lexical.clear(table)
    lexical_index.reset_all()


def test_spread_reads_each_node_once_and_answers_like_the_row_readers(person, group_stream):
    """The selector's batched reads (seeds with their texts; retention with the texts) give the
    hits, scores and seed list of reading edges, retentions and texts one question at a time."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory import selectors
    from memory.engine.spreading import spread as engine_spread
    from memory.models import Fact
    from memory.selectors import graph as graph_selectors

    def fact(content):
        return services.add_fact(person_id=person.pk, content=content, kind="偏好", at=NOW).fact_id

    seed_fact, near, far, gone = fact("他喜欢爬山"), fact("他周末去香山"), fact("他买了登山杖"), fact("他去过泰山")
    seed_knowledge = services.add_knowledge(content="香山在北京西郊", source="百科", at=NOW)
    episode = services.add_episode(stream_id=group_stream.pk, summary="大家约了爬香山", cues=["爬山"], started_at=1,
                                   ended_at=2, message_ids=[], at=NOW).pk
    services.link_together(refs=[("fact", seed_fact), ("fact", near), ("episode", episode)], at=NOW)
    services.link_together(refs=[("knowledge", seed_knowledge), ("fact", gone)], at=NOW)
    services.link_together(refs=[("fact", near), ("fact", far)], at=NOW)
    Fact.objects.filter(pk=gone).update(active=False)  # its node stays; retention None: never a hit
    seeds = [("knowledge", seed_knowledge, 0.8), ("fact", seed_fact, 1.0)]

    with CaptureQueriesContext(connection) as ctx:
        got = selectors.spread(seeds=seeds, now=NOW + H, hops=2, limit=4, events=False, use_concepts=False)
    # seeds (1), two levels of edges and far ends (2 + 2), the texts of the hits that are not facts (1)
    graph_reads = [q["sql"] for q in ctx.captured_queries if "memory_" in q["sql"]]
    assert len(graph_reads) == 6 and "memory_edges" in graph_reads[1] and "memory_edges" in graph_reads[3]
    assert "e.summary" in graph_reads[5] and "memory_edges" not in graph_reads[5]

    node = dict(MemoryNode.objects.values_list("ref_id", "id").filter(ref_kind="fact"))
    weights = {graph_selectors.node_of("knowledge", seed_knowledge): 0.8, node[seed_fact]: 1.0}
    want = engine_spread(weights, hops=2, limit=4, expand=graph_selectors._expand,
                         retention_of=lambda ns: selectors.node_retentions(ns, NOW + H))
    texts = selectors.node_texts([h.node_id for h in want.hits] + sorted(weights))
    assert [(h.node_id, h.kind, h.ref_id, h.content, h.score, h.hops) for h in got.hits] == [
        (h.node_id, *texts[h.node_id], h.score, h.hops) for h in want.hits]
    assert {(h.kind, h.ref_id) for h in got.hits} == {("fact", near), ("fact", far), ("episode", episode)}
    assert [(s.node_id, s.kind, s.ref_id, s.content, s.score) for s in got.seeds] == [
        (n, *texts[n], weights[n]) for n in sorted(weights)]


@pytest.mark.postgresql_only("SQLite has no round trip to save: an expansion reads the edges alone")
def test_on_postgresql_an_expansion_brings_the_rows_of_the_nodes_it_reaches(person):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory import selectors
    from memory.selectors import graph as graph_selectors

    def fact(content):
        return services.add_fact(person_id=person.pk, content=content, kind="偏好", at=NOW).fact_id

    seed, near, far = fact("他喜欢爬山"), fact("他周末去香山"), fact("他买了登山杖")
    services.link_together(refs=[("fact", seed), ("fact", near)], at=NOW)
    services.link_together(refs=[("fact", near), ("fact", far)], at=NOW)
    node = dict(MemoryNode.objects.values_list("ref_id", "id").filter(ref_kind="fact"))
    rows = graph_selectors._SpreadRows(NOW + H)
    rows.seeds([("fact", seed, 1.0)])

    edges = rows.expand({node[seed]})

    assert sorted(edges) == sorted(graph_selectors._expand({node[seed]}))
    with CaptureQueriesContext(connection) as ctx:
        got = rows.retentions({node[near]})
    assert ctx.captured_queries == []  # read with the edges
    assert got == selectors.node_retentions({node[near]}, NOW + H)
    assert rows.texts[node[near]] == ("fact", near, "他周末去香山") and node[far] not in rows.retention


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_holder_lists_of_the_graphs_concepts_are_ready_when_the_node_texts_are_built(monkeypatch):
    """The resident node texts find the holders of every concept of the graph in one pass when they
    are built (no spread pays a first scan); the lists equal a scan's: each node once, in id order,
    overlapping and repeated names, case folded."""
    from memory import selectors
    from memory.search import lexical, lexical_index
    from memory.selectors import graph as graph_selectors

    TestConceptMapping._concepts(("光学", "光学迷彩"), ("迷彩", "ABC"), ("外套", "光学迷彩"))
    person = services.resolve_person(platform="t", external_id="p1", name="阿明", at=NOW)
    texts = ["光学迷彩外套", "光学光学迷彩迷彩", "abc 和 ABC 外套", "他喜欢迷彩", "没有关系", "光学仪器"]
    refs = [TestConceptMapping._fact(person, text) for text in texts]
    node_of = dict(MemoryNode.objects.values_list("ref_id", "id"))
    index = selectors.resident_node_texts()
    index.reset()
    index = selectors.resident_node_texts()  # built now, with the graph's concepts
    try:
        ready = dict(index._holders)
        assert set(ready) == {"光学", "光学迷彩", "迷彩", "abc", "外套"}
        for name, holders in ready.items():
            want = [node_of[ref] for ref, text in zip(refs, texts, strict=True) if name in text.casefold()]
            assert holders == index._scan(name) == want, name
        scans = []
        monkeypatch.setattr(index, "_scan", lambda *args: scans.append(args) or [])  # a spread of these scans nothing
        assert graph_selectors._nodes_containing({"光学迷彩", "ABC"}) == {
            "光学迷彩": [node_of[refs[0]], node_of[refs[1]]], "ABC": [node_of[refs[2]]]}
        assert scans == []
    finally:
        index.reset()
        for table in lexical.TABLES:  # flush does not empty the contentless FTS tables
            lexical.clear(table)
        lexical_index.reset_all()
