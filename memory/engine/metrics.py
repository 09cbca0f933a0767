"""Ranking quality metrics with binary relevance."""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Sequence

__all__ = ["ndcg_at_k", "recall_at_k"]


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
