"""Personalised PageRank by power iteration with a wall-clock deadline.

Algorithm (the contract; both code paths below implement it):

* nodes = insertion-ordered union of each adjacency key followed by its targets, then
  the personalization keys; no nodes → ``{}``;
* each node's out-weights are normalised by their sum (zero weights dropped); a node
  without positive out-weight is *dangling*;
* ``p`` = personalization normalised to sum 1; start ``r = p``;
* iteration: ``d = Σ r[dangling]``; ``r'[n] = ((1-α) + α·d)·p[n] + Σ_{s→n} α·r[s]·P(s→n)``;
  stop once ``Σ|r' - r| <= tolerance`` or after ``max_iterations`` (last iterate used);
* a deadline ``clock() + timeout_seconds`` (taken after the transition table is built)
  is checked before and after every iteration; reaching it raises
  :class:`PageRankTimeoutError`;
* the result is normalised to sum 1 and covers every node (zeros included).

Small graphs run a plain-Python loop; larger ones a numpy loop (``np.bincount`` over an
edge list), which agrees with the plain loop to ~1e-15.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

import numpy as np

__all__ = ["PageRankTimeoutError", "personalized_pagerank", "VECTOR_MIN_EDGES"]

N = TypeVar("N", bound=Hashable)

#: Graphs with at least this many positive edges use the numpy path under ``method='auto'``.
VECTOR_MIN_EDGES: int = 256


class PageRankTimeoutError(TimeoutError):
    """Personalised PageRank did not finish before its wall-clock deadline."""


def personalized_pagerank(
    adjacency: Mapping[N, Mapping[N, float]],
    personalization: Mapping[N, float],
    *,
    alpha: float = 0.85,
    max_iterations: int = 100,
    tolerance: float = 1e-9,
    timeout_seconds: float = 0.1,
    clock: Callable[[], float] | None = None,
    method: str = "auto",
) -> dict[N, float]:
    """Stationary distribution of a random walk with restart to ``personalization``.

    :param adjacency: ``node -> {target: non-negative weight}`` (directed; weights need
        not be normalised).
    :param personalization: non-negative restart weights (need not sum to 1).
    :param alpha: probability of following an edge, in ``[0, 1)``.
    :param max_iterations: iteration cap (>= 1).
    :param tolerance: L1 convergence threshold (finite, > 0).
    :param timeout_seconds: wall-clock budget (finite, > 0).
    :param clock: monotonic clock in seconds; ``None`` = ``time.monotonic`` looked up at
        call time (so tests may inject a clock or patch ``time.monotonic``).
    :param method: ``'auto'``, ``'python'`` or ``'numpy'``.
    :return: ``{node: probability}`` over every node, summing to 1; ``{}`` for no nodes.
    :raises ValueError: invalid parameter, a negative / non-finite edge ("边权") or
        personalization weight, or a personalization without positive weight.
    :raises PageRankTimeoutError: the deadline passed.
    """
    if not 0.0 <= alpha < 1.0:
        raise ValueError("PageRank 阻尼系数 alpha 必须在 [0, 1) 内")
    if max_iterations < 1:
        raise ValueError("PageRank 迭代上限必须大于 0")
    if not math.isfinite(tolerance) or tolerance <= 0.0:
        raise ValueError("PageRank 收敛阈值必须是有限正数")
    if not math.isfinite(timeout_seconds) or timeout_seconds <= 0.0:
        raise ValueError("PageRank 超时必须是有限正数")
    if method not in ("auto", "python", "numpy"):
        raise ValueError(f"unknown PageRank method {method!r}")

    order: dict[N, None] = {}
    for source, targets in adjacency.items():
        order[source] = None
        for target in targets:
            order[target] = None
    for node in personalization:
        order[node] = None
    if not order:
        return {}
    nodes = list(order)

    # Normalised transitions, validated.
    transitions: dict[N, list[tuple[N, float]]] = {}
    edge_count = 0
    for node in nodes:
        targets = adjacency.get(node)
        kept: list[tuple[N, float]] = []
        total = 0.0
        if targets:
            for target, raw in targets.items():
                weight = float(raw)
                if not math.isfinite(weight) or weight < 0.0:
                    raise ValueError("PageRank 边权必须是有限非负数")
                if weight == 0.0:
                    continue
                kept.append((target, weight))
                total += weight
        transitions[node] = [(t, w / total) for t, w in kept] if total > 0.0 else []
        edge_count += len(kept)

    raw_personal: list[float] = []
    personal_total = 0.0
    for node in nodes:
        weight = float(personalization.get(node, 0.0))
        if not math.isfinite(weight) or weight < 0.0:
            raise ValueError("PageRank 个性化权重必须是有限非负数")
        raw_personal.append(weight)
        personal_total += weight
    if personal_total <= 0.0:
        raise ValueError("PageRank 个性化向量至少要有一个正权重")
    personal = [w / personal_total for w in raw_personal]

    now = clock if clock is not None else time.monotonic
    use_numpy = method == "numpy" or (method == "auto" and edge_count >= VECTOR_MIN_EDGES)
    if use_numpy:
        ranks = _iterate_numpy(nodes, transitions, personal, alpha, max_iterations, tolerance, timeout_seconds, now)
    else:
        ranks = _iterate_python(nodes, transitions, personal, alpha, max_iterations, tolerance, timeout_seconds, now)
    total_rank = sum(ranks)
    return {node: value / total_rank for node, value in zip(nodes, ranks, strict=True)}


def _timeout() -> PageRankTimeoutError:
    return PageRankTimeoutError("个性化 PageRank 计算超时")


def _iterate_python(
    nodes: list[N],
    transitions: dict[N, list[tuple[N, float]]],
    personal: list[float],
    alpha: float,
    max_iterations: int,
    tolerance: float,
    timeout_seconds: float,
    clock: Callable[[], float],
) -> list[float]:
    index = {node: i for i, node in enumerate(nodes)}
    edges = [[(index[t], p) for t, p in transitions[node]] for node in nodes]
    dangling = [i for i, out in enumerate(edges) if not out]
    n = len(nodes)
    ranks = list(personal)
    deadline = clock() + timeout_seconds
    for _ in range(max_iterations):
        if clock() >= deadline:
            raise _timeout()
        dangling_mass = sum(ranks[i] for i in dangling)
        base = (1.0 - alpha) + alpha * dangling_mass
        updated = [base * personal[i] for i in range(n)]
        for source in range(n):
            out = edges[source]
            if out:
                share = alpha * ranks[source]
                for target, probability in out:
                    updated[target] += share * probability
        if clock() >= deadline:
            raise _timeout()
        delta = sum(abs(updated[i] - ranks[i]) for i in range(n))
        ranks = updated
        if delta <= tolerance:
            break
    return ranks


def _iterate_numpy(
    nodes: list[N],
    transitions: dict[N, list[tuple[N, float]]],
    personal: list[float],
    alpha: float,
    max_iterations: int,
    tolerance: float,
    timeout_seconds: float,
    clock: Callable[[], float],
) -> list[float]:
    index = {node: i for i, node in enumerate(nodes)}
    n = len(nodes)
    sources: list[int] = []
    targets: list[int] = []
    probs: list[float] = []
    dangling_mask = np.zeros(n, dtype=bool)
    for i, node in enumerate(nodes):
        out = transitions[node]
        if not out:
            dangling_mask[i] = True
            continue
        for target, probability in out:
            sources.append(i)
            targets.append(index[target])
            probs.append(probability)
    src = np.asarray(sources, dtype=np.intp)
    dst = np.asarray(targets, dtype=np.intp)
    prob = np.asarray(probs, dtype=np.float64)
    p = np.asarray(personal, dtype=np.float64)
    ranks = p.copy()
    deadline = clock() + timeout_seconds
    for _ in range(max_iterations):
        if clock() >= deadline:
            raise _timeout()
        dangling_mass = float(ranks[dangling_mask].sum())
        base = (1.0 - alpha) + alpha * dangling_mass
        flow = np.bincount(dst, weights=(alpha * ranks[src]) * prob, minlength=n)
        updated = base * p + flow
        if clock() >= deadline:
            raise _timeout()
        delta = float(np.abs(updated - ranks).sum())
        ranks = updated
        if delta <= tolerance:
            break
    return ranks.tolist()
