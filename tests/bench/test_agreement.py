"""bench.agreement's measure: overlap of two top-k lists per question, and identical lists."""
from __future__ import annotations

from bench.agreement import _agreement


def test_same_ids_in_another_order_agree_but_are_not_identical():
    assert _agreement([[1, 2, 3], [4]], [[3, 2, 1], [4]]) == (1.0, 0.5)


def test_overlap_is_over_the_longer_list_and_two_empty_lists_agree():
    mean, exact = _agreement([[1, 2, 3, 4], [], [5]], [[1, 2], [], []])
    assert mean == (0.5 + 1.0 + 0.0) / 3
    assert exact == 1 / 3
