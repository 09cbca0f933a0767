"""Read helpers of the console pages (what the views show, computed in bulk).

Views stay short by delegating here: every function runs a fixed number of
queries whatever the number of rows (the console tests pin the counts), and
returns plain objects the templates render. Nothing here writes memory rows;
searches go through ``memory.selectors`` / ``memory.recall`` / ``memory.lexical``
and imports through ``memory.pipeline``.

SVG drawings (decay curve, association graph) are computed here as coordinates;
templates emit the elements, so every label is escaped by the template engine.
"""
from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.conf import settings
from django.db.models import Case, Count, F, Q, QuerySet, Value, When

from memory import selectors, services
from memory.engine import decay
from memory.engine.scoring import is_seed_profile
from memory.models import (
    Episode,
    EpisodeCue,
    Fact,
    Knowledge,
    MemoryEdge,
    MemoryNode,
    Message,
    Person,
    PipelineEvent,
    Stream,
)

EXTRACT_CURSOR_KEY = "fact_extract_cursor"

# --- dashboard -------------------------------------------------------------------


def layer_counts() -> dict[str, int]:
    """Row counts per layer (two aggregate queries plus one count per small table)."""
    facts = Fact.objects.aggregate(
        n_total=Count("id"),
        n_active=Count("id", filter=Q(superseded_by__isnull=True, active=True)),
        n_frozen=Count("id", filter=Q(superseded_by__isnull=True, active=False)),
        n_invalid=Count("id", filter=Q(superseded_by__isnull=False)),
        n_pinned=Count("id", filter=Q(half_life_hours__gte=decay.PIN_HALF_LIFE_HOURS)),
    )
    episodes = Episode.objects.aggregate(
        n_total=Count("id"), n_placeholders=Count("id", filter=Q(kind=Episode.UNSUMMARIZED))
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
        "facts_invalid": facts["n_invalid"],
        "facts_pinned": facts["n_pinned"],
        "knowledge": Knowledge.objects.count(),
        "nodes": MemoryNode.objects.count(),
    }


def extraction_cursors() -> dict[int, int]:
    """``{stream_id: last extracted message id}`` from the meta row the extractor keeps."""
    raw = services.meta_get(EXTRACT_CURSOR_KEY, {}) or {}
    return {int(k): int(v) for k, v in raw.items() if str(k).isdigit()}


def stream_queues() -> list[dict[str, Any]]:
    """Per stream: messages waiting for summarisation and the extraction cursor lag.

    Three queries: streams, pending counts (grouped), lag counts (one grouped query
    whose WHERE has one ``stream = s AND id > cursor`` arm per stream with a cursor).
    """
    rows = list(Stream.objects.order_by("id"))
    pending = selectors.pending_counts()
    cursors = extraction_cursors()
    lag_filter = Q(stream_id__in=[s.pk for s in rows if s.pk not in cursors])
    for stream_id, last_id in cursors.items():
        lag_filter |= Q(stream_id=stream_id, id__gt=last_id)
    lag = dict(Message.objects.filter(lag_filter).values_list("stream_id").annotate(n=Count("id")).order_by())
    return [
        {
            "stream": s,
            "pending": pending.get(s.pk, 0),
            "cursor": cursors.get(s.pk),
            "lag": lag.get(s.pk, 0),
        }
        for s in rows
    ]


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


def ping_workers(timeout: float = 0.5) -> dict[str, Any]:
    """Ping the Celery workers; ``status`` is ``ok``, ``down`` or ``unknown`` (broker error).

    Redis is asked first with the short timeouts of :mod:`memory.broker`; the
    ping then runs in a thread joined with a hard deadline: a broker that does
    not answer must not hold a web request for its whole connection-retry loop.
    """
    outcome: dict[str, Any] = {"status": "unknown", "workers": [], "error": ""}
    from memory import broker

    try:
        broker.check()  # ≤ ~0.1 s, and nothing at all while the breaker is open
    except broker.BrokerUnavailable as exc:
        return {**outcome, "error": str(exc)[:200]}

    def run() -> None:
        try:
            from config.celery import app

            replies = app.control.ping(timeout=timeout) or []
            names = sorted(name for reply in replies for name in reply)
            outcome.update(status="ok" if names else "down", workers=names)
        except Exception as exc:  # any broker/transport error means "unknown"
            outcome.update(status="unknown", error=str(exc)[:200])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout + 1.5)
    if thread.is_alive():
        return {"status": "unknown", "workers": [], "error": "broker did not answer"}
    return outcome


# --- streams and episodes --------------------------------------------------------


def stream_rows() -> list[Stream]:
    """Streams with message, pending and episode counts (subquery counts, one query + pending)."""
    from django.db.models import OuterRef, Subquery
    from django.db.models.functions import Coalesce

    def count_of(qs: QuerySet) -> Any:
        return Coalesce(Subquery(qs.values("stream_id").annotate(n=Count("id")).values("n")[:1]), 0)

    rows = list(
        Stream.objects.annotate(
            n_messages=count_of(Message.objects.filter(stream_id=OuterRef("pk")).order_by()),
            n_episodes=count_of(Episode.objects.filter(stream_id=OuterRef("pk")).order_by()),
            last_at=Subquery(
                Message.objects.filter(stream_id=OuterRef("pk")).order_by("-id").values("created_at")[:1]
            ),
        ).order_by("id")
    )
    pending = selectors.pending_counts()
    for row in rows:
        row.pending = pending.get(row.pk, 0)
    return rows


def filter_messages(stream: Stream, data: dict[str, Any]) -> QuerySet[Message]:
    """A stream's messages, newest first, filtered by speaker, local date range and summarised or not."""
    import datetime as dt

    from django.utils import timezone

    qs = Message.objects.filter(stream=stream).defer("embedding", "embedding_q8", "tokens")
    speaker = data.get("speaker")
    if speaker == "assistant":
        qs = qs.filter(role="assistant")
    elif speaker:
        qs = qs.filter(sender_person_id=int(speaker))

    def day_ms(day: dt.date) -> int:
        return int(timezone.make_aware(dt.datetime.combine(day, dt.time.min)).timestamp() * 1000)

    if data.get("since"):
        qs = qs.filter(created_at__gte=day_ms(data["since"]))
    if data.get("until"):
        qs = qs.filter(created_at__lt=day_ms(data["until"] + dt.timedelta(days=1)))
    if data.get("archived") == "yes":
        qs = qs.filter(episode__isnull=False)
    elif data.get("archived") == "no":
        qs = qs.filter(episode__isnull=True)
    return qs.order_by("-created_at", "-id")


def at_a_glance(*, now: int) -> dict[str, Any]:
    """What an operator checks first: facts learnt today (local midnight), conflict groups
    waiting, jobs running and failed in the last 24 h, messages waiting to be summarised."""
    import datetime as dt

    from django.utils import timezone

    from memory.models import Job

    midnight = timezone.localtime(dt.datetime.fromtimestamp(now / 1000, tz=dt.UTC)).replace(
        hour=0, minute=0, second=0, microsecond=0)
    day_ago = dt.datetime.fromtimestamp(now / 1000, tz=dt.UTC) - dt.timedelta(hours=24)
    jobs = Job.objects.filter(Q(status__in=[Job.Status.QUEUED, Job.Status.RUNNING]) | Q(
        status=Job.Status.FAILED, finished_at__gte=day_ago)).values_list("status", flat=True)
    return {
        "learnt_today": Fact.objects.filter(created_at__gte=int(midnight.timestamp() * 1000)).count(),
        "conflicts": len(selectors.conflict_group_keys()),
        "jobs_running": sum(1 for s in jobs if s != Job.Status.FAILED),
        "jobs_failed": sum(1 for s in jobs if s == Job.Status.FAILED),
        "pending": sum(selectors.pending_counts().values()),
    }


def attach_senders(messages: Iterable[Message]) -> list[Message]:
    """Set ``message.sender_name`` on a list of messages (one query for all senders)."""
    messages = list(messages)
    persons = Person.objects.in_bulk({m.sender_person_id for m in messages if m.sender_person_id})
    for m in messages:
        person = persons.get(m.sender_person_id)
        m.sender_name = str(person) if person else ""
    return messages


def attach_cues(episodes: Iterable[Episode]) -> None:
    """Set ``episode.cue_list`` for a page of episodes (one query)."""
    episodes = list(episodes)
    by_id: dict[int, list[str]] = defaultdict(list)
    for episode_id, cue in EpisodeCue.objects.filter(episode__in=episodes).values_list("episode_id", "cue"):
        by_id[episode_id].append(cue)
    for ep in episodes:
        ep.cue_list = by_id.get(ep.pk, [])


def placeholder_reasons(episodes: Iterable[Episode]) -> None:
    """Set ``episode.reason`` on unsummarised placeholders from their skip event (one query)."""
    placeholders = [ep for ep in episodes if ep.is_placeholder]
    if not placeholders:
        return
    stream_ids = {ep.stream_id for ep in placeholders}
    events = PipelineEvent.objects.filter(kind="summary_batch_skipped", stream_id__in=stream_ids).order_by("seq")
    reasons: dict[int, str] = {}
    for event in events:
        payload = event.payload or {}
        episode_id = payload.get("episodeId") or payload.get("episode_id")
        if episode_id:
            reasons[int(episode_id)] = str(payload.get("error") or payload.get("reason") or "")
    for ep in placeholders:
        ep.reason = reasons.get(ep.pk) or ep.summary


# --- facts -----------------------------------------------------------------------

STATE_FILTERS: dict[str, Q] = {
    "active": Q(superseded_by__isnull=True, active=True),
    "frozen": Q(superseded_by__isnull=True, active=False),
    "invalid": Q(superseded_by=F("id")),
    "superseded": Q(superseded_by__isnull=False) & ~Q(superseded_by=F("id")),
    "pinned": Q(half_life_hours__gte=decay.PIN_HALF_LIFE_HOURS),
}


def filter_facts(qs: QuerySet[Fact], data: dict[str, Any]) -> QuerySet[Fact]:
    """Apply the fact-table filters (person, kind, slot, state, origin)."""
    if data.get("person"):
        qs = qs.filter(person=data["person"])
    if data.get("kind"):
        qs = qs.filter(kind=data["kind"])
    if data.get("slot"):
        qs = qs.filter(slot=data["slot"])
    if data.get("state") in STATE_FILTERS:
        qs = qs.filter(STATE_FILTERS[data["state"]])
    if data.get("origin"):
        qs = qs.filter(origin_kind=data["origin"])
    return qs.defer("embedding", "embedding_q8", "tokens_v2")


def match_facts(qs: QuerySet[Fact], query: str, *, ranked: Sequence[int] = (), limit: int = 200) -> list[Fact]:
    """The rows of a fact search: the ``ranked`` hits of :func:`search_facts` (in their order)
    that pass ``qs``, then the other facts of ``qs`` whose text contains query terms (most
    terms first, newest on ties) — one query.

    Recall ranks only valid facts; this text match makes the frozen, invalidated and
    superseded ones findable too, so the search honours the state filter.
    """
    from memory.engine import tokenize

    terms = [t for t in tokenize.query_terms(query) if t][:16]
    wanted = Q(pk__in=list(ranked))
    for term in terms:
        wanted |= Q(content__icontains=term)
    rows = list(
        qs.filter(wanted)
        .annotate(_ranked=Case(When(pk__in=list(ranked), then=Value(0)), default=Value(1)))
        .order_by("_ranked", "-updated_at", "-id")[: len(ranked) + limit * 5]
    )
    order = {fact_id: i for i, fact_id in enumerate(ranked)}
    hits = sorted((f for f in rows if f.pk in order), key=lambda f: order[f.pk])

    def matched(fact: Fact) -> int:
        text = fact.content.lower()
        return sum(len(t) for t in terms if t in text)

    others = sorted((f for f in rows if f.pk not in order), key=matched, reverse=True)  # stable: newest first
    return hits + others[:limit]


def fact_state(fact: Fact) -> str:
    """``invalid`` (manually), ``superseded``, ``frozen`` or ``active`` — frozen is never "deleted"."""
    if fact.superseded_by_id is not None:
        return "invalid" if fact.superseded_by_id == fact.pk else "superseded"
    return "active" if fact.active else "frozen"


def conflicted_slots(person_ids: Iterable[int]) -> set[tuple[int, str]]:
    """``(person, slot)`` pairs with ≥ 2 valid members among the given persons (one query)."""
    person_ids = set(person_ids)
    if not person_ids:
        return set()
    rows = (
        Fact.objects.filter(person_id__in=person_ids, superseded_by__isnull=True, active=True)
        .exclude(slot="")
        .values_list("person_id", "slot")
        .annotate(n=Count("id"))
        .filter(n__gte=2)
        .order_by()
    )
    return {(p, s) for p, s, _ in rows}


@dataclass
class ScoreBreakdown:
    """Every term of a search hit's score, for display."""

    bm25: float
    relevance: float
    retention: float
    retention_weight: float
    score: float
    cosine: float | None = None
    fused: float | None = None


def decorate_facts(facts: Iterable[Fact], *, now: int, breakdown: dict[int, Any] | None = None) -> None:
    """Set ``retention``, ``state``, ``conflicted`` and (for search hits) ``breakdown`` on facts."""
    facts = list(facts)
    conflicted = conflicted_slots(f.person_id for f in facts if f.slot)
    for f in facts:
        f.retention = decay.retention(f.strength, f.updated_at, f.half_life_hours, now)
        f.state = fact_state(f)
        f.conflicted = f.state == "active" and (f.person_id, f.slot) in conflicted
        hit = (breakdown or {}).get(f.pk)
        f.breakdown = hit


def supersede_chain(fact: Fact, max_steps: int = 20) -> dict[str, list[Fact]]:
    """Older facts this one replaced (``before``) and the newer ones that replaced it (``after``).

    One query per step in each direction; chains are short (a slot changes a few times).
    """
    before: list[Fact] = []
    ids = [fact.pk]
    for _ in range(max_steps):
        older = list(Fact.objects.filter(superseded_by_id__in=ids).exclude(pk__in=ids).order_by("-id"))
        older = [f for f in older if f.pk != f.superseded_by_id and f not in before]
        if not older:
            break
        before.extend(older)
        ids = [f.pk for f in older]
    after: list[Fact] = []
    current = fact
    for _ in range(max_steps):
        if current.superseded_by_id in (None, current.pk):
            break
        nxt = Fact.objects.filter(pk=current.superseded_by_id).first()
        if nxt is None or nxt in after:
            break
        after.append(nxt)
        current = nxt
    return {"before": before, "after": after}


def fact_operations(fact_id: int) -> list[Any]:
    from curation.models import FactOperation

    return list(
        FactOperation.objects.filter(Q(fact_id=fact_id) | Q(related_fact_id=fact_id)).order_by("-at", "-id")[:50]
    )


# --- decay curve as SVG ----------------------------------------------------------


@dataclass
class CurveSVG:
    width: int
    height: int
    past: str  # polyline points
    projected: str
    freeze_y: float
    revive_y: float
    now_x: float
    due_x: float | None
    x_ticks: list[tuple[float, str, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    left: int = 44
    right: int = 0
    top: int = 12
    bottom: int = 0


def decay_curve_svg(fact: Fact, *, now: int, width: int = 680, height: int = 240) -> CurveSVG:
    """The retention curve from the last strength change to past ``due_at``, as SVG coordinates.

    Past (``updated_at`` → now) is solid, the projection (now → end) dashed; the
    end is ``due_at`` plus a quarter of the span (a pinned fact: one year ahead).
    """
    from memory.templatetags.console import format_ms

    start = min(fact.updated_at, now)
    if fact.pinned:
        end = now + 365 * 24 * decay.MS_PER_HOUR
    else:
        end = max(now, fact.due_at)
        end = end + max((end - start) // 4, 24 * decay.MS_PER_HOUR)
    left, right, top, bottom = 44, width - 12, 12, height - 28
    span = max(1, end - start)

    def x(t: int) -> float:
        return round(left + (right - left) * (t - start) / span, 1)

    def y(r: float) -> float:
        return round(bottom - (bottom - top) * r, 1)

    def points(samples: Sequence[tuple[int, float]]) -> str:
        return " ".join(f"{x(t)},{y(r)}" for t, r in samples)

    past = decay.decay_curve(fact.strength, fact.updated_at, fact.half_life_hours, start, now, 40)
    projected = decay.decay_curve(fact.strength, fact.updated_at, fact.half_life_hours, now, end, 60)
    ticks = []
    for i in range(5):
        t = start + span * i // 4
        label = format_ms(t, "%Y-%m-%d", local=False)
        ticks.append((x(t), label, "start" if i == 0 else "end" if i == 4 else "middle"))
    return CurveSVG(
        width=width,
        height=height,
        past=points(past),
        projected=points(projected),
        freeze_y=y(decay.FREEZE),
        revive_y=y(decay.REVIVE),
        now_x=x(now),
        due_x=x(fact.due_at) if not fact.pinned and start <= fact.due_at <= end else None,
        x_ticks=ticks,
        y_ticks=[(y(v), f"{v:g}") for v in (0.0, 0.25, 0.5, 0.75, 1.0)],
        left=left,
        right=right,
        top=top,
        bottom=bottom,
    )


# --- association graph -----------------------------------------------------------

LAYER_COLOURS = {"fact": "#e0735a", "episode": "#e0a43a", "knowledge": "#8a9a3b"}


@dataclass
class NodeInfo:
    """What the console shows of a memory node (the row it points at, resolved)."""

    node_id: int
    kind: str
    ref_id: int
    text: str = ""
    label: str = ""
    retention: float = 1.0
    updated_at: int | None = None
    hits: int | None = None
    person: str = ""
    state: str = "active"  # active | frozen | invalid | superseded | missing
    degree: int = 0
    x: float = 0.0
    y: float = 0.0
    r: float = 7.0
    opacity: float = 1.0
    role: str = ""  # seed | hit (spreading preview rings)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.ref_id}"

    @property
    def colour(self) -> str:
        return LAYER_COLOURS.get(self.kind, "#888")

    @property
    def short(self) -> str:
        text = self.text or self.label
        return text if len(text) <= 12 else text[:12] + "…"

    @property
    def exists(self) -> bool:
        return self.state != "missing"


def resolve_nodes(refs: Iterable[tuple[int, str, int]], *, now: int) -> dict[int, NodeInfo]:
    """``{node_id: NodeInfo}`` for ``(node_id, kind, ref_id)`` triples: one query per layer."""
    refs = list(refs)
    by_kind: dict[str, list[int]] = defaultdict(list)
    for _, kind, ref_id in refs:
        by_kind[kind].append(ref_id)
    facts = (
        Fact.objects.select_related("person").defer("embedding", "embedding_q8", "tokens_v2").in_bulk(by_kind["fact"])
        if by_kind["fact"] else {}
    )
    episodes = Episode.objects.in_bulk(by_kind["episode"]) if by_kind["episode"] else {}
    knowledge = (
        Knowledge.objects.defer("embedding", "embedding_q8", "tokens_v2").in_bulk(by_kind["knowledge"])
        if by_kind["knowledge"] else {}
    )
    out: dict[int, NodeInfo] = {}
    for node_id, kind, ref_id in refs:
        info = NodeInfo(node_id=node_id, kind=kind, ref_id=ref_id)
        if kind == "fact" and ref_id in facts:
            f = facts[ref_id]
            info.text, info.label = f.content, f.kind
            info.retention = decay.retention(f.strength, f.updated_at, f.half_life_hours, now)
            info.updated_at, info.hits, info.person = f.updated_at, f.hit_count, str(f.person)
            info.state = fact_state(f)
        elif kind == "episode" and ref_id in episodes:
            e = episodes[ref_id]
            info.text, info.label, info.updated_at = e.summary, e.kind, e.ended_at
        elif kind == "knowledge" and ref_id in knowledge:
            k = knowledge[ref_id]
            info.text, info.label, info.updated_at, info.hits = k.content, k.source, k.created_at, k.hit_count
        else:
            info.text, info.state, info.retention = f"（{kind} #{ref_id} 已不存在）", "missing", 0.0
        out[node_id] = info
    return out


@dataclass
class EdgeInfo:
    source: int
    target: int
    strength: float
    retention: float
    active: bool
    x1: float = 0.0
    y1: float = 0.0
    x2: float = 0.0
    y2: float = 0.0

    @property
    def width(self) -> float:
        return round(1 + 3.4 * self.strength, 2)

    @property
    def opacity(self) -> float:
        return round(0.28 + 0.5 * self.retention, 3)


@dataclass
class GraphView:
    nodes: list[NodeInfo]
    edges: list[EdgeInfo]
    stats: dict[str, Any]
    width: int = 900
    height: int = 640

    def mark(self, preview: SpreadPreview) -> None:
        """Ring the seeds and hits of a spreading preview on the drawing."""
        roles = {(s.kind, s.ref_id): "seed" for s in preview.seeds}
        roles.update({(h.kind, h.ref_id): "hit" for h in preview.hits})
        for node in self.nodes:
            node.role = roles.get((node.kind, node.ref_id), "")


def layout(n: int, edges: Sequence[tuple[int, int, float]], *, size: tuple[int, int], iterations: int = 50) -> np.ndarray:
    """Deterministic Fruchterman–Reingold layout of ``n`` nodes (numpy, O(iterations · n²)).

    Starts from a circle (node order = degree order) so the same graph always draws
    the same way; springs are weighted by edge retention. 200 nodes take ~30 ms.
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


def cached_layout(
    n: int, edges: Sequence[tuple[int, int, float]], *, key: Sequence[int], size: tuple[int, int]
) -> np.ndarray:
    """:func:`layout`, cached for five minutes per drawn graph (node ids, edges, strengths to 0.1)."""
    import hashlib

    from django.core.cache import cache

    signature = repr((list(key), sorted((s, t, round(w, 1)) for s, t, w in edges), size))
    cache_key = "console:layout:" + hashlib.sha1(signature.encode()).hexdigest()
    pos = cache.get(cache_key)
    if pos is None:
        pos = layout(n, edges, size=size)
        cache.set(cache_key, pos, 300)
    return pos


def memory_graph(*, now: int, include_frozen: bool = False, limit: int = 200) -> GraphView:
    """The densest ``limit`` nodes of the memory graph with their kept edges, laid out.

    Queries: all edges (one), node rows of the kept nodes (one), one per layer to
    resolve the rows, plus the node total and the spread-run count.
    """
    from django.db import connection

    active_only = "" if include_frozen else " WHERE active"
    with connection.cursor() as cur:
        cur.execute("SELECT COUNT(*), COALESCE(SUM(CASE WHEN active THEN 0 ELSE 1 END), 0) FROM memory_edges")
        edge_total, frozen = cur.fetchone()
        # Degrees are counted and ranked in SQL: the graph can hold far more edges than a page shows.
        cur.execute(
            f"WITH deg AS (SELECT node, COUNT(*) AS d FROM (SELECT source_id AS node FROM memory_edges{active_only}"
            f" UNION ALL SELECT target_id FROM memory_edges{active_only}) GROUP BY node)"
            " SELECT node, d, (SELECT COUNT(*) FROM deg) FROM deg ORDER BY d DESC, node LIMIT %s",
            [limit + 1],
        )
        ranked = cur.fetchall()
        connected = ranked[0][2] if ranked else 0
        degree: dict[int, int] = {node: d for node, d, _n in ranked}
        truncated = connected > limit
        chosen = [node for node, _d, _n in ranked[:limit]]
        index = {nid: i for i, nid in enumerate(chosen)}
        kept: list[tuple] = []
        if chosen:
            marks = ",".join(["%s"] * len(chosen))
            cur.execute(
                "SELECT source_id, target_id, strength, updated_at, active FROM memory_edges"
                f" WHERE source_id IN ({marks}) AND target_id IN ({marks})"
                + ("" if include_frozen else " AND active"),
                chosen + chosen,
            )
            kept = cur.fetchall()
    rows_total = edge_total
    node_total = MemoryNode.objects.count()
    refs = MemoryNode.objects.filter(pk__in=chosen).values_list("id", "ref_kind", "ref_id")
    infos = resolve_nodes(refs, now=now)
    edges = [
        EdgeInfo(s, t, strength, decay.retention(strength, updated_at, decay.EDGE_HALF_LIFE_HOURS, now), bool(active))
        for s, t, strength, updated_at, active in kept
    ]
    view_w, view_h = 900, 640
    pos = cached_layout(len(chosen), [(index[e.source], index[e.target], e.retention) for e in edges],
                        key=chosen, size=(view_w, view_h))
    nodes = []
    for nid in chosen:
        info = infos.get(nid) or NodeInfo(node_id=nid, kind="fact", ref_id=0, state="missing")
        info.degree = degree[nid]
        info.x, info.y = (round(float(v), 1) for v in pos[index[nid]])
        info.r = round(7 + 3.2 * math.sqrt(info.degree), 1)
        info.opacity = 0.12 if info.state == "missing" else round(max(0.32, info.retention), 2)
        nodes.append(info)
    for e in edges:
        e.x1, e.y1 = nodes[index[e.source]].x, nodes[index[e.source]].y
        e.x2, e.y2 = nodes[index[e.target]].x, nodes[index[e.target]].y
    stats = {
        "node_total": node_total,
        "edge_total": rows_total,
        "active_edges": rows_total - frozen,
        "frozen_edges": frozen,
        "isolated": node_total - connected,
        "spread_runs": PipelineEvent.objects.filter(kind="memory_spread").count(),
        "truncated": truncated,
        "shown_nodes": len(nodes),
        "shown_edges": len(edges),
        "limit": limit,
    }
    return GraphView(nodes=nodes, edges=edges, stats=stats, width=view_w, height=view_h)


def neighbours(kind: str, ref_id: int, *, now: int) -> list[dict[str, Any]]:
    """Direct neighbours of a memory item, sorted by edge retention (frozen edges last)."""
    node = MemoryNode.objects.filter(ref_kind=kind, ref_id=ref_id).first()
    if node is None:
        return []
    edges = list(
        MemoryEdge.objects.filter(Q(source=node) | Q(target=node)).values_list(
            "source_id", "target_id", "strength", "updated_at", "active"
        )
    )
    other = {(t if s == node.pk else s): (strength, updated_at, active) for s, t, strength, updated_at, active in edges}
    refs = MemoryNode.objects.filter(pk__in=other).values_list("id", "ref_kind", "ref_id")
    infos = resolve_nodes(refs, now=now)
    out = []
    for nid, (strength, updated_at, active) in other.items():
        ret = decay.retention(strength, updated_at, decay.EDGE_HALF_LIFE_HOURS, now)
        out.append({"node": infos.get(nid), "strength": strength, "retention": ret, "active": active})
    out.sort(key=lambda row: (not row["active"], -row["retention"]))
    return out


def node_panel(kind: str, ref_id: int, *, now: int) -> dict[str, Any]:
    """The selected node's row (resolved even when it has no graph node yet) and its neighbours."""
    node = MemoryNode.objects.filter(ref_kind=kind, ref_id=ref_id).values_list("id", "ref_kind", "ref_id").first()
    node = node or (0, kind, ref_id)
    return {"node": resolve_nodes([node], now=now)[node[0]], "neighbours": neighbours(kind, ref_id, now=now)}


# --- searches --------------------------------------------------------------------

#: The console searches facts of every person with ``stream_kind='desktop'``: the
#: desktop is the owner's private surface where every origin is visible, so the
#: search shows everything a bot could recall without using the ``'all'`` bypass
#: (reserved for the extraction de-duplication list). ``events=False``: a console
#: search is not a turn and writes no scope-block events.
CONSOLE_STREAM_KIND = "desktop"
SEARCH_LIMIT = 100


def _overrides() -> dict[str, Any]:
    from tuning.services import active_overrides

    return dict(active_overrides())


def _query_vector(text: str) -> Any:
    """The query's embedding, or None when no embedder is configured or it fails (logged)."""
    from memory.providers.config import get_embedder

    try:
        embedder = get_embedder()
        return embedder.embed([text])[0] if embedder is not None else None
    except Exception:  # the dense side channel is optional: failure only logs
        import logging

        logging.getLogger(__name__).warning("console_query_embedding_failed", exc_info=True)
        return None


def search_facts(*, query: str, now: int) -> list[ScoreBreakdown | Any]:
    """FTS search over every person's valid facts, each hit with its full score breakdown.

    The hits are ranked by the engine's ``rank`` (``selectors.rank_facts``) like a turn:
    when some hit has a vector the query is embedded and each hit's cosine
    (``selectors.fact_cosines``) and fused relevance join its terms. Hits under both
    relevance floors stay listed (last, marked) — a search shows what matched.
    """
    overrides = _overrides()
    hits = selectors.recall_facts_across_persons(
        query=query, limit=SEARCH_LIMIT, now=now, stream_kind=CONSOLE_STREAM_KIND, overrides=overrides, events=False,
        return_candidates=True,
    )[:SEARCH_LIMIT]
    if hits and Fact.objects.filter(pk__in=[h.id for h in hits], embedding_q8__isnull=False).exists():
        vector = _query_vector(query)
        if vector is not None:
            hits = selectors.rank_facts(hits, overrides, cosines=selectors.fact_cosines([h.id for h in hits], vector))
    return [
        _Hit(
            id=h.id,
            bm25=h.bm25,
            relevance=h.lexical_relevance,
            retention=h.retention,
            retention_weight=h.prior if h.prior is not None else 0.0,
            score=h.score,
            cosine=h.cosine,
            fused=h.relevance if h.cosine is not None else None,
            coverage=h.coverage,
            calibrated=h.calibrated,
            eligible=h.eligible,
        )
        for h in hits
    ]


@dataclass(frozen=True)
class _Hit:
    id: int
    bm25: float | None
    relevance: float
    retention: float
    retention_weight: float  # the retention term of the score (``prior``)
    score: float
    cosine: float | None = None
    fused: float | None = None
    coverage: float | None = None
    calibrated: float | None = None
    eligible: bool = True


def search_episodes(*, query: str, stream_id: int | None) -> list[Episode]:
    """Cue search over one stream (``selectors.recall_episodes``) or all of them (stream None)."""
    hits = selectors.recall_episodes(stream_id=stream_id, query=query, limit=50)
    rows = Episode.objects.select_related("stream").annotate(n_messages=Count("messages")).in_bulk([h.id for h in hits])
    out = []
    for h in hits:
        if h.id in rows:
            ep = rows[h.id]
            ep.score = h.score
            out.append(ep)
    attach_cues(out)
    placeholder_reasons(out)
    return out


def inspect_messages(*, stream_id: int, query: str) -> list[Any]:
    """The bot's ``inspect`` action (message search) exactly as a turn would run it."""
    from memory import recall

    return recall.inspect_messages(stream_id=stream_id, query=query, limit=20)


def search_knowledge(*, query: str) -> list[Any]:
    """The bot's ``consult`` path over knowledge (lexical + resident int8 vectors).

    ``touch=False``: a console search is not a consultation, so hit counts stay as they are.
    """
    from memory import recall

    return recall.consult_knowledge(query=query, limit=20, touch=False)


# --- spreading preview -----------------------------------------------------------


@dataclass(frozen=True)
class SpreadRow:
    kind: str
    ref_id: int
    content: str
    score: float
    hops: int

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.ref_id}"


def _spread_row(item: Any) -> SpreadRow:
    return SpreadRow(kind=item.kind, ref_id=item.ref_id, content=item.content, score=item.score, hops=item.hops)


@dataclass
class SpreadPreview:
    seeds: list[Any]
    hits: list[Any]
    fell_back: bool
    timed_out_graph: str | None
    elapsed_ms: float
    hops: int
    alpha: float
    query: str = ""


def spread_preview(data: dict[str, Any], *, now: int) -> SpreadPreview:
    """Spread from one node, or from the lexical hits of a free query (facts, cues, knowledge).

    Read-only: no short-term activation, no events (a preview is not a recall).
    """
    query = data.get("q") or ""
    if data.get("kind") and data.get("ref"):
        seeds = [(data["kind"], int(data["ref"]), 1.0)]
    else:
        seeds = [("fact", h.id, h.score) for h in selectors.recall_facts_across_persons(
            query=query, limit=4, now=now, stream_kind=CONSOLE_STREAM_KIND, events=False)]
        seeds += [("episode", e.id, e.score) for e in selectors.recall_episodes(stream_id=None, query=query, limit=2)]
        seeds += [("knowledge", k.id, k.score) for k in selectors.search_knowledge(query=query, limit=2)]
    result = selectors.spread(
        seeds=seeds, now=now, hops=data.get("hops") or 2, limit=data.get("limit") or 8,
        alpha=data.get("alpha"), activation=None, events=False,
    )
    return SpreadPreview(
        seeds=[_spread_row(s) for s in result.seeds], hits=[_spread_row(h) for h in result.hits], fell_back=result.fell_back, timed_out_graph=result.timed_out_graph,
        elapsed_ms=result.elapsed_ms, hops=result.hops, alpha=result.alpha, query=query,
    )


# --- recall playground -----------------------------------------------------------


def preview_turn(data: dict[str, Any]) -> dict[str, Any]:
    """The confirmed ranking a turn would get for this text, read-only: nothing is written.

    ``prepare_turn(record=False)`` builds the lexical pool, then the confirm step's own
    ranking (``recall.rank_pool``: dense channel, cosines, the engine's ``rank``) runs on
    it with the query vector of the configured embedder — the numbers the bot would get.
    ``held_back`` lists the facts relevance alone would have put in the prompt but
    retention ranked out.
    """
    from memory import recall

    ctx = recall.prepare_turn(
        stream_id=data["stream"].pk, speaker_id=data["speaker"].pk, text=data["text"],
        impression=data.get("impression") or "", record=False,
    )
    limit = int(ctx.overrides.get("fact_recall_limit", settings.FACT_RECALL_LIMIT))
    vector = recall.embed_query(data["text"])
    ranking = recall.rank_pool(
        pool=ctx.pool, query_vector=recall.conversation_query(vector, ctx.context, ctx.overrides), person_ids=ctx.present_person_ids, text=data["text"],
        stream_kind=ctx.stream.kind, now=ctx.now, limit=limit, overrides=ctx.overrides,
    )
    prompt = recall.complete_conflicts(ranking.prompt, now=ctx.now)
    in_prompt = {f.id for f in ranking.prompt}
    held = {f.id for f in ranking.held_back}
    persons = Person.objects.in_bulk({f.person_id for f in ranking.ranked} | set(ctx.present_person_ids))
    pool = [
        {"fact": f, "person": persons.get(f.person_id), "in_prompt": f.id in in_prompt, "held_back": f.id in held}
        for f in ranking.ranked
    ]
    return {
        "ctx": ctx,
        "pool": pool,
        "prompt": prompt,
        "completed": [f for f in prompt if f.completed],
        "held_back": [{"fact": f, "person": persons.get(f.person_id)} for f in ranking.held_back],
        "used_vector": vector is not None,
        "seed": is_seed_profile(ctx.overrides),
        "present": [persons.get(pid) or pid for pid in ctx.present_person_ids],
        "persons": persons,
    }


# --- imports ---------------------------------------------------------------------


class ImportRefused(Exception):
    """The import could not start (limits, or another import is running)."""


def start_import(data: dict[str, Any], *, user: str) -> Any:
    from memory import broker, pipeline

    try:
        return pipeline.start_import(
            text=data["text"], origin_name=data.get("origin_name") or "", kind=data["kind"], user=user
        )
    except (pipeline.ImportLimitError, pipeline.ImportBusyError) as exc:
        raise ImportRefused(str(exc)) from exc
    except broker.BrokerUnavailable as exc:  # the job and batch are already marked failed
        raise ImportRefused(pipeline.IMPORT_NOT_SENT.format(reason=exc)) from exc


def delete_batch_preview(batch_id: int) -> dict[str, Any]:
    from memory import pipeline

    return pipeline.delete_batch_preview(batch_id)


def delete_batch(batch_id: int) -> int:
    from memory import pipeline

    return pipeline.delete_batch(batch_id)
