"""Drawing geometry of the console's SVG pictures: the retention curve of a fact and the
force layout of the association graph.

Pure arithmetic (numpy), no I/O: callers pass the numbers and get coordinates back;
templates emit the SVG elements (so every label is escaped by the template engine).
Instants are integer epoch milliseconds, as in :mod:`memory.engine.decay`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from memory.engine import decay

__all__ = ["CurveGeometry", "decay_curve_geometry", "force_layout"]

#: Retention values with a horizontal grid line and a label on the curve.
CURVE_Y_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass
class CurveGeometry:
    """SVG coordinates of a retention curve.

    ``x_ticks`` are ``(x, label, text-anchor)``: :func:`decay_curve_geometry` puts the
    tick's instant (ms) in the label slot; the caller formats it for display.
    """

    width: int
    height: int
    past: str  # polyline points
    projected: str
    freeze_y: float
    revive_y: float
    now_x: float
    due_x: float | None
    x_ticks: list[tuple[float, object, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    left: int = 44
    right: int = 0
    top: int = 12
    bottom: int = 0


def decay_curve_geometry(
    strength: float, updated_at: int, half_life_hours: float, *, due_at: int, now: int,
    width: int = 680, height: int = 240,
) -> CurveGeometry:
    """The retention curve from the last strength change to past ``due_at``, as SVG coordinates.

    Past (``updated_at`` → now) is solid, the projection (now → end) dashed; the end is
    ``due_at`` plus a quarter of the span (at least a day); a pinned fact's ends one year
    ahead and has no freeze instant. Five x ticks (instants in ms) split the span evenly.
    """
    pinned = decay.is_pinned(half_life_hours)
    start = min(updated_at, now)
    if pinned:
        end = now + 365 * 24 * decay.MS_PER_HOUR
    else:
        end = max(now, due_at)
        end = end + max((end - start) // 4, 24 * decay.MS_PER_HOUR)
    left, right, top, bottom = 44, width - 12, 12, height - 28
    span = max(1, end - start)

    def x(t: int) -> float:
        return round(left + (right - left) * (t - start) / span, 1)

    def y(r: float) -> float:
        return round(bottom - (bottom - top) * r, 1)

    def points(samples: Sequence[tuple[int, float]]) -> str:
        return " ".join(f"{x(t)},{y(r)}" for t, r in samples)

    past = decay.decay_curve(strength, updated_at, half_life_hours, start, now, 40)
    projected = decay.decay_curve(strength, updated_at, half_life_hours, now, end, 60)
    ticks = []
    for i in range(5):
        t = start + span * i // 4
        ticks.append((x(t), t, "start" if i == 0 else "end" if i == 4 else "middle"))
    return CurveGeometry(
        width=width,
        height=height,
        past=points(past),
        projected=points(projected),
        freeze_y=y(decay.FREEZE),
        revive_y=y(decay.REVIVE),
        now_x=x(now),
        due_x=x(due_at) if not pinned and start <= due_at <= end else None,
        x_ticks=ticks,
        y_ticks=[(y(v), f"{v:g}") for v in CURVE_Y_TICKS],
        left=left,
        right=right,
        top=top,
        bottom=bottom,
    )


def force_layout(
    n: int, edges: Sequence[tuple[int, int, float]], *, size: tuple[int, int], iterations: int = 50
) -> np.ndarray:
    """Deterministic Fruchterman–Reingold layout of ``n`` nodes (numpy, O(iterations · n²)).

    ``edges`` are ``(i, j, weight)`` with node indexes ``0 <= i, j < n``. Starts from a
    circle (node order = the caller's order) so the same graph always draws the same
    way; springs are weighted (at least 0.2). Returns an ``(n, 2)`` array of positions
    inside ``size`` with room for labels under the nodes. 200 nodes take ~30 ms.
    """
    width, height = size
    if n == 0:
        return np.zeros((0, 2))
    angles = np.linspace(0, 2 * math.pi, n, endpoint=False)
    pos = (np.column_stack([np.cos(angles), np.sin(angles)]) * 0.5).astype(np.float32)
    if n > 1:
        k2 = np.float32(1.0 / n)
        k = math.sqrt(1.0 / n)
        src = np.array([e[0] for e in edges], dtype=np.intp)
        dst = np.array([e[1] for e in edges], dtype=np.intp)
        weight = np.array([max(0.2, e[2]) for e in edges], dtype=np.float32)
        temperature = 0.1
        for _ in range(iterations):
            delta = pos[:, None, :] - pos[None, :, :]
            dist2 = np.einsum("ijk,ijk->ij", delta, delta) + np.float32(1e-6)
            force = np.einsum("ijk,ij->ik", delta, k2 / dist2)  # repulsion k²/d along the unit vector
            if len(src):
                d = pos[src] - pos[dst]
                dd = np.sqrt(np.einsum("ij,ij->i", d, d)) + np.float32(1e-6)
                pull = d * (dd / k * weight)[:, None]
                np.add.at(force, src, -pull)
                np.add.at(force, dst, pull)
            force -= pos * np.float32(0.05 * n)  # gravity keeps components on the canvas
            length = np.sqrt(np.einsum("ij,ij->i", force, force)) + np.float32(1e-9)
            pos += force / length[:, None] * np.minimum(length, temperature)[:, None]
            temperature *= 0.93
    pos = pos.astype(np.float64)
    lo, hi = pos.min(0), pos.max(0)
    span = np.where(hi - lo < 1e-9, 1.0, hi - lo)
    margin_x, margin_y = 80, 30  # room for the labels under the nodes
    pos = (pos - lo) / span
    pos[:, 0] = margin_x + pos[:, 0] * (width - 2 * margin_x)
    pos[:, 1] = margin_y + pos[:, 1] * (height - 2 * margin_y - 16)
    return pos
