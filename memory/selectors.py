"""Reads of the memory layers: recall, search, conflicts and spreading.

Selectors never change memory. The one exception the seed asks for is the
``memory_fact_scope_blocked`` observation event, written only when
``events=True`` (the console's playground passes ``False``); and
:func:`message_vectors` stores the vectors it had to compute (a cache of the
message text, so each message is embedded at most once).
"""
from __future__ import annotations

import logging
import threading
from array import array
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count

from memory import lexical
from memory.engine import decay
from memory.engine.context import ConversationQuery, weighted_max
from memory.engine.quantize import HEADER_SIZE, MAGIC, Int8Matrix, cosine_q8_many, quantize_vector
from memory.engine.scope import SCOPE_ALL, fact_visible_in_stream
from memory.engine.scoring import (
    RankCandidate,
    fused_relevance,
    holds_rarest,
    idf_coverage,
    is_seed_profile,
    rank,
)
from memory.engine.spreading import ConceptGraph, SpreadResult
from memory.engine.spreading import spread as engine_spread
from memory.engine.tokenize import bigrams, words
from memory.models import Episode, Fact, Identity, Knowledge, MemoryNode, Message

logger = logging.getLogger(__name__)

MESSAGE_POOL = 30           # inspect's fused ranking: candidates per channel (at least limit × 3)
MESSAGE_DENSE_SCAN = 5_000  # inspect's dense channel reads the SQ8 vectors of the stream's newest N messages


def _overrides(overrides: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if overrides is not None:
        return overrides
    from tuning.services import active_overrides

    return active_overrides()


def _private_in_group(value: bool | None) -> bool:
    return settings.PRIVATE_FACTS_IN_GROUP if value is None else value


# --- L1 ----------------------------------------------------------------------------


def working_memory(*, stream_id: int, limit: int = 40, watermark: int | None = None) -> list[Message]:
    """Unarchived messages of a stream, newest ``limit`` by id, oldest first.

    With a user-message ``watermark`` the user messages stored after it are left
    out (assistant rows after it stay), fixing the turn's snapshot.
    """
    rows = Message.objects.filter(stream_id=stream_id, episode__isnull=True)
    if watermark is not None:
        rows = rows.exclude(role="user", id__gt=watermark)
    return list(reversed(rows.order_by("-id")[:limit]))


def pending_count(*, stream_id: int) -> int:
    return Message.objects.filter(stream_id=stream_id, episode__isnull=True).count()


def pending_counts() -> dict[int, int]:
    rows = Message.objects.filter(episode__isnull=True).values("stream_id").annotate(n=Count("id"))
    return {row["stream_id"]: row["n"] for row in rows}


def oldest_pending(*, stream_id: int, n: int) -> list[Message]:
    return list(Message.objects.filter(stream_id=stream_id, episode__isnull=True).order_by("id")[:n])


def messages_after(*, stream_id: int, since_id: int, limit: int) -> list[Message]:
    """Messages after a cursor regardless of ``episode_id`` (extraction has its own cursor)."""
    return list(Message.objects.filter(stream_id=stream_id, id__gt=since_id).order_by("id")[:limit])


def message_count_after(*, stream_id: int, since_id: int) -> int:
    return Message.objects.filter(stream_id=stream_id, id__gt=since_id).count()


def latest_message_id(*, stream_id: int) -> int:
    return Message.objects.filter(stream_id=stream_id).order_by("-id").values_list("id", flat=True).first() or 0


def recent_speakers(*, stream_id: int, before_id: int, scan_limit: int = 200) -> list[int]:
    """Distinct senders among the newest ``scan_limit`` messages up to ``before_id``, most recent first."""
    senders = (
        Message.objects.filter(stream_id=stream_id, id__lte=before_id, sender_person__isnull=False)
        .order_by("-id")
        .values_list("sender_person_id", flat=True)[:scan_limit]
    )
    return list(dict.fromkeys(senders))


def search_messages(
    *, stream_id: int, query: str, before_id: int | None = None, limit: int = 6, query_vector: Any = None
) -> list[Message]:
    """One stream's messages most relevant to ``query``, returned in chronological order.

    Lexical: bm25 over ``messages_fts`` (every query term, jieba words + CJK bigrams,
    quoted), scoped to the stream; ``before_id`` keeps only messages before the turn's
    watermark; archived messages are included; ties go to the newer message. Each
    message carries ``score`` (its relevance, 0..1). With a ``query_vector`` the
    dense channel joins in (:func:`_fuse_messages`). A query without a searchable
    term returns nothing.
    """
    match = lexical.match_for("messages_fts", query)
    if limit < 1 or not match:  # no searchable term: nothing, not the dense neighbours of punctuation
        return []
    if query_vector is not None and _query_q8(query_vector) is not None:
        scored = _fuse_messages(stream_id, match, query_vector, before_id, limit)
    else:
        scored = [
            (mid, decay.relevance_from_bm25(b))
            for mid, b in lexical.message_candidates(match, stream_id=stream_id, before_id=before_id, limit=limit)
        ]
    score = dict(scored[:limit])
    by_id = Message.objects.select_related("sender_person").in_bulk(list(score))
    out = []
    for mid in sorted(score):
        message = by_id[mid]
        message.score = score[mid]
        out.append(message)
    return out


def _fuse_messages(
    stream_id: int, match: str, query_vector: Any, before_id: int | None, limit: int
) -> list[tuple[int, float]]:
    """Lexical ∪ dense candidates ranked by fused relevance ``0.4·lexical + 0.6·(cos+1)/2``.

    The dense channel reads the SQ8 vectors of the stream's newest ``MESSAGE_DENSE_SCAN``
    messages into one int8 matrix; lexical candidates outside it without a stored vector
    get one through :func:`message_vectors` (at most once per message). Dense-only hits
    get their real bm25 (0 when they do not match). Ties: newer first.
    """
    pool = max(limit * 3, MESSAGE_POOL)
    lexical_hits = dict(lexical.message_candidates(match, stream_id=stream_id, before_id=before_id, limit=pool))
    q8 = _query_q8(query_vector)
    sql = "SELECT id, embedding_q8 FROM messages WHERE stream_id = %s AND embedding_q8 IS NOT NULL"
    params: list[Any] = [stream_id]
    if before_id is not None:
        sql += " AND id < %s"
        params.append(before_id)
    with connection.cursor() as cur:
        cur.execute(sql + " ORDER BY id DESC LIMIT %s", [*params, MESSAGE_DENSE_SCAN])
        rows = cur.fetchall()
    cos: dict[int, float] = {}
    if rows:
        matrix = _q8_matrix(rows, np.asarray(query_vector).size)
        cos = dict(zip(matrix.ids.tolist(), matrix.cosines(q8).tolist(), strict=True))
    dense_top = sorted(cos, key=lambda mid: (-cos[mid], -mid))[:pool]
    missing = [mid for mid in lexical_hits if mid not in cos]
    if missing:
        for mid, vec in message_vectors(missing).items():
            c = cosine_q8_many(q8, [quantize_vector(vec)])[0]
            if not np.isnan(c):
                cos[mid] = float(c)
    dense_only = [mid for mid in dense_top if mid not in lexical_hits]
    bm = {**lexical_hits, **lexical.message_bm25(match, stream_id=stream_id, message_ids=dense_only)}
    fused = []
    for mid in [*lexical_hits, *dense_only]:
        lex = decay.relevance_from_bm25(bm[mid]) if mid in bm else 0.0
        fused.append((fused_relevance(lex, cos[mid]) if mid in cos else lex, mid))
    fused.sort(key=lambda x: (-x[0], -x[1]))
    return [(mid, rel) for rel, mid in fused]


def _q8_matrix(rows: Sequence[tuple[int, Any]], dim: int) -> Int8Matrix:
    """An :class:`Int8Matrix` of ``(id, SQ8 blob)`` rows decoded in one pass.

    Blobs whose length, magic or dimension is not the query's are left out (as
    ``Int8Matrix.from_blobs`` does, without its per-row Python decode).
    """
    size = HEADER_SIZE + dim
    good = [(mid, bytes(blob)) for mid, blob in rows if blob is not None and len(blob) == size]
    raw = np.frombuffer(b"".join(blob for _, blob in good), dtype=np.uint8).reshape(len(good), size)
    header = raw[:, :HEADER_SIZE]
    keep = (header[:, :4] == np.frombuffer(MAGIC, dtype=np.uint8)).all(axis=1)
    keep &= header[:, 4:8].copy().view("<u4").ravel() == dim
    payload = np.ascontiguousarray(raw[keep, HEADER_SIZE:]).view(np.int8)
    ids = np.fromiter((mid for (mid, _), k in zip(good, keep, strict=True) if k), dtype=np.int64)
    norms = np.sqrt((payload.astype(np.float32) ** 2).sum(axis=1)).astype(np.float32)
    return Int8Matrix(ids=ids, matrix=payload.reshape(len(ids), dim), norms=norms)


def message_vectors(message_ids: Iterable[int], *, embedder: Any = None) -> dict[int, np.ndarray]:
    """float32 vectors of messages, each computed at most once.

    Stored vectors are read; missing ones (and ones of another dimension than the
    embedder's) are embedded through the configured embedder in batches of at most
    ``EMBEDDING_BATCH`` and stored (``services.store_message_vector``), so the next
    call reads them. Without an embedder only stored vectors come back; a failed
    embedding call leaves its messages out. Unknown ids are absent. This is the one
    selector that writes: the vector is a cache of the message text.
    """
    from memory import services
    from memory.engine.quantize import unpack_float32

    ids = list(dict.fromkeys(int(i) for i in message_ids))
    if not ids:
        return {}
    if embedder is None:
        from memory.providers.config import get_embedder

        embedder = get_embedder()
    dim = int(getattr(embedder, "dim", 0) or 0) if embedder is not None else 0
    out: dict[int, np.ndarray] = {}
    todo: list[tuple[int, str]] = []
    for mid, content, raw in Message.objects.filter(pk__in=ids).values_list("id", "content", "embedding"):
        vec = unpack_float32(bytes(raw)) if raw is not None else None
        if vec is not None and (not dim or vec.shape[0] == dim):
            out[mid] = vec
        else:
            todo.append((mid, content))
    if embedder is None or not todo:
        return out
    from memory.providers.embeddings import clamp_batch

    size = clamp_batch(getattr(settings, "EMBEDDING_BATCH", 20))
    for start in range(0, len(todo), size):
        chunk = todo[start : start + size]
        try:
            vectors = list(embedder.embed([content for _, content in chunk]))
        except Exception:  # a side channel: the caller goes on with what it has
            logger.warning("message embedding failed", exc_info=True)
            continue
        if len(vectors) != len(chunk):
            continue
        fresh = {}
        for (mid, _), vec in zip(chunk, vectors, strict=True):
            if vec is not None:
                arr = np.asarray(vec, dtype=np.float32).ravel()
                if arr.size and np.isfinite(arr).all():
                    fresh[mid] = arr
        if fresh:
            with transaction.atomic():
                for mid, arr in fresh.items():
                    services.store_message_vector(message_id=mid, vector=arr)
            out.update(fresh)
    return out


# --- L3 facts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopedFact:
    id: int
    person_id: int
    kind: str
    content: str
    slot: str
    origin_kind: str
    retention: float
    score: float
    lexical_relevance: float
    bm25: float | None
    half_life_hours: float
    active: bool
    cosine: float | None = None
    relevance: float | None = None  # fused relevance when a cosine was used
    source: str = "lexical"  # lexical | dense
    coverage: float | None = None  # share of the query's achievable IDF mass it matches
    rarest: bool = False  # holds the query's most specific word
    calibrated: float | None = None  # relevance as a share of the pool's best (seed: relevance ** w)
    prior: float | None = None  # the retention term of the score
    eligible: bool = True  # False: under both relevance floors, never enters the prompt

    def as_dict(self) -> dict[str, Any]:
        return {
            "factId": self.id,
            "personId": self.person_id,
            "score": self.score,
            "lexical": self.lexical_relevance,
            "bm25": self.bm25,
            "retention": self.retention,
            "halfLife": self.half_life_hours,
            "kind": self.kind,
            "slot": self.slot,
            "content": self.content,
            "origin": self.origin_kind,
            "active": self.active,
            "cosine": self.cosine,
            "source": self.source,
            "coverage": self.coverage,
            "rarest": self.rarest,
            "eligible": self.eligible,
        }

    def terms(self) -> dict[str, Any]:
        """Every term of the score, as the ranking computed it (console, actions, traces)."""
        return {
            "factId": self.id, "bm25": self.bm25, "lexical": self.lexical_relevance, "coverage": self.coverage,
            "rarest": self.rarest,
            "cosine": self.cosine, "relevance": self.relevance, "calibrated": self.calibrated,
            "retention": self.retention, "prior": self.prior, "score": self.score, "eligible": self.eligible,
            "active": self.active, "source": self.source,
        }


def _visible_rows(rows: Sequence[tuple], stream_kind: str, private_in_group: bool) -> tuple[list[tuple], int]:
    if stream_kind == SCOPE_ALL:
        return list(rows), 0
    kept = [r for r in rows if fact_visible_in_stream(r[6], stream_kind, private_in_group=private_in_group)]
    return kept, len(rows) - len(kept)


def _report_blocked(blocked: int, stream_kind: str, now: int, events: bool) -> None:
    if blocked and events:
        from memory.services import emit_event

        emit_event("memory_fact_scope_blocked", {"streamKind": stream_kind, "blocked": blocked}, at=now)


def fact_coverages(ids: Sequence[int], query: str) -> dict[int, tuple[float, bool]]:
    """Each fact's share of ``query``'s achievable IDF mass (:func:`scoring.idf_coverage`) and
    whether it holds the query's most specific word (:func:`scoring.holds_rarest`).

    The query's information is its words (jieba): the index's CJK bigrams would count a
    long word several times. A word is matched when the fact's FTS row holds it, or all of
    its bigrams (jieba may cut the fact differently); its document frequency is the word's,
    else the rarest-known of its bigrams when all of them occur. Frequencies come from the
    ``facts_fts`` vocabulary.
    """
    ids = list(dict.fromkeys(ids))
    qwords = list(dict.fromkeys(words(query)))
    if not ids or not qwords:
        return {i: (0.0, False) for i in ids}
    grams = {w: list(dict.fromkeys(bigrams(w))) for w in qwords}
    raw = lexical.document_frequencies("facts_fts", list({*qwords, *(g for gs in grams.values() for g in gs)}))
    dfs: dict[str, int] = {}
    for w in qwords:
        df = raw.get(w, 0)
        if df == 0 and grams[w] and all(raw.get(g, 0) > 0 for g in grams[w]):
            df = min(raw[g] for g in grams[w])
        dfs[w] = df
    n_docs = lexical.document_count("facts_fts")
    tokens = dict(Fact.objects.filter(pk__in=ids).values_list("id", "tokens_v2"))
    out = {}
    for i in ids:
        held = set((tokens.get(i) or "").split())
        matched = [w for w in qwords if w in held or (grams[w] and all(g in held for g in grams[w]))]
        out[i] = (idf_coverage(matched, dfs, n_docs), holds_rarest(matched, dfs))
    return out


def fact_cosines(ids: Sequence[int], query_vector: Any) -> dict[int, float]:
    """Cosine (on SQ8) of each fact's vector with the query — the one place it is computed.

    ``query_vector`` is one vector or a :class:`~memory.engine.context.ConversationQuery`
    (the turn's vector and the recent messages' vectors, recency-weighted): then a fact's
    cosine is the weighted maximum over them. Facts without a vector (or no query vector)
    are absent from the result.
    """
    ids = list(dict.fromkeys(ids))
    if _query_q8(query_vector) is None or not ids:
        return {}
    blobs = dict(Fact.objects.filter(id__in=ids, embedding_q8__isnull=False).values_list("id", "embedding_q8"))
    found = [i for i in ids if i in blobs]
    stored = [bytes(blobs[i]) for i in found]
    if isinstance(query_vector, ConversationQuery):
        rows = [cosine_q8_many(quantize_vector(v), stored) for v in query_vector.vectors]
        values = weighted_max(np.vstack(rows), query_vector.weights) if rows and stored else []
    else:
        values = cosine_q8_many(_query_q8(query_vector), stored)
    return {i: float(v) for i, v in zip(found, values, strict=True) if not np.isnan(v)}


def rank_facts(
    candidates: Sequence[ScopedFact],
    overrides: Mapping[str, Any] | None = None,
    *,
    cosines: Mapping[int, float] | None = None,
) -> list[ScopedFact]:
    """Re-scored copies of ``candidates`` in :func:`memory.engine.scoring.rank` order.

    ``cosines`` (from :func:`fact_cosines`) replaces each candidate's cosine when given;
    otherwise the cosine it carries (if any) is used. Every term of the score is kept on
    the copy; eligible candidates come first.
    """
    ov = _overrides(overrides)
    cos_of = (lambda c: cosines.get(c.id)) if cosines is not None else (lambda c: c.cosine)
    inputs = [
        RankCandidate(
            id=i, lexical=c.lexical_relevance, retention=c.retention, cosine=cos_of(c), coverage=c.coverage,
            active=c.active, rarest=c.rarest,
        )
        for i, c in enumerate(candidates)
    ]
    out = []
    for r in rank(inputs, ov):
        c = candidates[r.id]
        out.append(
            replace(
                c, cosine=r.cosine, relevance=r.relevance, score=r.score,
                calibrated=r.calibrated, prior=r.prior, eligible=r.eligible,
            )
        )
    return out


def _score_rows(
    rows: Iterable[tuple], now: int, overrides: Mapping[str, Any],
    coverages: Mapping[int, tuple[float, bool]] | None = None,
) -> list[ScopedFact]:
    facts = []
    for fid, b, person_id, kind, content, slot, origin, strength, half_life, updated_at, active, _v in rows:
        ret = decay.retention(strength, updated_at, half_life, now)
        lex = decay.relevance_from_bm25(b)
        facts.append(
            ScopedFact(
                id=fid, person_id=person_id, kind=kind, content=content, slot=slot, origin_kind=origin,
                retention=ret, score=0.0, lexical_relevance=lex, bm25=b, half_life_hours=half_life,
                active=bool(active), coverage=None if coverages is None else coverages.get(fid, (0.0, False))[0],
                rarest=False if coverages is None else coverages.get(fid, (0.0, False))[1],
            )
        )
    return rank_facts(facts, overrides)  # stable: bm25 order breaks ties


def _recall(
    *, person_ids: Sequence[int] | None, query: str, limit: int, now: int, stream_kind: str,
    private_in_group: bool | None, return_candidates: bool, overrides: Mapping[str, Any] | None, events: bool,
    stats: dict[str, int] | None = None,
) -> list[ScopedFact]:
    if limit < 1:
        return []
    # Person-scoped queries rank only those persons' facts (the ``person`` column); a query
    # over every person is ranked by the resident index (memory/lexical_index.py).
    match = lexical.match_for("facts_fts", query)
    if not match:
        return []
    rows = lexical.fact_candidates(match, person_ids=person_ids, limit=limit * 3)
    rows, blocked = _visible_rows(rows, stream_kind, _private_in_group(private_in_group))
    _report_blocked(blocked, stream_kind, now, events)
    if stats is not None:
        stats["blocked"] = stats.get("blocked", 0) + blocked
    ov = _overrides(overrides)
    coverages = None if is_seed_profile(ov) else fact_coverages([r[0] for r in rows], query)
    pool = _score_rows(rows, now, ov, coverages)
    return pool if return_candidates else [f for f in pool if f.eligible][:limit]


def recall_facts_in_scope(
    *,
    person_ids: Sequence[int],
    query: str,
    limit: int = 6,
    now: int,
    stream_kind: str,
    private_in_group: bool | None = None,
    return_candidates: bool = False,
    overrides: Mapping[str, Any] | None = None,
    events: bool = True,
    stats: dict[str, int] | None = None,
) -> list[ScopedFact]:
    """Lexical fact recall over the present persons; read-only.

    One FTS query over ``person_id IN (...)`` (valid facts, frozen included),
    ``LIMIT limit*3``; visibility filtered before scoring; each candidate's
    relevance (``relevance_from_bm25``) and IDF coverage of the query go through
    :func:`rank_facts` (the engine's ``rank``); without ``return_candidates`` only
    eligible facts are returned.
    """
    persons = list(dict.fromkeys(person_ids))
    if not persons:
        return []
    return _recall(
        person_ids=persons, query=query, limit=limit, now=now, stream_kind=stream_kind,
        private_in_group=private_in_group, return_candidates=return_candidates, overrides=overrides, events=events,
        stats=stats,
    )


def recall_facts_across_persons(
    *,
    query: str,
    limit: int = 6,
    now: int,
    stream_kind: str,
    private_in_group: bool | None = None,
    return_candidates: bool = False,
    overrides: Mapping[str, Any] | None = None,
    events: bool = True,
) -> list[ScopedFact]:
    """Like :func:`recall_facts_in_scope` without the person filter."""
    return _recall(
        person_ids=None, query=query, limit=limit, now=now, stream_kind=stream_kind,
        private_in_group=private_in_group, return_candidates=return_candidates, overrides=overrides, events=events,
    )


def top_facts(
    *, person_id: int, limit: int = 8, now: int, stream_kind: str, private_in_group: bool | None = None
) -> list[ScopedFact]:
    """Strongest active valid facts of a person by current retention.

    ``stream_kind='all'`` bypasses visibility; only the extraction de-dup list may use it.
    """
    rows = list(
        Fact.objects.filter(person_id=person_id, active=True, superseded_by__isnull=True).values_list(
            "id", "person_id", "kind", "content", "slot", "origin_kind", "strength", "half_life_hours", "updated_at"
        )
    )
    if stream_kind != SCOPE_ALL:
        pig = _private_in_group(private_in_group)
        visible = [r for r in rows if fact_visible_in_stream(r[5], stream_kind, private_in_group=pig)]
        _report_blocked(len(rows) - len(visible), stream_kind, now, True)
        rows = visible
    facts = []
    for fid, pid, kind, content, slot, origin, strength, half_life, updated_at in rows:
        ret = decay.retention(strength, updated_at, half_life, now)
        facts.append(
            ScopedFact(
                id=fid, person_id=pid, kind=kind, content=content, slot=slot, origin_kind=origin, retention=ret,
                score=ret, lexical_relevance=0.0, bm25=None, half_life_hours=half_life, active=True,
            )
        )
    facts.sort(key=lambda f: f.score, reverse=True)
    return facts[:limit]


def _query_q8(query_vector: Any) -> bytes | None:
    """SQ8 of a query vector (of the turn's own vector for a conversation query); None without one."""
    if isinstance(query_vector, ConversationQuery):
        query_vector = query_vector.primary
    if query_vector is None:
        return None
    vec = np.asarray(query_vector, dtype=np.float32).ravel()
    if vec.size == 0:
        return None
    return quantize_vector(vec)


def dense_fact_candidates(
    *,
    person_ids: Sequence[int],
    query_vector: Any,
    limit: int,
    now: int,
    stream_kind: str,
    private_in_group: bool | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[ScopedFact]:
    """Dense channel: valid facts of the present persons ranked by SQ8 cosine (top ``limit*3``).

    Facts are few per person, so their vectors are read per call (:func:`fact_cosines`,
    no resident index). ``lexical_relevance`` is 0 here; :func:`merge_dense_candidates`
    back-computes the real bm25 and coverage. Scores are the engine's for this channel alone.
    """
    persons = list(dict.fromkeys(person_ids))
    if _query_q8(query_vector) is None or not persons or limit < 1:
        return []
    rows = list(
        Fact.objects.filter(person_id__in=persons, superseded_by__isnull=True, embedding_q8__isnull=False).values_list(
            "id", "person_id", "kind", "content", "slot", "origin_kind", "strength", "half_life_hours",
            "updated_at", "active",
        )
    )
    pig = _private_in_group(private_in_group)
    rows = [r for r in rows if stream_kind == SCOPE_ALL or fact_visible_in_stream(r[5], stream_kind, private_in_group=pig)]
    if not rows:
        return []
    cosines = fact_cosines([r[0] for r in rows], query_vector)
    ranked = sorted(((cosines[r[0]], r) for r in rows if r[0] in cosines), key=lambda x: -x[0])[: limit * 3]
    out = []
    for cos, (fid, pid, kind, content, slot, origin, strength, half_life, updated_at, active) in ranked:
        ret = decay.retention(strength, updated_at, half_life, now)
        out.append(
            ScopedFact(
                id=fid, person_id=pid, kind=kind, content=content, slot=slot, origin_kind=origin, retention=ret,
                score=0.0, lexical_relevance=0.0, bm25=None, half_life_hours=half_life,
                active=bool(active), cosine=float(cos), source="dense",
            )
        )
    scored = {f.id: f for f in rank_facts(out, overrides)}
    return [scored[f.id] for f in out]  # cosine order: the merge appends them in this order


def merge_dense_candidates(
    pool: Sequence[ScopedFact], dense: Sequence[ScopedFact], *, query: str
) -> list[ScopedFact]:
    """Union by id (lexical pool first); dense-only hits get their real bm25 and coverage for ``query``.

    Facts that do not match lexically keep relevance 0 on the lexical side.
    """
    seen = {f.id for f in pool}
    extra = [f for f in dense if f.id not in seen]
    if not extra:
        return list(pool)
    bm = lexical.fact_bm25(lexical.match_for("facts_fts", query), [f.id for f in extra])
    cov = fact_coverages([f.id for f in extra], query)
    merged = list(pool)
    for f in extra:
        b = bm.get(f.id)
        merged.append(
            replace(
                f, bm25=b, lexical_relevance=decay.relevance_from_bm25(b) if b is not None else 0.0,
                coverage=cov.get(f.id, (0.0, False))[0], rarest=cov.get(f.id, (0.0, False))[1],
            )
        )
    return merged


def rank_recalled_facts(
    candidates: Sequence[ScopedFact],
    query_vector: Any,
    limit: int,
    overrides: Mapping[str, Any] | None = None,
) -> list[ScopedFact]:
    """Fused re-rank of a merged pool; returns re-scored copies, the eligible top ``limit``.

    Each candidate's cosine comes from :func:`fact_cosines` (when the query vector and
    the fact's SQ8 vector both exist), the score from the engine's ``rank``
    (:func:`rank_facts`): relevance ``0.4·lexical + 0.6·(cos+1)/2`` with a cosine, else
    the lexical one; the retention term is applied after fusion so the dense channel
    cannot bypass the forgetting curve. Without a query vector the lexical order stands.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    cosines = fact_cosines([c.id for c in candidates], query_vector) if query_vector is not None else {}
    ranked = rank_facts(candidates, overrides, cosines=cosines)
    return [f for f in ranked if f.eligible][:limit]


# --- conflicts -----------------------------------------------------------------------------


def slot_conflicts(*, person_id: int, fact_ids: Iterable[int]) -> dict[int, tuple[str, list[tuple[int, str]]]]:
    """For each requested fact in a slot-conflict group: ``(slot, [(member id, content), ...])``.

    Groups are active valid facts of the person sharing a non-empty slot, with
    ≥ 2 members; the whole group is returned (members not requested included).
    """
    wanted = set(fact_ids)
    rows = Fact.objects.filter(person_id=person_id, active=True, superseded_by__isnull=True).exclude(slot="")
    groups: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for fid, slot, content in rows.order_by("id").values_list("id", "slot", "content"):
        groups[slot].append((fid, content))
    out = {}
    for slot, members in groups.items():
        if len(members) < 2:
            continue
        for fid, _ in members:
            if fid in wanted:
                out[fid] = (slot, members)
    return out


def conflict_members(pairs: Iterable[tuple[int, str]]) -> dict[tuple[int, str], list[tuple[int, str]]]:
    """Members (id, content) of the slot-conflict groups of the given (person, slot) pairs.

    One query; only groups with two or more active valid members are returned.
    """
    wanted = {(p, slot) for p, slot in pairs if slot}
    if not wanted:
        return {}
    clause = " OR ".join(["(person_id = %s AND slot = %s)"] * len(wanted))
    params = [v for pair in sorted(wanted) for v in pair]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT id, person_id, slot, content FROM facts WHERE active AND superseded_by IS NULL"
            f" AND ({clause}) ORDER BY id",
            params,
        )
        rows = cur.fetchall()
    groups: dict[tuple[int, str], list[tuple[int, str]]] = defaultdict(list)
    for fid, pid, slot, content in rows:
        groups[(pid, slot)].append((fid, content))
    return {key: members for key, members in groups.items() if len(members) >= 2}


@dataclass(frozen=True)
class ConflictGroup:
    person_id: int
    person_name: str
    slot: str
    members: list[dict[str, Any]]


def conflict_group_keys(*, person_id: int | None = None) -> list[tuple[int, str]]:
    """(person, slot) of every group with two or more active valid members, in order."""
    rows = Fact.objects.filter(active=True, superseded_by__isnull=True).exclude(slot="")
    if person_id is not None:
        rows = rows.filter(person_id=person_id)
    pairs = rows.values("person_id", "slot").annotate(n=Count("id")).filter(n__gte=2).order_by("person_id", "slot")
    return [(p["person_id"], p["slot"]) for p in pairs]


def conflict_groups(
    *, person_id: int | None = None, now: int, keys: Sequence[tuple[int, str]] | None = None
) -> list[ConflictGroup]:
    """Every (person, slot) with two or more active valid members, members by id.

    ``keys`` restricts the result to those groups (a console page loads only its own).
    """
    keys = set(conflict_group_keys(person_id=person_id) if keys is None else keys)
    if not keys:
        return []
    rows = Fact.objects.filter(active=True, superseded_by__isnull=True).exclude(slot="")
    members: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    persons = {pid for pid, _ in keys}
    slots = {slot for _, slot in keys}
    for f in rows.filter(person_id__in=persons, slot__in=slots).order_by("id").defer("embedding", "embedding_q8"):
        if (f.person_id, f.slot) in keys:
            members[(f.person_id, f.slot)].append(
                {
                    "id": f.id, "kind": f.kind, "content": f.content, "origin_kind": f.origin_kind,
                    "retention": decay.retention(f.strength, f.updated_at, f.half_life_hours, now),
                    "strength": f.strength, "half_life_hours": f.half_life_hours, "updated_at": f.updated_at,
                    "created_at": f.created_at, "source": f.source, "hit_count": f.hit_count,
                }
            )
    keys = {k for k in keys if len(members[k]) >= 2}
    names = dict(
        Identity.objects.filter(person_id__in=persons).order_by("display_name").values_list("person_id", "display_name")
    )
    from memory.models import Person

    for pid, name in Person.objects.filter(pk__in=persons).values_list("id", "display_name"):
        names.setdefault(pid, name)
        if name:
            names[pid] = name
    return [
        ConflictGroup(person_id=pid, person_name=names.get(pid) or f"#{pid}", slot=slot, members=members[(pid, slot)])
        for pid, slot in sorted(keys)
    ]


# --- L2 episodes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecalledEpisode:
    id: int
    summary: str
    kind: str
    started_at: int
    ended_at: int
    score: float
    stream_id: int = 0


def recall_episodes(*, stream_id: int | None, query: str, limit: int = 3) -> list[RecalledEpisode]:
    """Episodes of a stream whose cues match ``query`` (best cue per episode; summaries are not indexed)."""
    if limit < 1:
        return []
    # One stream: the stream column bounds the work; every stream: the resident index.
    match = lexical.match_for("cues_fts", query)
    hits = lexical.cue_candidates(match, stream_id=stream_id, limit=limit * 4)
    best: dict[int, float] = {}
    for episode_id, _cue, b in hits:
        best.setdefault(episode_id, b)
    chosen = list(best)[:limit]
    episodes = Episode.objects.in_bulk(chosen)
    return [
        RecalledEpisode(
            id=e.id, summary=e.summary, kind=e.kind, started_at=e.started_at, ended_at=e.ended_at,
            score=decay.score(best[e.id], 1.0), stream_id=e.stream_id,
        )
        for e in (episodes[i] for i in chosen)
    ]


def recent_episodes(*, stream_id: int, limit: int = 4) -> list[RecalledEpisode]:
    """Newest episodes of a stream by end time; placeholders excluded; score 1.0."""
    if limit < 1:
        return []
    rows = Episode.objects.filter(stream_id=stream_id).exclude(kind=Episode.UNSUMMARIZED).order_by("-ended_at", "-id")
    return [
        RecalledEpisode(
            id=e.id, summary=e.summary, kind=e.kind, started_at=e.started_at, ended_at=e.ended_at, score=1.0,
            stream_id=e.stream_id,
        )
        for e in rows[:limit]
    ]


# --- knowledge -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnowledgeHit:
    id: int
    content: str
    score: float
    lexical: float
    cosine: float | None = None
    source: str = ""


def search_knowledge(*, query: str, limit: int = 5, query_embedding: Any = None) -> list[KnowledgeHit]:
    """Knowledge search: FTS candidates ∪ nearest vectors of the resident int8 index.

    Lexical relevance (``score(bm25, 1.0)``) is fused with the cosine when both
    vectors exist; knowledge never decays, so retention is fixed at 1.
    Read-only (hit counting is the caller's choice, see ``touch_knowledge``).
    """
    if limit < 1:
        return []
    match = lexical.match_for("knowledge_fts", query)
    if not match:  # no searchable term (empty, punctuation): nothing to look for, not even densely
        return []
    lex = {int(i): float(b) for i, b in lexical.knowledge_candidates(match, limit=limit * 3)}
    q8 = _query_q8(query_embedding)
    cos: dict[int, float] = {}
    if q8 is not None:
        from memory.vector_index import knowledge_index

        try:
            for kid, c in knowledge_index().top_k(q8, limit * 3):
                cos[int(kid)] = float(c)
            missing = [i for i in lex if i not in cos]
            if missing:
                cos.update(knowledge_index().cosines_for(q8, missing))
        except ValueError:  # query of another dimension than the stored vectors: lexical stands
            logger.warning("knowledge vector search failed; lexical ranking kept", exc_info=True)
            cos = {}
        dense_only = [i for i in cos if i not in lex]
        if dense_only:  # their lexical score too (the resident index scores any row)
            lex.update(lexical.knowledge_bm25(match, dense_only))
    if not lex and not cos:
        return []
    ids = list(dict.fromkeys([*lex, *cos]))
    scored = []
    for kid in ids:
        b = lex.get(kid)
        rel_lex = decay.score(b, 1.0) if b is not None else 0.0
        c = cos.get(kid)
        rel = fused_relevance(rel_lex, c) if c is not None else rel_lex
        scored.append((rel, rel_lex, c, kid))
    scored.sort(key=lambda x: -x[0])
    top = scored[:limit]
    rows = Knowledge.objects.only("id", "content", "source").in_bulk([kid for *_, kid in top])
    return [
        KnowledgeHit(id=kid, content=rows[kid].content, score=rel, lexical=rl, cosine=c, source=rows[kid].source)
        for rel, rl, c, kid in top
        if kid in rows
    ]


# --- association ------------------------------------------------------------------------------------

def short_term_activation():
    """The short-term activation (10 min time constant): shared in Redis by every process (memory/activation.py)."""
    from memory.activation import activation

    return activation()


class _FactorsAt:
    """``node → factor`` at ``now`` for the engine, with the batched ``many`` it prefers."""

    def __init__(self, activation: Any, now: int) -> None:
        self.activation, self.now = activation, now

    def __call__(self, node: int) -> float:
        return self.activation.factor(node, self.now)

    def many(self, nodes: Iterable[int]) -> dict[int, float]:
        return self.activation.factors(nodes, self.now)


def _expand(frontier: set[int]) -> list[tuple[int, int, float]]:
    if not frontier:
        return []
    ids = list(frontier)
    marks = ",".join(["%s"] * len(ids))
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT source_id, target_id, strength FROM memory_edges WHERE active AND source_id IN ({marks})"
            f" UNION ALL SELECT source_id, target_id, strength FROM memory_edges WHERE active AND target_id IN ({marks})",
            ids + ids,
        )
        return cur.fetchall()


def _node_rows(nodes: Iterable[int], columns: str) -> list[tuple]:
    """One query joining memory nodes to the rows they point at (missing rows give NULLs)."""
    ids = list(nodes)
    if not ids:
        return []
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT n.id, n.ref_kind, n.ref_id, {columns} FROM memory_nodes n"
            " LEFT JOIN facts f ON n.ref_kind = 'fact' AND f.id = n.ref_id"
            " LEFT JOIN episodes e ON n.ref_kind = 'episode' AND e.id = n.ref_id"
            " LEFT JOIN knowledge k ON n.ref_kind = 'knowledge' AND k.id = n.ref_id"
            f" WHERE n.id IN ({','.join(['%s'] * len(ids))})",
            ids,
        )
        return cur.fetchall()


def node_retentions(nodes: set[int], now: int) -> dict[int, float | None]:
    """Fact: decayed retention if it exists and is active; episode/knowledge: 1.0 if it exists."""
    out: dict[int, float | None] = {n: None for n in nodes}
    rows = _node_rows(nodes, "f.strength, f.updated_at, f.half_life_hours, f.active, e.id, k.id")
    for node, kind, _ref, strength, updated_at, half_life, active, episode, knowledge in rows:
        if kind == "fact" and strength is not None and active:
            out[node] = decay.retention(strength, updated_at, half_life, now)
        elif (kind == "episode" and episode is not None) or (kind == "knowledge" and knowledge is not None):
            out[node] = 1.0
    return out


def node_texts(nodes: Iterable[int]) -> dict[int, tuple[str, int, str]]:
    """Memory node → ``(kind, ref id, text)``; a missing row has empty text."""
    rows = _node_rows(nodes, "f.content, e.summary, k.content")
    return {node: (kind, ref, fc or es or kc or "") for node, kind, ref, fc, es, kc in rows}


# Only the best-ranked max(CONCEPT_MAP_MIN, limit) reached concepts are mapped back to memory
# nodes (the reference maps every reached concept). Measured on a 9,750-node store (bench
# build_db --scale 0.15, 300 random two-seed spreads, hops 2, limit 4): 11 of 300 top-4
# lists differ from mapping every concept (6 as sets), at half the CPU (median 8.6 vs 17.7 ms).
CONCEPT_MAP_MIN = 4
CONCEPT_HOLDERS_CACHED = 4096  # concept names whose holder lists the resident node texts remember


def _fold_for_scan(text: str | None) -> str:
    # NUL separates the texts in the resident blob; a concept name never holds one
    return (text or "").casefold().replace("\x00", " ")


def _all_node_texts(after: int = 0) -> list[tuple[int, str]]:
    """``(memory node id, casefolded text)`` of every registered node above ``after``, by id.

    The text is the one the reference maps concepts with: fact content, episode
    summary, knowledge content; a node whose row is gone has no text and holds nothing.
    """
    with connection.cursor() as cur:
        cur.execute(
            "SELECT n.id, coalesce(f.content, e.summary, k.content) FROM memory_nodes n"
            " LEFT JOIN facts f ON n.ref_kind = 'fact' AND f.id = n.ref_id"
            " LEFT JOIN episodes e ON n.ref_kind = 'episode' AND e.id = n.ref_id"
            " LEFT JOIN knowledge k ON n.ref_kind = 'knowledge' AND k.id = n.ref_id"
            " WHERE n.id > %s ORDER BY n.id",
            [after],
        )
        return [(node, _fold_for_scan(text)) for node, text in cur.fetchall() if text]


class _NodeTexts:
    """The casefolded texts of every registered memory node, resident per process.

    Concept spreading maps a concept back to *every* registered node whose text
    contains the concept's name (casefold substring, reference-spec §3.8). The
    texts live in one NUL-separated string, so finding a name's holders is one
    C-speed ``str.find`` pass over the whole corpus (no FTS tokenisation can miss a
    substring, and episodes are searched by their summaries); holder lists are
    remembered per name until the corpus changes.

    Freshness, as the resident lexical index does it: nodes above the last id
    loaded are appended (remembered holder lists are extended by scanning only
    the appended texts); a deleted or re-tokenised fact or knowledge row
    (``lexical_revision:*``), fewer nodes than loaded, or a lower max id rebuild it.
    Summaries and contents are never edited in place. Used only outside a
    transaction (a rolled-back node id could be reused); inside one,
    :func:`_nodes_containing` scans the rows directly.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rebuilds = 0
        self._clear()

    def _clear(self) -> None:
        self._state: tuple | None = None
        self._max_id = 0
        self._count = 0
        self._blob = ""
        self._starts = array("q")  # offset of each text in the blob (ascending)
        self._nodes = array("q")  # its memory node id
        self._holders: dict[str, list[int]] = {}

    @staticmethod
    def _read_state() -> tuple:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT (SELECT max(id) FROM memory_nodes), (SELECT count(*) FROM memory_nodes),"
                " (SELECT value FROM meta WHERE key = 'lexical_revision:facts'),"
                " (SELECT value FROM meta WHERE key = 'lexical_revision:knowledge')"
            )
            max_id, count, facts_rev, knowledge_rev = cur.fetchone()
        return int(max_id or 0), int(count or 0), facts_rev, knowledge_rev

    def _add(self, rows: list[tuple[int, str]]) -> int:
        """Append ``rows`` to the blob; return the index of the first appended text."""
        first = len(self._starts)
        parts = []
        offset = len(self._blob)
        for node, text in rows:
            self._starts.append(offset + 1)
            self._nodes.append(node)
            parts.append("\x00" + text)
            offset += len(text) + 1
        self._blob += "".join(parts)
        return first

    def _scan(self, needle: str, first: int = 0) -> list[int]:
        """Nodes (from text index ``first`` on) whose text contains ``needle``, in id order."""
        if not needle or first >= len(self._starts):
            return []
        blob, starts, out = self._blob, self._starts, []
        at = blob.find(needle, starts[first])
        while at != -1:
            k = bisect_right(starts, at) - 1
            out.append(self._nodes[k])
            if k + 1 >= len(starts):
                break
            at = blob.find(needle, starts[k + 1])
        return out

    def refresh(self) -> None:
        max_id, count, *revisions = self._read_state()
        state = tuple(revisions)
        if state == self._state and max_id == self._max_id and count == self._count:
            return
        with self._lock:
            grown = count - self._count
            if state == self._state and max_id > self._max_id and grown > 0:
                rows = _all_node_texts(self._max_id)
                if len(rows) <= grown:  # only new nodes (some may have no row yet: no text)
                    first = self._add(rows)
                    for name, holders in self._holders.items():
                        holders.extend(self._scan(name, first))
                    self._max_id, self._count = max_id, count
                    return
            self._clear()
            self._add(_all_node_texts())
            self._state, self._max_id, self._count = state, max_id, count
            self.rebuilds += 1

    def holders(self, name: str) -> list[int]:
        """Every loaded node whose casefolded text contains ``name`` (already casefolded)."""
        with self._lock:
            found = self._holders.get(name)
            if found is None:
                found = self._scan(name)
                if len(self._holders) >= CONCEPT_HOLDERS_CACHED:
                    self._holders.clear()
                self._holders[name] = found
            return found

    def reset(self) -> None:
        with self._lock:
            self._clear()


_node_texts = _NodeTexts()


def resident_node_texts() -> _NodeTexts | None:
    """The fresh resident node texts, or ``None`` inside a transaction / when resident indexes are off."""
    if not getattr(settings, "LEXICAL_RESIDENT_INDEX", True) or connection.in_atomic_block:
        return None
    _node_texts.refresh()
    return _node_texts


def _nodes_containing(concepts: set[str]) -> dict[str, list[int]]:
    """Every registered memory node (fact, episode, knowledge) whose text contains each concept.

    The reference rule (§3.8): ``concept.casefold()`` is a substring of the node's
    text (fact content / episode summary / knowledge content) casefolded. No cap:
    every holder gets its share. Outside a transaction the resident node texts
    answer (one ``str.find`` pass per name, then remembered); inside one, the
    rows are read and scanned directly.
    """
    folded = {c: c.casefold() for c in concepts if c.strip() and "\x00" not in c}
    index = resident_node_texts()
    if index is not None:
        return {c: index.holders(f) for c, f in folded.items()}
    rows = _all_node_texts()
    return {c: [node for node, text in rows if f in text] for c, f in folded.items()}


class _ConceptCache:
    """The concept graph, resident per process and reloaded when its meta revision changes.

    ``services.add_knowledge`` bumps ``concept_graph_revision`` in the transaction that
    grows the graph; a spread then costs one tiny query instead of loading edges hop by hop.
    """

    def __init__(self) -> None:
        self.revision: str | None = None
        self.ids: dict[str, list[int]] = {}  # casefolded name -> concept ids
        self.lengths: list[int] = []  # distinct lengths of the casefolded names
        self.names: dict[int, str] = {}
        self.adjacency: dict[int, dict[int, float]] = {}

    def fresh(self) -> _ConceptCache:
        from memory.services import CONCEPT_GRAPH_REVISION

        with connection.cursor() as cur:
            cur.execute("SELECT value FROM meta WHERE key = %s", [CONCEPT_GRAPH_REVISION])
            row = cur.fetchone()
            revision = row[0] if row else "0"
            if revision != self.revision:
                cur.execute("SELECT id, concept FROM knowledge_nodes")
                self.names = dict(cur.fetchall())
                ids: dict[str, list[int]] = defaultdict(list)
                for cid, name in self.names.items():
                    if name.strip():
                        ids[name.casefold()].append(cid)
                self.ids = dict(ids)
                self.lengths = sorted({len(name) for name in self.ids})
                adjacency: dict[int, dict[int, float]] = defaultdict(dict)
                cur.execute("SELECT source_id, target_id, strength FROM knowledge_edges")
                for a, b, w in cur.fetchall():
                    adjacency[a][b] = max(adjacency[a].get(b, 0.0), w)
                    adjacency[b][a] = max(adjacency[b].get(a, 0.0), w)
                self.adjacency = dict(adjacency)
                self.revision = revision
        return self


_concepts = _ConceptCache()


def _concepts_in(text: str, graph: _ConceptCache) -> set[int]:
    """Concepts whose casefolded name occurs in ``text`` (casefolded): the reference's seeding rule.

    Every substring of ``text`` of a length some name has is looked up (names are
    jieba words, a handful of lengths), so no concept list is scanned.
    """
    found: set[int] = set()
    size = len(text)
    for length in graph.lengths:
        if length > size:
            break
        for i in range(size - length + 1):
            ids = graph.ids.get(text[i:i + length])
            if ids:
                found.update(ids)
    return found


def _concept_graph(seed_texts: Mapping[int, str], hops: int, limit: int) -> ConceptGraph | None:
    """The part of the concept graph reachable from the seeds' concepts within ``hops``.

    The seed concepts are those whose casefolded name occurs in a seed text (looked
    up by the text's substrings, not by scanning every name); the engine applies the
    same rule within this bounded part. Normalising out-weights before bounding and
    re-normalising after it equals normalising the bounded part only, so handing
    over the bounded part is exact.
    """
    if not any(t.strip() for t in seed_texts.values()):
        return None
    graph = _concepts.fresh()
    start: set[int] = set()
    for text in seed_texts.values():
        start |= _concepts_in(text.casefold(), graph)
    if not start:
        return None
    seen, frontier = set(start), set(start)
    for _ in range(hops):
        frontier = {n for node in frontier for n in graph.adjacency.get(node, {})} - seen
        if not frontier:
            break
        seen |= frontier
    edges = [(a, b, w) for a in seen for b, w in graph.adjacency.get(a, {}).items() if b in seen and a < b]
    return ConceptGraph(
        concepts={cid: graph.names[cid] for cid in seen}, edges=edges, seed_texts=seed_texts,
        nodes_containing=_nodes_containing, max_mapped=max(CONCEPT_MAP_MIN, limit),
    )


@dataclass(frozen=True)
class SpreadItem:
    node_id: int
    kind: str
    ref_id: int
    content: str
    score: float
    hops: int


@dataclass(frozen=True)
class Spreading:
    seeds: list[SpreadItem]
    hits: list[SpreadItem]
    fell_back: bool
    timed_out_graph: str | None
    elapsed_ms: float
    hops: int
    alpha: float


def spread(
    *,
    seeds: Sequence[tuple[str, int, float]],
    now: int,
    hops: int | None = None,
    limit: int = 4,
    alpha: float | None = None,
    activation: Any = None,  # ShortTermActivation or memory.activation.SharedActivation
    events: bool = True,
    use_concepts: bool = True,
    timeout_seconds: float | None = None,
) -> Spreading:
    """Association spreading from ``(kind, ref_id, relevance)`` seeds; read-only.

    Personalised PageRank on the memory graph and on the concept graph, summed;
    a PPR timeout falls back to fixed-hop spreading and writes
    ``memory_ppr_timeout``. Hits below REVIVE retention are dropped.
    """
    from memory.engine import spreading as sp

    ov = _overrides(None)
    hops = int(ov.get("ppr_hops", sp.HOPS)) if hops is None else hops
    alpha = float(ov.get("ppr_alpha", sp.PPR_ALPHA)) if alpha is None else alpha
    weights: dict[int, float] = {}
    by_kind: dict[str, set[int]] = defaultdict(set)
    for kind, ref, _rel in seeds:
        by_kind[kind].add(int(ref))
    node_of: dict[tuple[str, int], int] = {}
    for kind, ids in by_kind.items():
        for node, ref in MemoryNode.objects.filter(ref_kind=kind, ref_id__in=list(ids)).values_list("id", "ref_id"):
            node_of[(kind, ref)] = node
    for kind, ref, rel in seeds:
        node = node_of.get((kind, int(ref)))
        if node is not None:
            weights[node] = max(weights.get(node, 0.0), float(rel))
    seed_info = node_texts(weights)
    concept = (
        _concept_graph({n: t for n, (_k, _r, t) in seed_info.items()}, hops, limit) if use_concepts and weights else None
    )

    def on_timeout(graph: str) -> None:
        if events:
            from memory.services import emit_event

            emit_event("memory_ppr_timeout", {"graph": graph}, at=now)

    factor: Callable[[int], float] | None = _FactorsAt(activation, now) if activation is not None else None
    result: SpreadResult = engine_spread(
        weights, hops=hops, limit=limit, expand=_expand, retention_of=lambda ns: node_retentions(ns, now),
        concept=concept, alpha=alpha, activation=factor, on_timeout=on_timeout,
        **({"timeout_seconds": timeout_seconds} if timeout_seconds else {}),
    )
    texts = node_texts([h.node_id for h in result.hits])
    hits = [
        SpreadItem(h.node_id, texts[h.node_id][0], texts[h.node_id][1], texts[h.node_id][2], h.score, h.hops)
        for h in result.hits
        if h.node_id in texts
    ]
    seeds_out = [SpreadItem(n, k, r, t, weights[n], 0) for n, (k, r, t) in seed_info.items()]
    return Spreading(
        seeds=seeds_out, hits=hits, fell_back=result.fell_back, timed_out_graph=result.timed_out_graph,
        elapsed_ms=result.elapsed_ms, hops=hops, alpha=alpha,
    )
