"""Association spreading: personalised PageRank over the memory graph and the concept graph.

Pure: the database layer supplies small batched callbacks and this module does the
maths. Node ids are ``memory_nodes`` ids (ints); concept ids are ``knowledge_nodes`` ids.

:func:`spread` (read-only, never creates nodes or edges):

1. ``seeds`` maps seed memory nodes to their relevance (already the max per node).
2. **Memory graph.** Breadth-first from the seeds over active edges, up to ``hops``
   levels. An edge is taken into the subgraph (in both directions, max stored strength)
   only when its far end's retention is not ``None`` and ``>= REVIVE``; nodes first
   reached at depth ``hops`` are not expanded, so an edge between two of them is not part
   of the subgraph. PPR personalised by the raw seed weights; seeds are removed from the
   result (the remaining mass is *not* re-normalised).
3. **Concept graph** (optional): self loops and edges to unknown concepts are skipped,
   the graph is symmetrised with the max weight per direction and each node's out-weights
   normalised to 1. Every seed text gives ``max(0, relevance) / #matched`` to each
   non-blank concept it contains (``casefold`` substring). The graph is cut to ``hops``
   from the concept seeds (induced subgraph), re-normalised, PPR'd; the score of every
   non-seed concept is split equally over the registered memory nodes (not seeds) whose
   text contains it; their distance is the concept's BFS distance (min).
4. Masses of both graphs are summed per node; distance = min of both.
5. Hits: ``keep = retention_of(node)``; drop ``None`` or ``< REVIVE``;
   ``score = mass * keep * activation(node)``; sorted by score (stable), first ``limit``.
   Retention (at most 1) is loaded best ``mass * activation`` first and only until the
   ``limit``-th score beats every bound left — the same hits as loading every node.
6. If either PPR times out: ``on_timeout('memory' | 'knowledge')`` and the whole result is
   :func:`legacy_spread` instead (``fell_back=True``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .decay import EDGE_BOOST, EDGE_HALF_LIFE_HOURS, REVIVE
from .pagerank import PageRankTimeoutError, personalized_pagerank

__all__ = [
    "HOPS",
    "HOP_DECAY",
    "SPREAD_LIMIT",
    "RECALL_HOPS",
    "EDGE_BOOST",
    "EDGE_HALF_LIFE_HOURS",
    "ACTIVATION_MOST",
    "ACTIVATION_TAU_MS",
    "PPR_ALPHA",
    "PPR_MAX_ITERATIONS",
    "PPR_TOLERANCE",
    "PPR_TIMEOUT_SECONDS",
    "GRAPH_MEMORY",
    "GRAPH_KNOWLEDGE",
    "ShortTermActivation",
    "activation_factor",
    "activation_factors",
    "SpreadHit",
    "SpreadResult",
    "ConceptGraph",
    "ExpandFn",
    "RetentionFn",
    "spread",
    "legacy_spread",
]

#: Default number of hops of the spreading preview.
HOPS: int = 2
#: Per-hop damping of the legacy fixed-hop algorithm (timeout fallback only).
HOP_DECAY: float = 0.5
#: Default number of spread hits.
SPREAD_LIMIT: int = 4
#: Hops used by the bot's ``recall`` action by default (0 = no spreading).
RECALL_HOPS: int = 0
#: Time constant of the short-term activation, in ms (10 minutes).
ACTIVATION_TAU_MS: int = 600_000
PPR_ALPHA: float = 0.85
PPR_MAX_ITERATIONS: int = 100
PPR_TOLERANCE: float = 1e-9
PPR_TIMEOUT_SECONDS: float = 0.1
GRAPH_MEMORY: str = "memory"
GRAPH_KNOWLEDGE: str = "knowledge"

#: ``expand(frontier)`` → active edges ``(a, b, stored_strength)`` touching any frontier node.
ExpandFn = Callable[[set[int]], Iterable[tuple[int, int, float]]]
#: ``retention_of(nodes)`` → retention per node (missing key or ``None`` = gone / frozen).
RetentionFn = Callable[[set[int]], Mapping[int, "float | None"]]

# Beyond this age exp(-Δ/τ) is below half an ulp of 1.0, so the factor is exactly 1.0.
_FORGET_AFTER_MS = 40 * ACTIVATION_TAU_MS
# Candidate hits whose retention is loaded at a time (see ``_best_of``).
_HIT_BATCH = 64
_PRUNE_EVERY = 4096


#: The largest :func:`activation_factor` (a node touched now): ``1 + exp(0)``.
ACTIVATION_MOST = 2.0


def activation_factor(last_touch: int | None, now: int) -> float:
    """``1 + exp(-max(0, now - t) / ACTIVATION_TAU_MS)`` for a node last touched at ``t``; 1.0 if never."""
    if last_touch is None:
        return 1.0
    return 1.0 + math.exp(-max(0, now - last_touch) / ACTIVATION_TAU_MS)


def activation_factors(activation: Callable[[int], float], nodes: Iterable[int]) -> dict[int, float]:
    """``activation(node)`` for every node, in one call when ``activation`` has a ``many(nodes)`` method.

    A shared activation (Redis, several processes) answers a whole batch in one round trip;
    a plain callable is asked node by node.
    """
    nodes = list(nodes)
    many = getattr(activation, "many", None)
    if many is not None:
        found = many(nodes)
        return {node: float(found.get(node, 1.0)) for node in nodes}
    return {node: activation(node) for node in nodes}


class ShortTermActivation:
    """In-process short-term activation of recently lit memory nodes (thread-safe).

    ``factor(node, now) = 1 + exp(-max(0, now - t) / ACTIVATION_TAU_MS)`` where ``t`` is the
    last :meth:`touch` of the node; ``1.0`` for nodes never touched. Entries older than
    40 τ are pruned (their factor is exactly 1.0 in floating point anyway).
    """

    def __init__(self) -> None:
        self._at: dict[int, int] = {}
        self._lock = threading.Lock()
        self._writes = 0

    def touch(self, nodes: Iterable[int], now: int) -> None:
        """Record ``now`` as the activation instant of every node in ``nodes``."""
        with self._lock:
            for node in nodes:
                self._at[node] = now
                self._writes += 1
            if self._writes >= _PRUNE_EVERY:
                self._writes = 0
                horizon = now - _FORGET_AFTER_MS
                for node in [n for n, t in self._at.items() if t < horizon]:
                    del self._at[node]

    def factor(self, node: int, now: int) -> float:
        """Activation multiplier of ``node`` at ``now`` (2.0 right after a touch, → 1.0)."""
        return activation_factor(self._at.get(node), now)

    def factors(self, nodes: Iterable[int], now: int) -> dict[int, float]:
        """:meth:`factor` of every node of ``nodes`` (the batched form :func:`spread` uses)."""
        return {node: activation_factor(self._at.get(node), now) for node in nodes}

    def at(self, nodes: Iterable[int]) -> dict[int, int]:
        """The last touch of each node of ``nodes`` that has one."""
        return {node: self._at[node] for node in nodes if node in self._at}

    def clear(self) -> None:
        """Forget every activation."""
        with self._lock:
            self._at.clear()

    def discard(self, nodes: Iterable[int]) -> None:
        """Forget the activation of these nodes (deleted ones)."""
        with self._lock:
            for node in nodes:
                self._at.pop(node, None)
            self._writes = 0

    def __len__(self) -> int:
        return len(self._at)


@dataclass(frozen=True)
class SpreadHit:
    """One memory node reached by spreading (seeds are never hits)."""

    node_id: int
    score: float
    hops: int


@dataclass(frozen=True)
class SpreadResult:
    """Outcome of :func:`spread`.

    ``fell_back`` is True when a PPR timed out and ``hits`` come from :func:`legacy_spread`;
    ``timed_out_graph`` is then ``'memory'`` or ``'knowledge'``.
    """

    hits: list[SpreadHit] = field(default_factory=list)
    fell_back: bool = False
    timed_out_graph: str | None = None
    elapsed_ms: float = 0.0


@dataclass(frozen=True)
class ConceptGraph:
    """The concept graph (``knowledge_nodes`` / ``knowledge_edges``) plus text look-ups.

    :ivar concepts: concept id → concept name.
    :ivar edges: ``(source_id, target_id, strength)`` exactly as stored (directed rows).
    :ivar seed_texts: seed memory node → its text (fact content / episode summary /
        knowledge content); seeds without text contribute no concept weight.
    :ivar nodes_containing: ``concept names → {name: [memory node ids]}`` — every registered
        memory node (any kind) whose text contains the name (``casefold`` substring).
        Seed nodes may be included; :func:`spread` removes them.
    :ivar extra_seeds: ``(text, relevance)`` of seeds that have no memory node; they only
        seed the concept graph.
    """

    concepts: Mapping[int, str]
    edges: Sequence[tuple[int, int, float]]
    seed_texts: Mapping[int, str]
    nodes_containing: Callable[[set[str]], Mapping[str, Sequence[int]]]
    extra_seeds: Sequence[tuple[str, float]] = ()
    max_mapped: int | None = None  # map back only the best-ranked concepts (None = all)


@dataclass(frozen=True)
class _ConceptMass:
    """What the concept graph gives memory nodes (step 3): every node holding a reached concept, in the
    order they are first met (concept by concept, each's holders in order), the sum of the shares of the
    concepts it holds (added concept by concept) and the nearest of their distances."""

    nodes: np.ndarray  # int64
    mass: np.ndarray  # float64
    hops: np.ndarray  # int64

    @classmethod
    def of(cls, held: Sequence[tuple[np.ndarray, float, int]]) -> _ConceptMass:
        """From ``(holders, share, hop)`` of each concept in order (no node twice within one)."""
        if not held:
            return cls(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64))
        nodes, first, inverse = np.unique(np.concatenate([h for h, _s, _d in held]), return_index=True,
                                          return_inverse=True)
        mass = np.zeros(len(nodes))
        hops = np.full(len(nodes), np.iinfo(np.int64).max, dtype=np.int64)
        at = 0
        for holders, share, hop in held:
            where = inverse[at:at + len(holders)]
            at += len(holders)
            mass[where] += share  # 0.0 + the first share, then each next one: the order of adding node by node
            hops[where] = np.minimum(hops[where], hop)
        met = np.argsort(first)
        return cls(nodes[met], mass[met], hops[met])


class _RetentionCache:
    def __init__(self, retention_of: RetentionFn) -> None:
        self._fn = retention_of
        self._values: dict[int, float | None] = {}

    def load(self, nodes: Iterable[int]) -> None:
        missing = {n for n in nodes if n not in self._values}
        if not missing:
            return
        found = self._fn(missing)
        for node in missing:
            value = found.get(node)
            self._values[node] = None if value is None else float(value)

    def get(self, node: int) -> float | None:
        if node not in self._values:
            self.load((node,))
        return self._values[node]


def _neighbours_of(
    frontier: Sequence[int], edges: Iterable[tuple[int, int, float]]
) -> dict[int, list[tuple[int, float]]]:
    """Group undirected edges by frontier endpoint: ``{frontier node: [(other, strength)]}``."""
    members = set(frontier)
    grouped: dict[int, list[tuple[int, float]]] = {node: [] for node in frontier}
    for a, b, strength in edges:
        s = float(strength)
        if a in members:
            grouped[a].append((b, s))
        if b in members and b != a:
            grouped[b].append((a, s))
    return grouped


def _within_hops(starts: Iterable[int], hops: int, reach: Callable[[list[int]], Iterable[int]]) -> dict[int, int]:
    """Breadth-first ``{node: hops from the starts}`` up to ``hops``; ``reach(frontier)`` yields the nodes one hop on."""
    distances = dict.fromkeys(starts, 0)
    frontier = list(distances)
    for depth in range(hops):
        following: list[int] = []
        for other in reach(frontier):
            if other not in distances:
                distances[other] = depth + 1
                following.append(other)
        frontier = following
        if not frontier:
            break
    return distances


def _bounded_memory_graph(
    seeds: Mapping[int, float], hops: int, expand: ExpandFn, cache: _RetentionCache
) -> tuple[dict[int, dict[int, float]], dict[int, int]]:
    adjacency: dict[int, dict[int, float]] = {node: {} for node in seeds}

    def reach(frontier: list[int]) -> Iterator[int]:
        """The live neighbours of the frontier, each edge recorded both ways in ``adjacency``."""
        grouped = _neighbours_of(frontier, expand(set(frontier)))
        cache.load(other for pairs in grouped.values() for other, _s in pairs)
        for node in frontier:
            for other, strength in grouped[node]:
                keep = cache.get(other)
                if keep is None or keep < REVIVE:
                    continue
                out = adjacency.setdefault(node, {})
                out[other] = max(out.get(other, 0.0), strength)
                back = adjacency.setdefault(other, {})
                back[node] = max(back.get(node, 0.0), strength)
                yield other

    distances = _within_hops(seeds, hops, reach)
    return adjacency, distances


def _normalise(adjacency: Mapping[int, Mapping[int, float]]) -> dict[int, dict[int, float]]:
    out: dict[int, dict[int, float]] = {}
    for node, targets in adjacency.items():
        total = sum(targets.values())
        out[node] = {t: w / total for t, w in targets.items()} if total > 0.0 else {}
    return out


def _concept_spread(
    seeds: Mapping[int, float],
    concept: ConceptGraph,
    hops: int,
    alpha: float,
    timeout_seconds: float,
    clock: Callable[[], float],
) -> _ConceptMass:
    concepts = concept.concepts
    raw: dict[int, dict[int, float]] = {cid: {} for cid in concepts}
    for source, target, strength in concept.edges:
        if source == target or source not in concepts or target not in concepts:
            continue
        w = float(strength)
        # max(stored or 0.0, w), spelt out (the first of equal values, as max keeps)
        out, back = raw[source], raw[target]
        known = out.get(target, 0.0)
        out[target] = w if w > known else known
        known = back.get(source, 0.0)
        back[source] = w if w > known else known
    graph = _normalise(raw)

    needles = [(cid, name.casefold()) for cid, name in concepts.items() if name.strip()]
    weights: dict[int, float] = {}
    seed_inputs: list[tuple[str, float]] = [
        (concept.seed_texts[node], relevance)
        for node, relevance in seeds.items()
        if concept.seed_texts.get(node) is not None
    ]
    seed_inputs.extend(concept.extra_seeds)
    for text, relevance in seed_inputs:
        folded = text.casefold()
        matched = [cid for cid, needle in needles if needle in folded]
        if not matched:
            continue
        share = max(0.0, float(relevance)) / len(matched)
        for cid in matched:
            weights[cid] = weights.get(cid, 0.0) + share
    if not weights or sum(weights.values()) <= 0.0:
        return _ConceptMass.of([])

    distances = _within_hops(weights, hops, lambda frontier: (o for node in frontier for o in graph.get(node, {})))
    if len(distances) == len(graph):  # every concept reached: nothing to cut
        bounded = _normalise({node: graph[node] for node in distances})
    else:
        bounded = _normalise({node: {o: w for o, w in graph.get(node, {}).items() if o in distances}
                              for node in distances})
    ranks = personalized_pagerank(
        bounded,
        weights,
        alpha=alpha,
        max_iterations=PPR_MAX_ITERATIONS,
        tolerance=PPR_TOLERANCE,
        timeout_seconds=timeout_seconds,
        clock=clock,
    )
    reached = [cid for cid in ranks if cid not in weights and concepts[cid].strip()]
    if concept.max_mapped is not None:
        reached = sorted(reached, key=lambda cid: -ranks[cid])[: concept.max_mapped]
    if not reached:
        return _ConceptMass.of([])
    holders = concept.nodes_containing({concepts[cid] for cid in reached})
    seed_ids = np.fromiter(seeds, dtype=np.int64, count=len(seeds))
    held: list[tuple[np.ndarray, float, int]] = []  # per concept: its holders, each's share, the hop
    for cid in reached:
        nodes = np.asarray(holders.get(concepts[cid], ()), dtype=np.int64).reshape(-1)
        if len(nodes) > 1 and not bool(np.all(nodes[1:] > nodes[:-1])):  # each holder once, in order
            _u, first = np.unique(nodes, return_index=True)
            nodes = nodes[np.sort(first)]
        if len(seed_ids):
            nodes = nodes[~np.isin(nodes, seed_ids)]
        if len(nodes):
            held.append((nodes, ranks[cid] / len(nodes), distances[cid]))
    return _ConceptMass.of(held)


def legacy_spread(
    seeds: Mapping[int, float],
    *,
    hops: int,
    limit: int,
    expand: ExpandFn,
    retention_of: RetentionFn,
    activation: Callable[[int], float] | None = None,
) -> list[SpreadHit]:
    """Fixed-hop spreading (the pre-PPR algorithm, kept as the timeout fallback).

    Frontier = seeds with their relevance. For hop 1..hops, for every frontier node and
    every active neighbour that is not a seed and whose retention is ``>= REVIVE``:
    ``value = base * strength * HOP_DECAY * keep * activation``; the max per node within a
    hop becomes the next frontier, and the best value over all hops (with its hop) is
    kept. Sorted by value (stable), first ``limit``. ``hops < 1``, ``limit < 1`` or no
    seeds → ``[]`` without calling any callback.
    """
    if hops < 1 or limit < 1 or not seeds:
        return []
    cache = _RetentionCache(retention_of)
    best: dict[int, tuple[float, int]] = {}
    frontier: dict[int, float] = dict(seeds)
    for hop in range(1, hops + 1):
        grouped = _neighbours_of(list(frontier), expand(set(frontier)))
        reached = {other for pairs in grouped.values() for other, _s in pairs if other not in seeds}
        cache.load(reached)
        factors = activation_factors(activation, reached) if activation is not None else None
        following: dict[int, float] = {}
        for node, base in frontier.items():
            for other, strength in grouped[node]:
                if other in seeds:
                    continue
                keep = cache.get(other)
                if keep is None or keep < REVIVE:
                    continue
                value = base * strength * HOP_DECAY * keep
                if factors is not None:
                    value *= factors[other]
                if value > following.get(other, 0.0):
                    following[other] = value
        for node, value in following.items():
            if node not in best or value > best[node][0]:
                best[node] = (value, hop)
        frontier = following
        if not frontier:
            break
    hits = [SpreadHit(node_id=node, score=value, hops=hop) for node, (value, hop) in best.items()]
    hits.sort(key=lambda hit: hit.score, reverse=True)
    return hits[:limit]


def spread(
    seeds: Mapping[int, float],
    *,
    hops: int,
    limit: int,
    expand: ExpandFn,
    retention_of: RetentionFn,
    concept: ConceptGraph | None = None,
    alpha: float = PPR_ALPHA,
    timeout_seconds: float = PPR_TIMEOUT_SECONDS,
    activation: Callable[[int], float] | None = None,
    on_timeout: Callable[[str], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> SpreadResult:
    """Spread from ``seeds`` over the memory graph and the concept graph (see module docstring).

    :param seeds: seed memory node → relevance (max per node).
    :param hops: BFS depth bound of both graphs; ``< 1`` disables spreading.
    :param limit: maximum number of hits; ``< 1`` disables spreading.
    :param expand: batched edge loader, called once per BFS level with the frontier.
    :param retention_of: batched node retention loader (fact: decayed retention if the row
        exists and is active; episode / knowledge: 1.0 if the row exists; else ``None``).
    :param concept: the concept graph, or ``None`` to skip it.
    :param alpha: PPR alpha (tunable ``ppr_alpha``).
    :param timeout_seconds: wall-clock budget of *each* PPR run.
    :param activation: ``node → factor`` (e.g. ``lambda n: sta.factor(n, now)``); ``None`` = 1. When it
        also has ``many(nodes) → {node: factor}``, factors are asked for in batches (one per hop
        or one for all candidate hits) — what a shared activation in Redis needs; when it also
        states ``most`` (its largest factor, :data:`ACTIVATION_MOST`), the candidate hits' factors
        are asked for only as their retentions are loaded.
    :param on_timeout: called with ``'memory'`` or ``'knowledge'`` when a PPR times out.
    :param clock: monotonic clock in seconds (``None`` = ``time.monotonic`` at call time),
        used for both PPR deadlines and ``elapsed_ms``.
    :return: :class:`SpreadResult`. With ``hops < 1``, ``limit < 1`` or no seeds (and no
        ``concept.extra_seeds``) the result is empty and no callback is called.
    """
    clock = clock if clock is not None else time.monotonic
    started = clock()
    has_extra = concept is not None and bool(concept.extra_seeds)
    if hops < 1 or limit < 1 or (not seeds and not has_extra):
        return SpreadResult(hits=[], elapsed_ms=(clock() - started) * 1000.0)

    def fallback(graph: str) -> SpreadResult:
        if on_timeout is not None:
            on_timeout(graph)
        hits = legacy_spread(
            seeds, hops=hops, limit=limit, expand=expand, retention_of=retention_of, activation=activation
        )
        return SpreadResult(hits=hits, fell_back=True, timed_out_graph=graph, elapsed_ms=(clock() - started) * 1000.0)

    cache = _RetentionCache(retention_of)
    memory_scores: dict[int, float] = {}
    distances: dict[int, int] = {}
    if seeds and sum(seeds.values()) > 0.0:
        adjacency, memory_distances = _bounded_memory_graph(seeds, hops, expand, cache)
        try:
            ranks = personalized_pagerank(
                adjacency,
                seeds,
                alpha=alpha,
                max_iterations=PPR_MAX_ITERATIONS,
                tolerance=PPR_TOLERANCE,
                timeout_seconds=timeout_seconds,
                clock=clock,
            )
        except PageRankTimeoutError:
            return fallback(GRAPH_MEMORY)
        memory_scores = {node: value for node, value in ranks.items() if node not in seeds}
        distances = {node: memory_distances[node] for node in memory_scores}

    # step 4 over arrays: the memory graph's nodes in their order, then those only concepts reached in
    # theirs; a node reached by both keeps its place, with the sum and the nearer distance (the values and
    # the order of merging the two as dicts node by node; a concept can reach tens of thousands of nodes)
    order = list(memory_scores)
    masses = [memory_scores[node] for node in order]
    nearest = [distances[node] for node in order]
    nodes = np.fromiter(order, dtype=np.int64, count=len(order))
    extra = _ConceptMass.of([])
    if concept is not None and concept.concepts:
        try:
            mass = _concept_spread(seeds, concept, hops, alpha, timeout_seconds, clock)
        except PageRankTimeoutError:
            return fallback(GRAPH_KNOWLEDGE)
        shared = np.isin(mass.nodes, nodes)
        if shared.any():
            place = {node: i for i, node in enumerate(order)}
            for j in np.flatnonzero(shared).tolist():
                i = place[int(mass.nodes[j])]
                masses[i] = masses[i] + float(mass.mass[j])
                nearest[i] = min(nearest[i], int(mass.hops[j]))
            mass = _ConceptMass(mass.nodes[~shared], mass.mass[~shared], mass.hops[~shared])
        extra = mass
    hits = _best_of(
        np.concatenate([nodes, extra.nodes]),
        np.concatenate([np.asarray(masses, dtype=np.float64), extra.mass]),
        np.concatenate([np.asarray(nearest, dtype=np.int64), extra.hops]),
        cache, activation, limit,
    )
    return SpreadResult(hits=hits, elapsed_ms=(clock() - started) * 1000.0)


def _best_of(
    nodes: np.ndarray,
    masses: np.ndarray,
    hops: np.ndarray,
    cache: _RetentionCache,
    activation: Callable[[int], float] | None,
    limit: int,
) -> list[SpreadHit]:
    """The first ``limit`` hits among ``nodes`` (step 5) without loading every node's retention.

    A concept shared by thousands of nodes gives each of them a little mass. Retention is
    at most 1, so ``mass * activation`` bounds a node's score from above: nodes are loaded
    best bound first, ``_HIT_BATCH`` at a time, until the ``limit``-th score found beats
    every bound left. The hits and their order are those of scoring every node (ties keep
    the order of ``nodes``); a retention above 1 switches the early stop off.
    """
    # An activation that states its largest factor (``most``, which must bound every factor it gives) is
    # asked batch by batch for the nodes loaded, their bound being ``mass * most``: a shared activation
    # then answers 64 nodes at a time, not every node a concept reached. Any other is asked for every
    # node first, as the order needs it.
    most = getattr(activation, "most", None) if activation is not None else None
    factors: dict[int, float] | None = None
    bounds = masses
    if activation is not None and most is None:
        every = nodes.tolist()
        factors = activation_factors(activation, every)
        bounds = masses * np.fromiter((factors[n] for n in every), dtype=np.float64, count=len(every))
    elif most is not None:
        factors = {}
    # best bound first, ties in the nodes' order (a stable sort of the negated bounds: what a reversed
    # stable sort gives, without a Python comparison per node)
    order = np.argsort(-bounds, kind="stable")
    hits: list[tuple[SpreadHit, int]] = []  # with the node's place in ``nodes``
    bounded = True
    for start in range(0, len(order), _HIT_BATCH):
        chunk = order[start:start + _HIT_BATCH]
        chunk_nodes = nodes[chunk].tolist()
        cache.load(chunk_nodes)
        if most is not None:
            asked = activation_factors(activation, chunk_nodes)  # type: ignore[arg-type]
            bounded = bounded and max(asked.values()) <= most
            factors.update(asked)  # type: ignore[union-attr]
        for i, node, mass, hop in zip(chunk.tolist(), chunk_nodes, masses[chunk].tolist(), hops[chunk].tolist(),
                                      strict=True):
            keep = cache.get(node)
            if keep is None or keep < REVIVE:
                continue
            bounded = bounded and keep <= 1.0
            value = mass * keep
            if factors is not None:
                value *= factors[node]
            hits.append((SpreadHit(node_id=node, score=value, hops=hop), i))
        rest = start + _HIT_BATCH
        if bounded and len(hits) >= limit and rest < len(order):
            kth = sorted((h.score for h, _i in hits), reverse=True)[limit - 1]
            nxt = float(bounds[order[rest]])
            if kth > (nxt * most if most is not None else nxt):
                break
    hits.sort(key=lambda pair: (-pair[0].score, pair[1]))
    return [hit for hit, _i in hits[:limit]]
