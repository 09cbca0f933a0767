"""bench/api_ab.py: two revisions served at once, turns alternating, compared pair by pair."""
from __future__ import annotations

from bench import api_ab


def test_the_paired_difference_cancels_what_slows_both_sides_alike():
    drift = [0.0, 12.0, 0.0, 30.0, 5.0]  # the machine's phases, shared by the two sides of each pair
    a = [20.0 + d for d in drift]
    b = [19.0 + d for d in drift]
    out = api_ab.paired(a, b)
    assert out["median_difference_ms"] == 1.0 and out["b_faster_share"] == 1.0
    assert out["a"]["median_ms"] == 25.0 and out["b"]["median_ms"] == 24.0  # each side's own statistics
    reverse = api_ab.paired(b, a)
    assert reverse["median_difference_ms"] == -1.0 and reverse["b_faster_share"] == 0.0


def test_no_turns_no_difference():
    out = api_ab.paired([], [])
    assert out["median_difference_ms"] == 0.0 and out["a"] == {"n": 0}
