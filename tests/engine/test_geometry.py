"""Drawing geometry: the retention curve's SVG coordinates and the association graph's force layout."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from memory.engine import decay
from memory.engine.geometry import decay_curve_geometry, force_layout

HOUR = decay.MS_PER_HOUR
NOW = 1_700_000_000_000


def _points(polyline: str) -> list[tuple[float, float]]:
    return [tuple(float(v) for v in p.split(",")) for p in polyline.split()]


def test_curve_runs_from_the_last_change_through_now_past_the_freeze_instant():
    updated, half_life = NOW - 48 * HOUR, 24.0
    due = decay.freeze_due_at(0.8, updated, half_life)
    curve = decay_curve_geometry(0.8, updated, half_life, due_at=due, now=NOW, width=680, height=240)
    past, projected = _points(curve.past), _points(curve.projected)
    assert len(past) == 40 and len(projected) == 60
    assert past[0][0] == curve.left and projected[-1][0] == curve.right == 668
    assert past[-1] == projected[0] and projected[0][0] == curve.now_x
    # y grows downwards: retention 0.8 → 0.2 over two half-lives, then lower still
    assert past[0][1] == pytest.approx(curve.bottom - (curve.bottom - curve.top) * 0.8, abs=0.1)
    assert past[-1][1] == pytest.approx(curve.bottom - (curve.bottom - curve.top) * 0.2, abs=0.1)
    assert all(a[1] <= b[1] for a, b in zip(projected, projected[1:], strict=False))
    # the freeze instant lies on the projection, where the curve crosses the freeze line
    assert curve.now_x < curve.due_x < curve.right
    crossing = min(projected, key=lambda p: abs(p[0] - curve.due_x))
    assert crossing[1] == pytest.approx(curve.freeze_y, abs=2.0)
    assert curve.revive_y < curve.freeze_y  # revive (0.15) is above freeze (0.1)


def test_curve_ticks_split_the_span_and_label_the_retention_axis():
    updated = NOW - 10 * HOUR
    curve = decay_curve_geometry(1.0, updated, 504.0, due_at=decay.freeze_due_at(1.0, updated, 504.0), now=NOW)
    xs, instants, anchors = zip(*curve.x_ticks, strict=True)
    assert anchors == ("start", "middle", "middle", "middle", "end")
    assert xs[0] == curve.left and xs[-1] == curve.right
    assert instants[0] == updated and list(instants) == sorted(instants)
    assert [label for _y, label in curve.y_ticks] == ["0", "0.25", "0.5", "0.75", "1"]
    assert curve.y_ticks[0][0] == curve.bottom and curve.y_ticks[-1][0] == curve.top


def test_a_pinned_curve_has_no_freeze_instant_and_looks_a_year_ahead():
    updated = NOW - HOUR
    curve = decay_curve_geometry(1.0, updated, decay.PIN_HALF_LIFE_HOURS, due_at=NOW + 10**15, now=NOW)
    assert curve.due_x is None
    assert curve.x_ticks[-1][1] == NOW + 365 * 24 * HOUR
    assert all(y - curve.top < 2 for _x, y in _points(curve.projected))  # retention stays near 1.0 (0.993 in a year)


def test_layout_is_deterministic_and_inside_the_canvas():
    edges = [(0, 1, 0.9), (1, 2, 0.5), (3, 4, 1.0), (2, 0, 0.3)]
    first = force_layout(6, edges, size=(900, 640))
    assert first.shape == (6, 2)
    assert np.array_equal(first, force_layout(6, edges, size=(900, 640)))
    assert (first[:, 0] >= 80).all() and (first[:, 0] <= 900 - 80).all()
    assert (first[:, 1] >= 30).all() and (first[:, 1] <= 640 - 30).all()
    assert force_layout(0, [], size=(900, 640)).shape == (0, 2)
    assert force_layout(1, [], size=(900, 640)).tolist() == [[80.0, 30.0]]


def test_layout_pulls_linked_nodes_together():
    # pairs that start far apart on the circle (node order): the springs bring each pair together
    edges = [(0, 3, 1.0), (1, 6, 1.0), (2, 5, 1.0), (4, 7, 1.0)]
    pos = force_layout(8, edges, size=(900, 640))
    linked = {(i, j) for i, j, _w in edges}

    def dist(i: int, j: int) -> float:
        return float(np.hypot(*(pos[i] - pos[j])))

    near = np.mean([dist(i, j) for i, j in linked])
    apart = np.mean([dist(i, j) for i, j in itertools.combinations(range(8), 2) if (i, j) not in linked])
    assert near < 0.8 * apart
