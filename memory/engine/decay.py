"""Forgetting curve of facts and association edges.

Pure arithmetic, no I/O. All instants are integer epoch **milliseconds**; half-lives
are in **hours**.

retention(t) = clamp(strength) * 2 ** (-hours_since_update / half_life)

A fact is *frozen* (``active = 0``) once its retention drops to ``FREEZE`` or below and
only becomes active again at ``REVIVE`` or above (hysteresis, see :func:`evaluate`).
``due_at`` (:func:`freeze_due_at`) is the instant at which an untouched fact reaches
``FREEZE``; it is precomputed on every strength change so that a sweep only has to
look at rows whose ``due_at <= now``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "FREEZE",
    "REVIVE",
    "MS_PER_HOUR",
    "HALF_LIFE_HOURS",
    "FACT_KINDS",
    "DEFAULT_FACT_KIND",
    "DEFAULT_HALF_LIFE",
    "PIN_HALF_LIFE_HOURS",
    "EDGE_HALF_LIFE_HOURS",
    "EDGE_BOOST",
    "BOOST",
    "RETENTION_WEIGHT_FLOOR",
    "is_pinned",
    "half_life_for",
    "clamp_unit",
    "retention",
    "freeze_due_at",
    "reinforce",
    "relevance_from_bm25",
    "retention_weight",
    "score",
    "DecayState",
    "DecayEval",
    "evaluate",
    "decay_curve",
]

#: Retention at or below which an active fact / edge is frozen.
FREEZE: float = 0.1
#: Retention at or above which a frozen item counts as alive again.
REVIVE: float = 0.15
MS_PER_HOUR: int = 3_600_000

#: Half-life in hours per fact kind. 状态 and 习惯 are kept on purpose (docs/REFERENCE.md §1).
HALF_LIFE_HOURS: dict[str, float] = {
    "身份": 8760.0,  # 24 * 365
    "日期": 8760.0,
    "偏好": 2160.0,  # 24 * 90
    "关系": 2160.0,
    "习惯": 1440.0,  # 24 * 60
    "事件": 504.0,  # 24 * 21
    "状态": 12.0,
}
FACT_KINDS: frozenset[str] = frozenset(HALF_LIFE_HOURS)
DEFAULT_FACT_KIND: str = "事件"
DEFAULT_HALF_LIFE: float = 504.0
#: A pinned fact is stored with strength 1.0 and this half-life (~100 years).
PIN_HALF_LIFE_HOURS: float = 876_000.0
#: Association edges decay with this half-life.
EDGE_HALF_LIFE_HOURS: float = 720.0
#: Gain used by :func:`reinforce` (facts and edges alike).
BOOST: float = 0.35
EDGE_BOOST: float = BOOST
#: Lower end of :func:`retention_weight` (retention 0 still keeps 35 % of relevance).
RETENTION_WEIGHT_FLOOR: float = 0.35


def is_pinned(half_life_hours: float) -> bool:
    """True iff the half-life encodes a pin (``>= PIN_HALF_LIFE_HOURS``)."""
    return half_life_hours >= PIN_HALF_LIFE_HOURS


def half_life_for(kind: str | None) -> float:
    """Half-life (hours) for a fact kind; ``None``/empty/unknown kinds fall back to 事件 (504 h)."""
    return HALF_LIFE_HOURS.get(kind or DEFAULT_FACT_KIND, DEFAULT_HALF_LIFE)


def clamp_unit(value: float) -> float:
    """Clamp ``value`` into ``[0, 1]``."""
    return max(0.0, min(1.0, value))


def retention(strength: float, updated_at: int, half_life_hours: float, now: int) -> float:
    """Retention at ``now``: ``clamp(strength) * 2 ** (-hours / half_life)``.

    ``hours = max(0, (now - updated_at) / MS_PER_HOUR)``: an ``updated_at`` in the
    future means no decay. ``half_life_hours`` must be positive.
    """
    hours = max(0.0, (now - updated_at) / MS_PER_HOUR)
    return clamp_unit(strength) * 2.0 ** (-hours / half_life_hours)


def freeze_due_at(strength: float, updated_at: int, half_life_hours: float) -> int:
    """Instant (ms) at which retention reaches ``FREEZE`` if nothing touches the item.

    ``s = clamp(strength)``; ``s <= FREEZE`` → ``updated_at``; otherwise
    ``updated_at + int(h * log2(s / FREEZE) * MS_PER_HOUR)`` — truncated toward zero, so
    the instant may lie up to 1 ms before retention is actually down to 0.1.
    """
    s = clamp_unit(strength)
    if s <= FREEZE:
        return int(updated_at)
    return int(updated_at) + int(half_life_hours * math.log2(s / FREEZE) * MS_PER_HOUR)


def reinforce(current: float, boost: float = BOOST) -> float:
    """Saturating reinforcement ``clamp(current + boost * (1 - current))``; never above 1."""
    return clamp_unit(current + boost * (1.0 - current))


def relevance_from_bm25(bm25: float) -> float:
    """Map an FTS5 ``bm25()`` value (negative = better) to ``[0, 1)``: ``r / (1 + r)``, ``r = max(0, -bm25)``."""
    r = max(0.0, -bm25)
    return r / (1.0 + r)


def retention_weight(value: float) -> float:
    """Map retention ``[0, 1]`` to a weight in ``[0.35, 1]``: ``0.35 + 0.65 * value``."""
    return 0.35 + 0.65 * value


def score(bm25: float, ret: float) -> float:
    """Ranking score of a lexical hit: ``relevance_from_bm25(bm25) * retention_weight(ret)``."""
    return relevance_from_bm25(bm25) * retention_weight(ret)


@dataclass(frozen=True)
class DecayState:
    """The decay-relevant columns of a fact row."""

    strength: float
    updated_at: int
    half_life_hours: float
    active: bool


@dataclass(frozen=True)
class DecayEval:
    """Result of :func:`evaluate`."""

    retention: float
    active: bool
    due_at: int


def evaluate(state: DecayState, now: int) -> DecayEval:
    """Evaluate a fact at ``now`` with hysteresis.

    Active stays active iff ``retention > FREEZE`` (strict); inactive becomes active iff
    ``retention >= REVIVE``. ``due_at`` is :func:`freeze_due_at` of the state.
    """
    r = retention(state.strength, state.updated_at, state.half_life_hours, now)
    active = r > FREEZE if state.active else r >= REVIVE
    return DecayEval(
        retention=r,
        active=active,
        due_at=freeze_due_at(state.strength, state.updated_at, state.half_life_hours),
    )


def decay_curve(
    strength: float,
    updated_at: int,
    half_life_hours: float,
    start: int,
    end: int,
    points: int,
) -> list[tuple[int, float]]:
    """Sample the retention curve at ``points`` evenly spaced instants from ``start`` to ``end``.

    Returns ``[(t_ms, retention), ...]`` with both ends included (``points >= 2``; a
    single point samples ``start``). Raises ``ValueError`` if ``points < 1`` or
    ``end < start``.
    """
    if points < 1:
        raise ValueError("points must be >= 1")
    if end < start:
        raise ValueError("end must not precede start")
    if points == 1:
        instants = [int(start)]
    else:
        span = end - start
        instants = [int(start) + (span * i) // (points - 1) for i in range(points)]
    return [(t, retention(strength, updated_at, half_life_hours, t)) for t in instants]
