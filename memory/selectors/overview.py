"""Counts of the memory layers and the pipeline's backlog: what the dashboard shows."""
from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from memory.meta import meta_get
from memory.models import (
    EXTRACT_CURSOR_KEY,
    PINNED,
    Episode,
    Fact,
    FactState,
    Job,
    Knowledge,
    MemoryEdge,
    MemoryNode,
    Message,
    Person,
    PipelineEvent,
    Stream,
)
from memory.selectors.conflicts import conflict_group_keys
from memory.selectors.messages import pending_counts


def layer_counts() -> dict[str, int]:
    """Row counts per layer (two aggregate queries plus one count per small table)."""
    facts = Fact.objects.aggregate(
        n_total=Count("id"),
        n_active=Count("id", filter=Fact.state_condition(FactState.ACTIVE)),
        n_frozen=Count("id", filter=Fact.state_condition(FactState.FROZEN)),
        n_pinned=Count("id", filter=Fact.state_condition(PINNED)),
    )
    episodes = Episode.objects.aggregate(
        n_total=Count("id"), n_placeholders=Count("id", filter=Q(kind=Episode.Kind.UNSUMMARIZED))
    )
    return {
        "persons": Person.objects.count(),
        "streams": Stream.objects.count(),
        "messages": Message.objects.count(),
        "episodes": episodes["n_total"],
        "placeholders": episodes["n_placeholders"],
        "facts": facts["n_total"],
        "facts_active": facts["n_active"],
        "facts_frozen": facts["n_frozen"],
        "facts_invalid": facts["n_total"] - facts["n_active"] - facts["n_frozen"],  # invalidated or superseded
        "facts_pinned": facts["n_pinned"],
        "knowledge": Knowledge.objects.count(),
        "nodes": MemoryNode.objects.count(),
    }


def extraction_cursors() -> dict[int, int]:
    """``{stream_id: last extracted message id}`` from the meta row the extractor keeps."""
    raw = meta_get(EXTRACT_CURSOR_KEY, {}) or {}
    return {int(k): int(v) for k, v in raw.items() if str(k).isdigit()}


def stream_queues() -> list[dict[str, Any]]:
    """Per stream: messages waiting for summarisation and the extraction cursor lag.

    Three reads: streams, pending counts (grouped), and the lags — each stream's messages after
    its cursor, counted on the ``(stream_id, id)`` index (:func:`_lags`).
    """
    rows = list(Stream.objects.order_by("id"))
    pending = pending_counts()
    cursors = extraction_cursors()
    lag = _lags({s.pk: cursors.get(s.pk, 0) for s in rows})
    return [
        {
            "stream": s,
            "pending": pending.get(s.pk, 0),
            "cursor": cursors.get(s.pk),
            "lag": lag.get(s.pk, 0),
        }
        for s in rows
    ]


LAG_BATCH = 500  # streams per statement (two parameters each)


def _lags(after: dict[int, int]) -> dict[int, int]:
    """``{stream id: messages with an id above after[stream]}``: one index range count per stream.

    (One ``WHERE`` with an ``OR`` arm per stream made SQLite test every arm on every message:
    2 s at 200 streams and 200,000 messages.)
    """
    out: dict[int, int] = {}
    items = list(after.items())
    for start in range(0, len(items), LAG_BATCH):
        batch = items[start:start + LAG_BATCH]
        with connection.cursor() as cur:
            cur.execute(
                f"WITH c(stream_id, after_id) AS (VALUES {', '.join(['(%s, %s)'] * len(batch))})"
                " SELECT c.stream_id, (SELECT count(*) FROM messages m WHERE m.stream_id = c.stream_id"
                " AND m.id > c.after_id) FROM c",
                [value for pair in batch for value in pair],
            )
            out.update((int(sid), int(n)) for sid, n in cur.fetchall())
    return out


def vector_coverage() -> dict[str, dict[str, int]]:
    """Facts and knowledge with / without a vector, and raw vectors still missing SQ8."""

    def coverage(model: type[Fact] | type[Knowledge]) -> dict[str, int]:
        # Three counts, each answered by an index (two of them partial): one aggregate
        # with FILTERs would scan every row and its kilobytes of vector.
        total = model.objects.count()
        without = model.objects.filter(embedding__isnull=True).count()
        pending = model.objects.filter(embedding__isnull=False, embedding_q8__isnull=True).count()
        return {"n_total": total, "with_vector": total - without, "without": without, "sq8_pending": pending}

    return {"facts": coverage(Fact), "knowledge": coverage(Knowledge)}


def edge_stats() -> dict[str, Any]:
    """Active and frozen edges, and the last ``edges_decayed`` event."""
    counts = MemoryEdge.objects.aggregate(
        n_active=Count("id", filter=Q(active=True)), n_frozen=Count("id", filter=Q(active=False))
    )
    counts = {"active": counts["n_active"], "frozen": counts["n_frozen"]}
    counts["last_decay"] = PipelineEvent.objects.filter(kind="edges_decayed").order_by("-seq").first()
    return counts


def at_a_glance(*, now: int, pending: int | None = None) -> dict[str, Any]:
    """What an operator checks first: facts learnt today (local midnight), conflict groups
    waiting, jobs running and failed in the last 24 h, messages waiting to be summarised
    (``pending`` when the caller has counted them already, as the dashboard's stream queues do)."""
    midnight = timezone.localtime(dt.datetime.fromtimestamp(now / 1000, tz=dt.UTC)).replace(
        hour=0, minute=0, second=0, microsecond=0)
    day_ago = dt.datetime.fromtimestamp(now / 1000, tz=dt.UTC) - dt.timedelta(hours=24)
    jobs = Job.objects.filter(Q(status__in=[Job.Status.QUEUED, Job.Status.RUNNING]) | Q(
        status=Job.Status.FAILED, finished_at__gte=day_ago)).values_list("status", flat=True)
    return {
        "learnt_today": Fact.objects.filter(created_at__gte=int(midnight.timestamp() * 1000)).count(),
        "conflicts": len(conflict_group_keys()),
        "jobs_running": sum(1 for s in jobs if s != Job.Status.FAILED),
        "jobs_failed": sum(1 for s in jobs if s == Job.Status.FAILED),
        "pending": sum(pending_counts().values()) if pending is None else pending,
    }


def recent_events(*, kinds: Sequence[str], limit: int = 20) -> list[PipelineEvent]:
    """The newest pipeline events of the given kinds."""
    return list(PipelineEvent.objects.filter(kind__in=list(kinds)).order_by("-seq")[:limit])


def recent_jobs(*, kind: str | None = None, limit: int = 50) -> list[Job]:
    """The newest jobs (of one kind, or all)."""
    rows = Job.objects.order_by("-id")
    if kind is not None:
        rows = rows.filter(kind=kind)
    return list(rows[:limit])
