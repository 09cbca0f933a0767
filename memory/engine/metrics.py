"""Ranking quality metrics with binary relevance."""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "bootstrap_mean", "ndcg_at_k", "recall_at_k"]


def ndcg_at_k(ranked_ids: Sequence[Hashable], positive_ids: Collection[Hashable], k: int) -> float:
    """nDCG@k with binary gains.

    No positives or ``k <= 0`` → 0.0. ``DCG = Σ_{i<k, ranked[i]∈P} 1/log2(i+2)``,
    ``IDCG = Σ_{i<min(|P|,k)} 1/log2(i+2)``; result ``DCG / IDCG``.
    """
    positives = set(positive_ids)
    if not positives or k <= 0:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 2) for i, item in enumerate(ranked_ids[:k]) if item in positives)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(min(len(positives), k)))
    return dcg / idcg


def recall_at_k(ranked_ids: Sequence[Hashable], positive_ids: Collection[Hashable], k: int) -> float:
    """Share of the positives found among the first ``k`` ranked ids; no positives or ``k <= 0`` → 0.0."""
    positives = set(positive_ids)
    if not positives or k <= 0:
        return 0.0
    return len(positives.intersection(ranked_ids[:k])) / len(positives)


@dataclass(frozen=True)
class Interval:
    """A mean and its bootstrap confidence interval (``level``, percentile method)."""

    mean: float
    low: float
    high: float
    n: int
    level: float = 0.95

    def as_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n, "level": self.level}


def bootstrap_mean(values: Sequence[float], *, samples: int = 2000, seed: int = 0, level: float = 0.95) -> Interval | None:
    """The mean of ``values`` with a percentile-bootstrap interval: ``samples`` resamples of the values
    with replacement (one value per turn: resampling turns), a fixed ``seed`` so a report can be
    reproduced. A paired difference is the mean of the per-item differences. None for no values."""
    data = np.asarray(list(values), dtype=np.float64)
    if data.size == 0:
        return None
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(samples, data.size))].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(round(float(data.mean()), 4), round(float(low), 4), round(float(high), 4), int(data.size), level)
