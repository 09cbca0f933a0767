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
from typing import Any, TypeVar

import numpy as np

__all__ = ["PageRankTimeoutError", "personalized_pagerank", "VECTOR_MIN_EDGES"]

N = TypeVar("N", bound=Hashable)

#: Graphs with at least this many edges use the numpy path under ``method='auto'``.
VECTOR_MIN_EDGES: int = 32  # below this many arcs plain Python beats numpy's per-call overhead


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
        order.update(dict.fromkeys(targets))
    order.update(dict.fromkeys(personalization))
    if not order:
        return {}
    nodes = list(order)

    raw_edges = sum(len(targets) for targets in adjacency.values())
    use_numpy = method == "numpy" or (method == "auto" and raw_edges >= VECTOR_MIN_EDGES)
    if use_numpy:
        system: _Python | _Arrays = _build_arrays(nodes, adjacency)
    else:
        system = _build_python(nodes, adjacency)

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
    if isinstance(system, _Arrays):
        step = _numpy_step(system, personal, alpha)
        ranks = _iterate(step, np.asarray(personal, dtype=np.float64), max_iterations, tolerance, timeout_seconds, now)
        ranks = ranks.tolist()
    else:
        ranks = _iterate(_python_step(system, personal, alpha), list(personal), max_iterations, tolerance,
                         timeout_seconds, now)
    total_rank = sum(ranks)
    return {node: value / total_rank for node, value in zip(nodes, ranks, strict=True)}


_EDGE_ERROR = "PageRank 边权必须是有限非负数"


class _Python:
    """Per-source lists of ``(target index, probability)``; empty list = dangling."""

    __slots__ = ("edges",)

    def __init__(self, edges: list[list[tuple[int, float]]]) -> None:
        self.edges = edges


class _Arrays:
    """Edge list as arrays (source, target, probability) plus the dangling mask."""

    __slots__ = ("src", "dst", "prob", "dangling", "n")

    def __init__(self, src: np.ndarray, dst: np.ndarray, prob: np.ndarray, dangling: np.ndarray, n: int) -> None:
        self.src, self.dst, self.prob, self.dangling, self.n = src, dst, prob, dangling, n


def _build_python(nodes: list[N], adjacency: Mapping[N, Mapping[N, float]]) -> _Python:
    index = {node: i for i, node in enumerate(nodes)}
    edges: list[list[tuple[int, float]]] = []
    for node in nodes:
        targets = adjacency.get(node)
        kept: list[tuple[int, float]] = []
        total = 0.0
        if targets:
            for target, raw in targets.items():
                weight = float(raw)
                if not math.isfinite(weight) or weight < 0.0:
                    raise ValueError(_EDGE_ERROR)
                if weight == 0.0:
                    continue
                kept.append((index[target], weight))
                total += weight
        edges.append([(t, w / total) for t, w in kept] if total > 0.0 else [])
    return _Python(edges)


def _build_arrays(nodes: list[N], adjacency: Mapping[N, Mapping[N, float]]) -> _Arrays:
    index = {node: i for i, node in enumerate(nodes)}
    lookup = index.__getitem__
    n = len(nodes)
    counts = np.zeros(n, dtype=np.intp)
    dst_parts: list[int] = []
    weight_parts: list[float] = []
    for i, node in enumerate(nodes):
        targets = adjacency.get(node)
        if not targets:
            continue
        counts[i] = len(targets)
        dst_parts.extend(map(lookup, targets))
        weight_parts.extend(targets.values())
    weights = np.asarray(weight_parts, dtype=np.float64)
    if weights.size and not (np.isfinite(weights).all() and (weights >= 0.0).all()):
        raise ValueError(_EDGE_ERROR)
    keep = weights > 0.0
    src = np.repeat(np.arange(n, dtype=np.intp), counts)[keep]
    dst = np.asarray(dst_parts, dtype=np.intp)[keep]
    weights = weights[keep]
    totals = np.bincount(src, weights=weights, minlength=n)
    prob = weights / totals[src] if src.size else weights
    return _Arrays(src, dst, prob, totals <= 0.0, n)


def _timeout() -> PageRankTimeoutError:
    return PageRankTimeoutError("个性化 PageRank 计算超时")


def _python_step(system: _Python, personal: list[float], alpha: float) -> Callable[[list[float]], tuple[list[float], float]]:
    edges = system.edges
    n = len(edges)
    dangling = [i for i, out in enumerate(edges) if not out]

    def step(ranks: list[float]) -> tuple[list[float], float]:
        dangling_mass = sum(ranks[i] for i in dangling)
        base = (1.0 - alpha) + alpha * dangling_mass
        updated = [base * personal[i] for i in range(n)]
        for source in range(n):
            out = edges[source]
            if out:
                share = alpha * ranks[source]
                for target, probability in out:
                    updated[target] += share * probability
        return updated, sum(abs(updated[i] - ranks[i]) for i in range(n))

    return step


def _numpy_step(system: _Arrays, personal: list[float], alpha: float) -> Callable[[np.ndarray], tuple[np.ndarray, float]]:
    src, dst, prob, dangling, n = system.src, system.dst, system.prob, system.dangling, system.n
    p = np.asarray(personal, dtype=np.float64)

    def step(ranks: np.ndarray) -> tuple[np.ndarray, float]:
        dangling_mass = float(ranks[dangling].sum())
        base = (1.0 - alpha) + alpha * dangling_mass
        flow = np.bincount(dst, weights=(alpha * ranks[src]) * prob, minlength=n)
        updated = base * p + flow
        return updated, float(np.abs(updated - ranks).sum())

    return step


def _iterate(
    step: Callable[[Any], tuple[Any, float]],
    ranks: Any,
    max_iterations: int,
    tolerance: float,
    timeout_seconds: float,
    clock: Callable[[], float],
) -> Any:
    """Apply ``step`` (ranks → updated ranks and their L1 change) until the change is at most
    ``tolerance`` or ``max_iterations`` ran; the deadline is checked before and after each step."""
    deadline = clock() + timeout_seconds
    for _ in range(max_iterations):
        if clock() >= deadline:
            raise _timeout()
        updated, delta = step(ranks)
        if clock() >= deadline:
            raise _timeout()
        ranks = updated
        if delta <= tolerance:
            break
    return ranks
