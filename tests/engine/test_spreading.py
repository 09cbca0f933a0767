"""Association spreading — docs/REFERENCE.md §8, as pure tests
with in-memory callbacks."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterable, Mapping

import pytest

from memory.engine.decay import EDGE_HALF_LIFE_HOURS, FREEZE, MS_PER_HOUR, reinforce, retention
from memory.engine.spreading import (
    ACTIVATION_TAU_MS,
    HOP_DECAY,
    HOPS,
    PPR_ALPHA,
    RECALL_HOPS,
    SPREAD_LIMIT,
    ConceptGraph,
    ShortTermActivation,
    SpreadHit,
    SpreadResult,
    legacy_spread,
    spread,
)

H = MS_PER_HOUR


class Graph:
    """In-memory memory graph with call recording."""

    def __init__(self, edges: Iterable[tuple[int, int, float]], retention: Mapping[int, float | None] | None = None):
        self.edges = [(min(a, b), max(a, b), s) for a, b, s in edges]
        self.retention = dict(retention or {})
        self.expand_calls: list[set[int]] = []
        self.retention_calls: list[set[int]] = []

    def expand(self, frontier: set[int]) -> list[tuple[int, int, float]]:
        self.expand_calls.append(set(frontier))
        return [e for e in self.edges if e[0] in frontier or e[1] in frontier]

    def retention_of(self, nodes: set[int]) -> dict[int, float | None]:
        self.retention_calls.append(set(nodes))
        return {n: self.retention.get(n, 1.0) for n in nodes}

    def kw(self) -> dict:
        return {"expand": self.expand, "retention_of": self.retention_of}


def test_constants() -> None:
    assert (HOPS, HOP_DECAY, SPREAD_LIMIT, RECALL_HOPS) == (2, 0.5, 4, 0)
    assert ACTIVATION_TAU_MS == 600_000 and PPR_ALPHA == 0.85


def test_hops_zero_is_empty_and_identical_to_legacy() -> None:  # 37
    g = Graph([(100, 101, 0.9)])
    result = spread({100: 1.0}, hops=0, limit=4, **g.kw())
    legacy = legacy_spread({100: 1.0}, hops=0, limit=4, **g.kw())
    assert result.hits == [] and legacy == []
    assert pickle.dumps(result.hits) == pickle.dumps(legacy)
    assert spread({100: 1.0}, hops=2, limit=0, **g.kw()).hits == []
    assert spread({}, hops=2, limit=4, **g.kw()).hits == []
    assert g.expand_calls == [] and g.retention_calls == []


def weak_hub() -> Graph:
    edges = [(100, 101, 0.99), (100, 102, 0.01)] + [(102, 200 + i, 1.0) for i in range(20)]
    return Graph(edges)


def test_weak_hub() -> None:  # 38
    g = weak_hub()
    result = spread({100: 1.0}, hops=2, limit=1, **g.kw())
    assert not result.fell_back and result.timed_out_graph is None
    assert [h.node_id for h in result.hits] == [101]
    assert result.hits[0].score == pytest.approx(0.4433, abs=1e-4)
    assert result.hits[0].hops == 1
    # nodes first reached at depth == hops are not expanded: two BFS levels only
    assert g.expand_calls == [{100}, {101, 102}]


def test_weak_hub_scores_do_not_depend_on_seed_scale() -> None:
    a = spread({100: 1.0}, hops=2, limit=30, **weak_hub().kw()).hits
    b = spread({100: 0.37}, hops=2, limit=30, **weak_hub().kw()).hits
    assert [h.node_id for h in a] == [h.node_id for h in b]
    assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-12)
    assert all(h.node_id != 100 for h in a)
    assert {h.hops for h in a if h.node_id >= 200} == {2}


def test_timeout_falls_back_to_legacy() -> None:  # 39
    g = weak_hub()
    events: list[str] = []
    ticks = itertools.count(0.0, 1.0)  # every clock reading is one second later
    result = spread({100: 1.0}, hops=2, limit=4, on_timeout=events.append, clock=lambda: next(ticks), **g.kw())
    assert result.fell_back and result.timed_out_graph == "memory"
    assert events == ["memory"]
    assert result.hits == legacy_spread({100: 1.0}, hops=2, limit=4, **weak_hub().kw())


def test_legacy_values() -> None:
    hits = legacy_spread({100: 1.0}, hops=2, limit=3, **weak_hub().kw())
    assert hits[0] == SpreadHit(node_id=101, score=pytest.approx(0.495), hops=1)
    assert hits[1] == SpreadHit(node_id=102, score=pytest.approx(0.005), hops=1)
    assert hits[2].hops == 2 and hits[2].score == pytest.approx(0.0025)


def test_legacy_keeps_best_over_hops_and_activation() -> None:
    g = Graph([(1, 2, 0.2), (1, 3, 1.0), (3, 2, 1.0)])
    hits = legacy_spread({1: 1.0}, hops=2, limit=4, activation=lambda n: 2.0 if n == 2 else 1.0, **g.kw())
    by_node = {h.node_id: h for h in hits}
    # node 2: hop 1 = 1*0.2*0.5*2 = 0.2 ; hop 2 via 3 = (0.5)*1*0.5*2 = 0.5 → best 0.5 at hop 2
    assert by_node[2].score == pytest.approx(0.5) and by_node[2].hops == 2
    assert by_node[3].score == pytest.approx(0.5) and by_node[3].hops == 1


def concept_case() -> tuple[Graph, ConceptGraph, list[set[str]]]:
    g = Graph([(101, 102, 0.8)])
    texts = {101: "alpha", 102: "memory only", 103: "beta"}
    asked: list[set[str]] = []

    def nodes_containing(names: set[str]) -> dict[str, list[int]]:
        asked.append(set(names))
        return {n: [node for node, t in texts.items() if n.casefold() in t.casefold()] for n in names}

    concept = ConceptGraph(
        concepts={1: "alpha", 2: "beta"},
        edges=[(1, 2, 261.0)],
        seed_texts={101: "alpha"},
        nodes_containing=nodes_containing,
    )
    return g, concept, asked


def test_concept_graph_separate_ppr(monkeypatch: pytest.MonkeyPatch) -> None:  # 40
    import memory.engine.spreading as sp

    calls: list[tuple[set, dict]] = []
    real = sp.personalized_pagerank

    def recording(adjacency, personalization, **kwargs):
        calls.append(
            (
                set(adjacency) | {t for out in adjacency.values() for t in out},
                {k: dict(v) for k, v in adjacency.items()},
            )
        )
        return real(adjacency, personalization, **kwargs)

    monkeypatch.setattr(sp, "personalized_pagerank", recording)
    g, concept, asked = concept_case()
    result = spread({101: 1.0}, hops=2, limit=4, concept=concept, **g.kw())
    assert [c[0] for c in calls] == [{101, 102}, {1, 2}]
    for out in calls[1][1].values():
        assert sum(out.values()) == pytest.approx(1.0)
    assert {h.node_id for h in result.hits} == {102, 103}
    for hit in result.hits:
        assert hit.score == pytest.approx(0.4595, abs=1e-4)
        assert hit.hops == 1
    assert asked == [{"beta"}]


def test_concept_timeout_discards_memory_result(monkeypatch: pytest.MonkeyPatch) -> None:
    import memory.engine.spreading as sp
    from memory.engine.pagerank import PageRankTimeoutError

    real = sp.personalized_pagerank

    def concept_times_out(adjacency, personalization, **kwargs):
        if set(personalization) <= {1, 2}:  # concept ids of concept_case()
            raise PageRankTimeoutError("simulated")
        return real(adjacency, personalization, **kwargs)

    monkeypatch.setattr(sp, "personalized_pagerank", concept_times_out)
    g, concept, asked = concept_case()
    events: list[str] = []
    result = spread({101: 1.0}, hops=2, limit=4, concept=concept, on_timeout=events.append, **g.kw())
    assert events == ["knowledge"] and result.timed_out_graph == "knowledge" and result.fell_back
    assert result.hits == legacy_spread({101: 1.0}, hops=2, limit=4, **concept_case()[0].kw())
    assert [h.node_id for h in result.hits] == [102]
    assert asked == []


def test_retention_filter_and_admission() -> None:
    # 101 frozen (None), 102 too weak (< REVIVE), 103 fine but reached only through 102
    g = Graph(
        [(100, 101, 0.9), (100, 102, 0.9), (102, 103, 0.9), (100, 104, 0.5)],
        retention={101: None, 102: 0.149, 104: 0.5},
    )
    result = spread({100: 1.0}, hops=2, limit=4, **g.kw())
    assert [h.node_id for h in result.hits] == [104]
    assert g.expand_calls == [{100}, {104}]
    hit = result.hits[0]
    # 2-cycle 100↔104: mass α/(1+α) times retention 0.5
    assert hit.score == pytest.approx(0.5 * 0.85 / 1.85, abs=1e-6)


def test_activation_multiplies_score() -> None:
    g = Graph([(100, 104, 0.5)])
    plain = spread({100: 1.0}, hops=1, limit=4, **g.kw()).hits[0].score
    boosted = (
        spread({100: 1.0}, hops=1, limit=4, activation=lambda n: 2.0, **Graph([(100, 104, 0.5)]).kw()).hits[0].score
    )
    assert boosted == pytest.approx(2 * plain)


def test_multiple_seeds_personalised_by_weight() -> None:
    g = Graph([(1, 10, 1.0), (2, 20, 1.0)])
    hits = spread({1: 3.0, 2: 1.0}, hops=1, limit=4, **g.kw()).hits
    by_node = {h.node_id: h.score for h in hits}
    assert by_node[10] == pytest.approx(3 * by_node[20])
    assert set(by_node) == {10, 20}


def test_extra_seeds_only_seed_the_concept_graph() -> None:
    texts = {7: "beta and more"}
    concept = ConceptGraph(
        concepts={1: "Alpha", 2: "beta"},
        edges=[(1, 2, 5.0), (2, 1, 9.0), (1, 1, 3.0), (1, 99, 4.0)],
        seed_texts={},
        nodes_containing=lambda names: {
            n: [k for k, t in texts.items() if n.casefold() in t.casefold()] for n in names
        },
        extra_seeds=[("talking about ALPHA", 1.0)],
    )
    g = Graph([])
    result = spread({}, hops=1, limit=4, concept=concept, **g.kw())
    assert [h.node_id for h in result.hits] == [7]
    assert result.hits[0].score == pytest.approx(0.85 / 1.85, abs=1e-6)
    assert g.expand_calls == []


def test_link_strength_sequence() -> None:  # 41 (arithmetic part)
    values = [0.35]
    for _ in range(4):
        values.append(reinforce(values[-1], 0.35))
    assert values == pytest.approx([0.35, 0.5775, 0.725375, 0.82149, 0.88397], abs=1e-5)


def test_edge_decay_boundary() -> None:  # 42 (arithmetic part)
    import math

    boundary_h = 720 * math.log2(3.5)
    assert boundary_h == pytest.approx(1301.3, abs=0.05)
    assert retention(0.35, 0, EDGE_HALF_LIFE_HOURS, 2000 * H) < FREEZE
    assert retention(0.35, 0, EDGE_HALF_LIFE_HOURS, 10 * H) >= FREEZE
    assert retention(0.35, 0, EDGE_HALF_LIFE_HOURS, int((boundary_h - 24) * H)) >= FREEZE
    assert retention(0.35, 0, EDGE_HALF_LIFE_HOURS, int((boundary_h + 24) * H)) < FREEZE


def test_short_term_activation() -> None:  # 43
    sta = ShortTermActivation()
    assert sta.factor(5, 1000) == 1.0
    sta.touch([5, 6], 1000)
    assert sta.factor(5, 1000) == 2.0
    assert sta.factor(5, 1000 + 600_000) == pytest.approx(1.367879, abs=1e-6)
    assert sta.factor(5, 0) == 2.0  # earlier "now" never boosts above 2
    assert sta.factor(5, 1000 + 40 * 600_000) == 1.0
    sta.clear()
    assert sta.factor(6, 1000) == 1.0 and len(sta) == 0


def test_short_term_activation_prunes_old_entries() -> None:
    sta = ShortTermActivation()
    sta.touch(range(5000), 0)
    sta.touch([1], 50 * ACTIVATION_TAU_MS)
    sta.touch(range(10_000, 14_100), 50 * ACTIVATION_TAU_MS)
    assert len(sta) < 9000
    assert sta.factor(3, 50 * ACTIVATION_TAU_MS) == 1.0


def test_result_type() -> None:
    r = spread({1: 1.0}, hops=1, limit=1, **Graph([]).kw())
    assert isinstance(r, SpreadResult) and r.hits == [] and r.elapsed_ms >= 0


def test_many_concept_holders_load_few_retentions_and_rank_exactly() -> None:
    """A concept held by 2,000 nodes: every holder is mapped, but only the best bounds are loaded."""
    import random

    rng = random.Random(3)
    texts = {200 + i: f"holder {i} of gamma" for i in range(2000)}
    texts.update({5000 + i: f"delta text {i}" for i in range(10)})
    retention = {n: rng.choice([None, 0.1, 0.3, 0.6, 1.0]) for n in texts}
    concept = ConceptGraph(
        concepts={1: "alpha", 2: "gamma", 3: "delta"},
        edges=[(1, 2, 1.0), (1, 3, 3.0)],
        seed_texts={101: "alpha"},
        nodes_containing=lambda names: {n: [k for k, t in texts.items() if n in t] for n in names},
    )
    g = Graph([], retention=retention)
    act = ShortTermActivation()
    act.touch([203, 5004], 0)
    result = spread({101: 1.0}, hops=1, limit=6, concept=concept, activation=lambda n: act.factor(n, 0), **g.kw())
    loaded = set().union(*g.retention_calls)
    assert len(loaded) < 200  # not the 2,010 holders
    # the full computation: every holder's share, retention and activation
    full = spread({101: 1.0}, hops=1, limit=10_000, concept=concept, activation=lambda n: act.factor(n, 0), **g.kw())
    assert len(full.hits) == sum(1 for v in retention.values() if v is not None and v >= 0.15)
    assert result.hits == full.hits[:6]
    assert {h.node_id for h in result.hits} >= {5004}


class _Stated:
    """An activation that states its largest factor (as the shared one does) and counts what it is asked."""

    def __init__(self, factor: Mapping[int, float], most: float) -> None:
        self.factor, self.most, self.asked = factor, most, 0

    def __call__(self, node: int) -> float:
        return self.many([node])[node]

    def many(self, nodes: Iterable[int]) -> dict[int, float]:
        nodes = list(nodes)
        self.asked += len(nodes)
        return {n: self.factor[n] for n in nodes}


@pytest.mark.parametrize("activated", [False, True, "stated"])
def test_best_hits_are_the_full_ranking_of_every_node(activated: bool | str) -> None:
    """Step 5 with early stopping gives what scoring every fused node gives: the first ``limit`` by
    score, ties in ``fused`` order — on masses with many ties, some retentions missing or below REVIVE;
    an activation stating its largest factor is asked only for the nodes loaded."""
    import random

    import numpy as np

    from memory.engine.spreading import REVIVE, _best_of, _RetentionCache

    for trial in range(200):
        rng = random.Random(trial)
        nodes = rng.sample(range(1, 10_000), rng.randint(1, 400))
        fused = {n: rng.choice([0.5, 0.25, 0.125, rng.random()]) for n in nodes}
        distances = {n: rng.randint(1, 3) for n in nodes}
        retention = {n: rng.choice([None, 0.1, 0.3, 0.6, 1.0, 1.0]) for n in nodes}
        factor = {n: rng.choice([1.0, 1.0, 1.5, 2.0]) for n in nodes}
        limit = rng.choice([1, 4, 10, 500])
        loaded: list[set[int]] = []

        def retention_of(ns: set[int], loaded=loaded, retention=retention) -> dict[int, float | None]:
            loaded.append(set(ns))
            return {n: retention[n] for n in ns}

        activation = (None if activated is False else factor.__getitem__ if activated is True
                      else _Stated(factor, 2.0))
        got = _best_of(np.asarray(list(fused), dtype=np.int64), np.asarray(list(fused.values())),
                       np.asarray([distances[n] for n in fused], dtype=np.int64), _RetentionCache(retention_of),
                       activation, limit)
        if activated == "stated":
            assert activation.asked == sum(map(len, loaded))  # the loaded nodes only, each once
        full = []
        for place, n in enumerate(fused):
            keep = retention[n]
            if keep is None or keep < REVIVE:
                continue
            value = fused[n] * keep * (factor[n] if activated is not False else 1.0)
            full.append((-value, place, n))
        full.sort()
        assert [(h.node_id, h.score, h.hops) for h in got] == [(n, -v, distances[n]) for v, _p, n in full[:limit]]
        assert sum(map(len, loaded)) <= len(nodes)


def test_concept_mass_is_adding_node_by_node() -> None:
    """Step 3's mapping over arrays: the nodes in the order first met, each share added concept by concept
    (the same doubles as adding to a dict node by node) and the nearest hop."""
    import random

    import numpy as np

    from memory.engine.spreading import _ConceptMass

    for trial in range(200):
        rng = random.Random(trial)
        held = []
        for _ in range(rng.randint(1, 5)):
            nodes = rng.sample(range(1, 300), rng.randint(1, 120))
            if trial % 2:
                nodes.sort()
            held.append((np.asarray(nodes, dtype=np.int64), rng.random() / len(nodes), rng.randint(1, 3)))
        scores: dict[int, float] = {}
        nearest: dict[int, int] = {}
        for nodes, share, hop in held:
            for node in nodes.tolist():
                if node in scores:
                    scores[node] += share
                    nearest[node] = min(nearest[node], hop)
                else:
                    scores[node], nearest[node] = 0.0 + share, hop
        got = _ConceptMass.of(held)
        assert got.nodes.tolist() == list(scores)
        assert got.mass.tolist() == list(scores.values())  # equal doubles, not approximately
        assert got.hops.tolist() == list(nearest.values())
    empty = _ConceptMass.of([])
    assert len(empty.nodes) == len(empty.mass) == len(empty.hops) == 0
