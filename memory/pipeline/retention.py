"""Retention of the two logs that grow with traffic: ``pipeline_events`` and ``turns``.

Limits (settings, docs/CONFIGURATION.md "Retention"):

* events — ``EVENT_RETENTION_COUNT`` (20 000) newest and ``EVENT_RETENTION_HOURS``
  (72) of age, as the reference keeps them: an event goes when it is older than
  the age limit *or* beyond the count. ``summary_batch_skipped`` events are kept
  whatever their age: they explain placeholder episodes, which live forever
  (one per given-up batch, so they stay few).
* turns — ``TURN_RETENTION_COUNT`` (5 000) newest and ``TURN_RETENTION_HOURS``
  (30 days). Trace-replay evaluation (``tuning.evaluation.build_samples``)
  replays the most recent turns, at most :data:`REPLAYABLE_TURNS` (500) of them,
  so the newest 500 turns are never deleted, however old, and the count limit
  never goes below 500. Turns an app registered as kept (:func:`register_kept_turns`:
  tuning's relevance-labelled turns, a reviewer's work) are never deleted by retention.

Deletes run in chunks of ``CHUNK`` rows, each its own short transaction
(SQLite holds one writer at a time). Rerunning deletes nothing more.

The same sweep prunes the change log (:func:`memory.search.changes.prune`) and, on PostgreSQL,
folds the lexical statistics' delta rows (one per stored message otherwise piles up).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction

from memory import backends
from memory.models import PipelineEvent, Turn
from memory.search import changes
from memory.services import now_ms

__all__ = [
    "CHUNK", "KEEP_EVENT_KINDS", "REPLAYABLE_TURNS", "prune_events", "prune_turns", "register_kept_turns",
    "retention_sweep",
]

HOUR_MS = 3_600_000
CHUNK = 5_000
KEEP_EVENT_KINDS = ("summary_batch_skipped",)
#: Trace replay reads at most this many of the newest turns (the ``max_turns`` limit of an evaluation),
#: so pruning never goes below it.
REPLAYABLE_TURNS = 500


#: Callables giving the ids of turns retention keeps (a queryset of ``id`` values), registered by apps.
_KEPT_TURNS: list[Callable[[], Any]] = []


def register_kept_turns(ids: Callable[[], Any]) -> None:
    """Never prune the turns ``ids()`` names (tuning registers its labelled turns: memory never imports it)."""
    if ids not in _KEPT_TURNS:
        _KEPT_TURNS.append(ids)


def _prunable_turns() -> Any:
    turns = Turn.objects.all()
    for ids in _KEPT_TURNS:
        turns = turns.exclude(id__in=ids())
    return turns


def _nth_newest_id(queryset: Any, field: str, n: int) -> int | None:
    """The ``field`` of the n-th newest row (1-based), or None when there are fewer rows."""
    if n <= 0:
        return None
    row = queryset.order_by(f"-{field}").values_list(field, flat=True)[n - 1 : n]
    return next(iter(row), None)


def _delete_chunks(queryset: Any, field: str) -> int:
    deleted = 0
    while True:
        with transaction.atomic():
            ids = list(queryset.order_by(field).values_list(field, flat=True)[:CHUNK])
            if not ids:
                return deleted
            deleted += queryset.model.objects.filter(**{f"{field}__in": ids}).delete()[0]
        if len(ids) < CHUNK:
            return deleted


def prune_events(*, now: int, max_count: int | None = None, max_hours: float | None = None) -> int:
    """Delete events older than ``max_hours`` or beyond the newest ``max_count``; returns how many."""
    max_count = int(settings.EVENT_RETENTION_COUNT if max_count is None else max_count)
    max_hours = float(settings.EVENT_RETENTION_HOURS if max_hours is None else max_hours)
    prunable = PipelineEvent.objects.exclude(kind__in=KEEP_EVENT_KINDS)
    deleted = _delete_chunks(prunable.filter(at__lt=now - int(max_hours * HOUR_MS)), "seq")
    oldest_kept = _nth_newest_id(prunable, "seq", max_count)
    if oldest_kept is not None:
        deleted += _delete_chunks(prunable.filter(seq__lt=oldest_kept), "seq")
    return deleted


def prune_turns(*, now: int, max_count: int | None = None, max_hours: float | None = None) -> int:
    """Delete turns beyond the newest ``max_count`` or older than ``max_hours``; the newest 500 always stay."""
    floor = REPLAYABLE_TURNS
    max_count = max(floor, int(settings.TURN_RETENTION_COUNT if max_count is None else max_count))
    max_hours = float(settings.TURN_RETENTION_HOURS if max_hours is None else max_hours)
    deleted = 0
    prunable = _prunable_turns()
    oldest_kept = _nth_newest_id(Turn.objects.all(), "id", max_count)
    if oldest_kept is not None:
        deleted += _delete_chunks(prunable.filter(id__lt=oldest_kept), "id")
    replayable = _nth_newest_id(Turn.objects.all(), "id", floor)
    if replayable is not None:
        deleted += _delete_chunks(prunable.filter(id__lt=replayable, at__lt=now - int(max_hours * HOUR_MS)), "id")
    return deleted


def retention_sweep(*, at: int | None = None) -> dict[str, int]:
    """Prune events and turns to their limits (and the change log); returns ``{"events": n, "turns": n}`` deleted."""
    now = now_ms() if at is None else int(at)
    changes.prune()
    backends.lexical().fold_statistics()
    return {"events": prune_events(now=now), "turns": prune_turns(now=now)}
