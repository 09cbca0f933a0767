"""Ranking arithmetic shared by every recall path.

* lexical relevance: :func:`memory.engine.decay.relevance_from_bm25` (0..1);
* dense fusion (only when both vectors exist): :func:`fused_relevance`
  ``= 0.4 * lexical + 0.6 * (cos + 1) / 2`` — not tunable;
* retention is applied *after* fusion: :func:`blend_score`
  ``= max(0, relevance) ** bm25_weight * (floor + (1 - floor) * retention)``;
* the candidate pool may be cut by a score percentile: :func:`apply_pool_percentile`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "LEXICAL_WEIGHT",
    "DENSE_WEIGHT",
    "DEFAULT_BM25_WEIGHT",
    "DEFAULT_RETENTION_WEIGHT_FLOOR",
    "blend_score",
    "fused_relevance",
    "apply_pool_percentile",
]

LEXICAL_WEIGHT: float = 0.4
DENSE_WEIGHT: float = 0.6
DEFAULT_BM25_WEIGHT: float = 1.0
DEFAULT_RETENTION_WEIGHT_FLOOR: float = 0.35


def blend_score(relevance: float, retention: float, overrides: Mapping[str, float] | None = None) -> float:
    """Final score of a candidate: ``max(0, relevance) ** w * (f + (1 - f) * retention)``.

    ``w = overrides['bm25_weight']`` (default 1.0), ``f = overrides['retention_weight_floor']``
    (default 0.35). With the defaults the result is bit-identical to
    ``decay.score(bm25, retention)`` when ``relevance = relevance_from_bm25(bm25)``.
    ``overrides`` are expected to be validated already (see ``tuning.validate_overrides``).
    """
    opts = overrides or {}
    weight = float(opts.get("bm25_weight", DEFAULT_BM25_WEIGHT))
    floor = float(opts.get("retention_weight_floor", DEFAULT_RETENTION_WEIGHT_FLOOR))
    rel = max(0.0, relevance)
    if weight != 1.0:
        rel = rel**weight
    return rel * (floor + (1.0 - floor) * retention)


def fused_relevance(lexical: float, cosine: float) -> float:
    """Lexical/dense fusion: ``0.4 * lexical + 0.6 * ((cosine + 1) / 2)``; in ``[0, 1]`` for valid inputs."""
    return LEXICAL_WEIGHT * lexical + DENSE_WEIGHT * ((cosine + 1.0) / 2.0)


def apply_pool_percentile(scores: Sequence[float], threshold: float) -> int:
    """How many entries of a (descending) candidate pool survive a percentile cut.

    ``threshold <= 0`` or empty → ``len(scores)``; else ``cut = sorted(scores)[min(n-1,
    int(threshold*n))]`` and the result is ``max(1, #{s >= cut})``. Callers keep that
    many entries from the head of their descending pool.
    """
    n = len(scores)
    if threshold <= 0 or n == 0:
        return n
    cut = sorted(scores)[min(n - 1, int(threshold * n))]
    return max(1, sum(1 for s in scores if s >= cut))
