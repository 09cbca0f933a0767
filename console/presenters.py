"""Presenters of the console pages: page-shaped objects built from reads.

Views stay short by delegating here. Presenters read through :mod:`memory.selectors`
(and the turn's read path, :mod:`memory.recall`) and shape the results into what a
template shows — decorated rows, score breakdowns, the graph drawing, the playground's
turn — in a fixed number of queries whatever the number of rows (the console tests pin
the counts). Nothing here writes.

SVG drawings (decay curve, association graph) get their coordinates from
:mod:`memory.engine.geometry`; templates emit the elements, so every label is
escaped by the template engine.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
from celery import current_app as app  # the project's Celery app (config/celery.py), without importing config
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from django.utils.translation import gettext as _

from console.templatetags.console import format_ms
from memory import broker, recall, selectors
from memory import overrides as live_overrides
from memory.engine import decay, geometry
from memory.engine.geometry import CurveGeometry
from memory.engine.scoring import Verdict as ScoringVerdict
from memory.engine.scoring import is_reference_profile
from memory.models import (
    PINNED,
    Episode,
    Fact,
    FactQuerySet,
    FactState,
    Message,
)
from tuning.inspection import VERDICT_LABELS, verdict_of

# --- dashboard -------------------------------------------------------------------


def ping_workers(timeout: float = 0.5) -> dict[str, Any]:
    """Ping the Celery workers; ``status`` is ``ok``, ``down`` or ``unknown`` (broker error).

    Redis is asked first with the short timeouts of :mod:`memory.broker`; the
    ping then runs in a thread joined with a hard deadline: a broker that does
    not answer must not hold a web request for its whole connection-retry loop.
    """
    outcome: dict[str, Any] = {"status": "unknown", "workers": [], "error": ""}
    try:
        broker.check()  # ≤ ~0.1 s, and nothing at all while the breaker is open
    except broker.BrokerUnavailable as exc:
        return {**outcome, "error": str(exc)[:200]}

    def run() -> None:
        try:
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


def broker_queue_length() -> int | None:
    """Tasks waiting in the broker's default queue for a worker (None when Redis does not answer)."""
    try:
        return int(broker.check().llen(app.conf.task_default_queue or "celery"))
    except (broker.BrokerUnavailable, redis.RedisError):
        return None


@dataclass(frozen=True)
class Backlog:
    """Why messages wait: each stream is summarised (facts extracted) once it holds this many new ones."""

    summarize_trigger: int
    summarize_batch: int
    extract_trigger: int
    due: int  # streams at or above the summary trigger (a worker takes them)
    largest: int  # the most messages one stream has waiting


def backlog(queues: Sequence[dict[str, Any]]) -> Backlog:
    trigger = int(settings.SUMMARIZE_TRIGGER_MESSAGES)
    return Backlog(
        summarize_trigger=trigger, summarize_batch=int(settings.SUMMARIZE_BATCH_MESSAGES),
        extract_trigger=int(settings.FACT_EXTRACT_TRIGGER_MESSAGES),
        due=sum(1 for q in queues if q["pending"] >= trigger), largest=max((q["pending"] for q in queues), default=0),
    )


# --- streams and episodes --------------------------------------------------------


def attach_senders(messages: Iterable[Any]) -> list[Any]:
    """Set ``sender_name`` on a list of messages or working-memory rows (one query for all senders)."""
    messages = list(messages)
    persons = selectors.persons_by_id({m.sender_person_id for m in messages if m.sender_person_id})
    for m in messages:
        person = persons.get(m.sender_person_id)
        m.sender_name = str(person) if person else ""
    return messages


def attach_cues(episodes: Iterable[Episode]) -> None:
    """Set ``episode.cue_list`` for a page of episodes (one query)."""
    episodes = list(episodes)
    by_id = selectors.episode_cues([ep.pk for ep in episodes])
    for ep in episodes:
        ep.cue_list = by_id.get(ep.pk, [])


def placeholder_reasons(episodes: Iterable[Episode]) -> None:
    """Set ``episode.reason`` on unsummarised placeholders from their skip event (one query)."""
    placeholders = [ep for ep in episodes if ep.is_placeholder]
    if not placeholders:
        return
    reasons = selectors.summary_skip_reasons({ep.stream_id for ep in placeholders})
    for ep in placeholders:
        ep.reason = reasons.get(ep.pk) or ep.summary


# --- facts -----------------------------------------------------------------------

def filter_facts(qs: FactQuerySet, data: dict[str, Any]) -> FactQuerySet:
    """Apply the fact-table filters (person, kind, slot, state, origin; learnt since / until a local date,
    extracted from a stream's messages)."""
    if data.get("person"):
        qs = qs.filter(person=data["person"])
    if data.get("kind"):
        qs = qs.filter(kind=data["kind"])
    if data.get("slot"):
        qs = qs.filter(slot=data["slot"])
    if data.get("state") in (*FactState.values, PINNED):
        qs = qs.in_state(data["state"])
    if data.get("origin"):
        qs = qs.filter(origin_kind=data["origin"])
    if data.get("since"):
        qs = qs.filter(created_at__gte=_local_midnight_ms(data["since"]))
    if data.get("until"):
        qs = qs.filter(created_at__lt=_local_midnight_ms(data["until"] + dt.timedelta(days=1)))
    if data.get("stream"):
        qs = qs.filter(source=f"extract:stream{data['stream'].pk}")
    return qs.defer("embedding", "embedding_q8", "tokens")


def _local_midnight_ms(day: dt.date) -> int:
    """Epoch milliseconds of a date's start in the console's time zone."""
    return int(timezone.make_aware(dt.datetime.combine(day, dt.time.min)).timestamp() * 1000)


def heard_in(fact: Fact) -> Any | None:
    """The message the fact was heard in, as recorded (``Fact.source_message``: the extractor's, or the bot's
    ``source_message_id``), with its sender's name; ``None`` when none is recorded or it is gone."""
    if not fact.source_message_id:
        return None
    message = Message.objects.filter(pk=fact.source_message_id).defer("embedding", "embedding_q8").first()
    return attach_senders([message])[0] if message is not None else None


def likely_sources(fact: Fact, *, limit: int = 2) -> list[Any]:
    """The messages a fact was most likely extracted from: its source stream's messages up to the moment it was
    learnt, searched with the fact's text as the bot's ``inspect`` searches (the speaker's own lines first).

    Shown for a fact that did not record its message (:func:`heard_in`; those extracted before facts recorded
    it): a best match by text and meaning, and the page says so. Empty for facts that were not extracted.
    """
    match = re.fullmatch(r"extract:stream(\d+)", fact.source or "")
    if match is None:
        return []
    stream_id = int(match.group(1))
    last = selectors.last_message_id_before(stream_id=stream_id, at=fact.created_at)
    if last is None:
        return []
    hits = recall.inspect_messages(stream_id=stream_id, query=fact.content, before_message_id=last + 1, limit=limit * 3)
    hits.sort(key=lambda m: (m.sender_person_id != fact.person_id, -getattr(m, "score", 0.0)))
    return attach_senders(hits[:limit])


# --- decay curve as SVG ----------------------------------------------------------


def decay_curve_svg(fact: Fact, *, now: int, width: int = 680, height: int = 240) -> CurveGeometry:
    """The fact's retention curve as SVG coordinates (:func:`memory.engine.geometry.decay_curve_geometry`),
    the x ticks labelled with their dates."""
    curve = geometry.decay_curve_geometry(
        fact.strength, fact.updated_at, fact.half_life_hours, due_at=fact.due_at, now=now, width=width, height=height
    )
    curve.x_ticks = [(x, format_ms(t, "%Y-%m-%d", local=False), anchor) for x, t, anchor in curve.x_ticks]
    return curve


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
    labelled: bool = False  # its label is drawn (GraphView.place_labels: no two labels overlap)

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
    for _node, kind, ref_id in refs:
        by_kind[kind].append(ref_id)
    facts, episodes, knowledge = selectors.node_rows(
        facts=by_kind["fact"], episodes=by_kind["episode"], knowledge=by_kind["knowledge"]
    )
    out: dict[int, NodeInfo] = {}
    for node_id, kind, ref_id in refs:
        info = NodeInfo(node_id=node_id, kind=kind, ref_id=ref_id)
        if kind == "fact" and ref_id in facts:
            f = facts[ref_id]
            info.text, info.label = f.content, f.kind
            info.retention = f.retention_at(now)
            info.updated_at, info.hits, info.person = f.updated_at, f.hit_count, str(f.person)
            info.state = f.state
        elif kind == "episode" and ref_id in episodes:
            e = episodes[ref_id]
            info.text, info.label, info.updated_at = e.summary, e.kind, e.ended_at
        elif kind == "knowledge" and ref_id in knowledge:
            k = knowledge[ref_id]
            info.text, info.label, info.updated_at, info.hits = k.content, k.source, k.created_at, k.hit_count
        else:
            info.text, info.state, info.retention = _("（这条记忆已不存在）"), "missing", 0.0
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

    def place_labels(self, *, selected: str = "", font: float = 11.0) -> None:
        """Label what matters first and never two labels on top of each other.

        Order: the selected node, the spreading preview's seeds and hits, then by degree. A label
        is the box under its circle (its width estimated from the text: a CJK character is about
        one font size wide, others about half); one that would overlap a placed label, or leave
        the drawing, is left out (the node's tooltip still names it).
        """
        placed: list[tuple[float, float, float, float]] = []

        def width(text: str) -> float:
            return sum(font if ord(ch) > 0x2E7F else font * 0.6 for ch in text)

        order = sorted(self.nodes, key=lambda n: (n.key != selected, not n.role, -n.degree, n.node_id))
        for node in order:
            w, top = width(node.short), node.y + node.r + 2
            box = (node.x - w / 2, top, node.x + w / 2, top + font + 2)
            inside = box[0] >= 0 and box[2] <= self.width and box[3] <= self.height
            clear = all(box[2] < b[0] or box[0] > b[2] or box[3] < b[1] or box[1] > b[3] for b in placed)
            node.labelled = inside and clear
            if node.labelled:
                placed.append(box)


def cached_layout(
    n: int, edges: Sequence[tuple[int, int, float]], *, key: Sequence[int], size: tuple[int, int]
) -> np.ndarray:
    """:func:`memory.engine.geometry.force_layout`, cached for five minutes per drawn graph (node ids, edges, strengths to 0.1)."""
    signature = repr((list(key), sorted((s, t, round(w, 1)) for s, t, w in edges), size))
    cache_key = "console:layout:" + hashlib.sha1(signature.encode()).hexdigest()
    pos = cache.get(cache_key)
    if pos is None:
        pos = geometry.force_layout(n, edges, size=size)
        cache.set(cache_key, pos, 300)
    return pos


def memory_graph(*, now: int, include_frozen: bool = False, limit: int = 200) -> GraphView:
    """The densest ``limit`` nodes of the memory graph with their kept edges, laid out.

    Queries: :func:`memory.selectors.densest_subgraph`, the node rows of the kept nodes
    (one), one per layer to resolve the rows.
    """
    sub = selectors.densest_subgraph(limit=limit, include_frozen=include_frozen)
    degree = dict(sub.degrees)
    chosen = [node for node, _d in sub.degrees]
    index = {nid: i for i, nid in enumerate(chosen)}
    infos = resolve_nodes(selectors.node_refs(chosen), now=now)
    edges = [
        EdgeInfo(s, t, strength, decay.retention(strength, updated_at, decay.EDGE_HALF_LIFE_HOURS, now), active)
        for s, t, strength, updated_at, active in sub.edges
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
        "node_total": sub.node_total,
        "edge_total": sub.edge_total,
        "active_edges": sub.edge_total - sub.frozen_edges,
        "frozen_edges": sub.frozen_edges,
        "isolated": sub.node_total - sub.connected,
        "spread_runs": sub.spread_runs,
        "truncated": sub.truncated,
        "shown_nodes": len(nodes),
        "shown_edges": len(edges),
        "limit": limit,
    }
    return GraphView(nodes=nodes, edges=edges, stats=stats, width=view_w, height=view_h)


def neighbours(kind: str, ref_id: int, *, now: int) -> list[dict[str, Any]]:
    """Direct neighbours of a memory item, sorted by edge retention (frozen edges last)."""
    node = selectors.node_of(kind, ref_id)
    if node is None:
        return []
    other = selectors.node_edges(node)
    infos = resolve_nodes(selectors.node_refs(other), now=now)
    out = []
    for nid, (strength, updated_at, active) in other.items():
        ret = decay.retention(strength, updated_at, decay.EDGE_HALF_LIFE_HOURS, now)
        out.append({"node": infos.get(nid), "strength": strength, "retention": ret, "active": active})
    out.sort(key=lambda row: (not row["active"], -row["retention"]))
    return out


def node_panel(kind: str, ref_id: int, *, now: int) -> dict[str, Any]:
    """The selected node's row (resolved even when it has no graph node yet) and its neighbours."""
    node = selectors.node_of(kind, ref_id) or 0
    return {"node": resolve_nodes([(node, kind, ref_id)], now=now)[node], "neighbours": neighbours(kind, ref_id, now=now)}


# --- searches --------------------------------------------------------------------

#: The console searches facts of every person with ``stream_kind='desktop'``: the
#: desktop is the owner's private surface where every origin is visible, so the
#: search shows everything a bot could recall without using the ``'all'`` bypass
#: (reserved for the extraction de-duplication list). ``events=False``: a console
#: search is not a turn and writes no scope-block events.
CONSOLE_STREAM_KIND = "desktop"
SEARCH_LIMIT = 100


@dataclass(frozen=True)
class ScoreBreakdown:
    """Every term of a fact search hit's score, for display."""

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


def search_facts(*, query: str, now: int) -> list[ScoreBreakdown]:
    """FTS search over every person's valid facts, each hit with its full score breakdown.

    The hits are ranked by the engine's ``rank`` (``selectors.rank_facts``) like a turn:
    when some hit has a vector the query is embedded and each hit's cosine
    (``selectors.fact_cosines``) and fused relevance join its terms. Hits under both
    relevance floors stay listed (last, marked) — a search shows what matched.
    """
    overrides = dict(live_overrides.active_overrides())
    hits = selectors.recall_facts_across_persons(
        query=query, limit=SEARCH_LIMIT, now=now, stream_kind=CONSOLE_STREAM_KIND, overrides=overrides, events=False,
        return_candidates=True,
    )[:SEARCH_LIMIT]
    if hits and selectors.any_fact_vector([h.id for h in hits]):
        vector = recall.embed_query(query)
        if vector is not None:
            hits = selectors.rank_facts(hits, overrides, cosines=selectors.fact_cosines([h.id for h in hits], vector))
    return [
        ScoreBreakdown(
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


def search_episodes(*, query: str, stream_id: int | None) -> list[Episode]:
    """Cue search over one stream (``selectors.recall_episodes``) or all of them (stream None)."""
    hits = selectors.recall_episodes(stream_id=stream_id, query=query, limit=50)
    rows = selectors.episodes_with_counts().in_bulk([h.id for h in hits])
    out = []
    for h in hits:
        if h.id in rows:
            ep = rows[h.id]
            ep.score = h.score
            out.append(ep)
    attach_cues(out)
    placeholder_reasons(out)
    return out


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


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{round(float(value) * 100)}%"


def preview_turn(data: dict[str, Any]) -> dict[str, Any]:
    """The confirmed ranking a turn would get for this text, read-only: nothing is written.

    ``prepare_turn(record=False)`` builds the lexical pool, then the confirm step's own
    ranking (``recall.rank_pool``: dense channel, cosines, the engine's ``rank``) runs on
    it with the query vector of the configured embedder — the numbers the bot would get.
    Every ranked candidate gets the ranking's verdict (in the prompt, held back by forgetting, out
    of places, held back by the relevance gate) with its reason in words (:class:`Verdict`);
    visibility's count comes from the pool; ``shown`` lists the facts left out because the
    conversation holds their words already (``recall.shown_in_conversation``).
    """
    ctx = recall.prepare_turn(
        stream_id=data["stream"].pk, speaker_id=data["speaker"].pk, text=data["text"],
        impression=data.get("impression") or "", record=False,
    )
    limit = recall.fact_recall_limit(ctx.overrides)
    vector = recall.embed_query(ctx.line)  # the turn's line: its text, or a multi-line text's last line
    ranking = recall.rank_pool(
        pool=ctx.pool, query_vector=recall.conversation_query(
            vector, ctx.context, ctx.overrides, whole=recall.read_whole(data["text"], ctx.line, ctx.context, ctx.overrides)),
        person_ids=ctx.present_person_ids, text=ctx.line,
        stream_kind=ctx.stream.kind, now=ctx.now, limit=limit, overrides=ctx.overrides, shown=ctx.shown,
    )
    prompt = recall.complete_conflicts(ranking.prompt, now=ctx.now)
    in_prompt = {f.id for f in ranking.prompt}
    held = {f.id for f in ranking.held_back}
    persons = selectors.persons_by_id({f.person_id for f in ranking.ranked} | set(ctx.present_person_ids))
    pool = []
    for rank, f in enumerate(ranking.ranked, start=1):
        verdict = verdict_of(f, code=ranking.verdicts.get(f.id, ScoringVerdict.GATE), rank=rank, limit=limit)
        pool.append({"fact": f, "person": persons.get(f.person_id), "verdict": verdict, "rank": rank,
                     "in_prompt": f.id in in_prompt, "held_back": f.id in held})
    counts: dict[str, int] = defaultdict(int)
    for row in pool:
        counts[row["verdict"].code] += 1
    shown = Fact.objects.in_bulk(list(dict.fromkeys([*ctx.shown_out, *ranking.shown_out])))
    return {
        "ctx": ctx,
        "pool": pool,
        "shown": sorted(shown.values(), key=lambda f: f.pk),  # left out: the conversation shows their words
        "summary": [(code, label, counts[code]) for code, label in VERDICT_LABELS.items() if counts.get(code)],
        "limit": limit,
        "prompt": prompt,
        "completed": [f for f in prompt if f.completed],
        "held_back": [{"fact": f, "person": persons.get(f.person_id)} for f in ranking.held_back],
        "used_vector": vector is not None,
        "reference": is_reference_profile(ctx.overrides),
        "present": [persons.get(pid) or pid for pid in ctx.present_person_ids],
        "persons": persons,
    }
