"""nDCG / recall — docs/REFERENCE.md §12."""

from __future__ import annotations

import math

import pytest

from memory.engine.metrics import ndcg_at_k, recall_at_k


def test_ndcg_example() -> None:  # 84
    value = ndcg_at_k([10, 11, 12, 13], {11, 13}, 4)
    assert value == pytest.approx((1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3)))
    assert value == pytest.approx(0.650921, abs=1e-6)


def test_ndcg_edges() -> None:  # 84
    assert ndcg_at_k([11, 13, 10], {11, 13}, 3) == 1.0
    assert ndcg_at_k([1, 2, 3], set(), 3) == 0.0
    assert ndcg_at_k([1, 2, 3, 4], {4}, 3) == 0.0
    assert ndcg_at_k([4], {4}, 0) == 0.0
    assert ndcg_at_k([], {4}, 3) == 0.0
    # more positives than k: IDCG is cut at k
    assert ndcg_at_k([1, 2], {1, 2, 3}, 2) == 1.0


def test_recall_at_k() -> None:
    assert recall_at_k([10, 11, 12, 13], {11, 13}, 2) == 0.5
    assert recall_at_k([10, 11, 12, 13], {11, 13}, 4) == 1.0
    assert recall_at_k([10], set(), 4) == 0.0
    assert recall_at_k([10], {10}, 0) == 0.0
