"""L1 reads: a stream's messages (working memory, pending counts, search, vectors) and the stream lists."""
from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from memory import backends, services
from memory.engine import decay
from memory.engine.quantize import HEADER_SIZE, MAGIC, Int8Matrix, cosine_q8_many, quantize_vector, unpack_float32
from memory.engine.scoring import fused_relevance
from memory.models import Episode, Message, Person, Stream
from memory.providers import Embedder
from memory.providers import config as provider_config  # looked up per call: tests swap the embedder
from memory.search import lexical, read_ahead
from memory.selectors._common import _query_q8

logger = logging.getLogger(__name__)

MESSAGE_POOL = 30           # inspect's fused ranking: candidates per channel (at least limit × 3)
MESSAGE_DENSE_SCAN = 5_000  # inspect's dense channel reads the SQ8 vectors of the stream's newest N messages


@dataclass(slots=True)
class WorkingMessage:
    """A message of working memory, as a turn returns it and the console shows it: the columns
    they read, not a model instance (a turn reads up to 40 of them; a model instance costs
    about 15 µs to build)."""

    id: int
    stream_id: int
    role: str
    sender_person_id: int | None
    content: str
    created_at: int
    sender_name: str = ""  # set by the console (console.presenters.attach_senders)

    @property
    def pk(self) -> int:
        return self.id


_WORKING_SQL = "SELECT id, stream_id, role, sender_person_id, content, created_at FROM messages"


def working_memory(*, stream_id: int, limit: int = 40, watermark: int | None = None) -> list[WorkingMessage]:
    """Unarchived messages of a stream, newest ``limit`` by id, oldest first.

    With a user-message ``watermark`` the user messages stored after it are left
    out (assistant rows after it stay), fixing the turn's snapshot.
    """
    return read_ahead.read(working_memory_read(stream_id=stream_id, limit=limit, watermark=watermark))


def working_memory_read(*, stream_id: int, limit: int = 40, watermark: int | None = None) -> read_ahead.Read:
    """:func:`working_memory` as a read a turn sends with its others (:func:`memory.search.read_ahead.one_state`)."""
    # a turn's read: plain SQL (no ORM compile per call), the vectors (~2.5 kB a message) left unread
    sql = f"{_WORKING_SQL} WHERE stream_id = %s AND episode_id IS NULL"
    params: list[Any] = [stream_id]
    if watermark is not None:
        sql += " AND NOT (role = 'user' AND id > %s)"
        params.append(watermark)
    limit = max(0, int(limit))
    return read_ahead.Read(("working_memory", stream_id, watermark, limit), sql + " ORDER BY id DESC LIMIT %s",
                        [*params, limit], _working_rows)


def _working_rows(rows: list[tuple]) -> list[WorkingMessage]:
    return [WorkingMessage(*row) for row in reversed(rows)]


@functools.cache
def _message_columns() -> tuple[str, ...]:
    """A message's columns but its vectors (~2.5 kB a message): what a search returns."""
    return tuple(f.column for f in Message._meta.concrete_fields if f.name not in ("embedding", "embedding_q8"))


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


def last_message_id_before(*, stream_id: int, at: int) -> int | None:
    """The id of the stream's last message stored at or before ``at`` (epoch ms), None when there is none."""
    return (
        Message.objects.filter(stream_id=stream_id, created_at__lte=at).order_by("-id").values_list("id", flat=True).first()
    )


def recent_speakers(*, stream_id: int, before_id: int, scan_limit: int = 200) -> list[int]:
    """Distinct senders among the newest ``scan_limit`` messages up to ``before_id``, most recent first."""
    return read_ahead.read(recent_speakers_read(stream_id=stream_id, before_id=before_id, scan_limit=scan_limit))


def recent_speakers_read(*, stream_id: int, before_id: int, scan_limit: int = 200) -> read_ahead.Read:
    """:func:`recent_speakers` as a read a turn sends with its others (:func:`memory.search.read_ahead.one_state`)."""
    return read_ahead.Read(  # one statement, from the covering index (migration 0027)
        ("recent_speakers", stream_id, before_id, scan_limit),
        "SELECT sender_person_id FROM (SELECT sender_person_id, id FROM messages"
        " WHERE stream_id = %s AND id <= %s AND sender_person_id IS NOT NULL ORDER BY id DESC LIMIT %s) recent"
        " GROUP BY sender_person_id ORDER BY max(id) DESC",
        [stream_id, before_id, scan_limit],
        lambda rows: [row[0] for row in rows],
    )


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
    if not score:
        return []
    # plain SQL, vectors left unread (~2.5 kB a message): no ORM compile per search
    by_id = {
        m.pk: m
        for m in Message.objects.raw(
            f"SELECT {', '.join(_message_columns())} FROM messages WHERE id IN ({backends.in_placeholders(score)})", list(score)
        )
    }
    out = []
    for mid in sorted(score):
        message = by_id.get(mid)
        if message is None:  # deleted since it was ranked
            continue
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
    q8 = _query_q8(query_vector)
    sql = "SELECT id, embedding_q8 FROM messages WHERE stream_id = %s AND embedding_q8 IS NOT NULL"
    params: list[Any] = [stream_id]
    if before_id is not None:
        sql += " AND id < %s"
        params.append(before_id)
    # The vectors first: on PostgreSQL this read, sent after the milliseconds a first search spends
    # building the stream's postings, waited for the server's idle CPU to wake; sent first, it overlaps.
    rows = backends.fetch_binary(sql + " ORDER BY id DESC LIMIT %s", [*params, MESSAGE_DENSE_SCAN])
    scored = lexical.resident_message_scores(match, stream_id=stream_id, before_id=before_id)  # both channels' bm25
    if scored is not None:
        lexical_hits = dict(scored.top(pool))
    else:
        lexical_hits = dict(lexical.message_candidates(match, stream_id=stream_id, before_id=before_id, limit=pool))
    cos: dict[int, float] = {}
    dense_top: list[int] = []
    if rows:
        matrix = _q8_matrix(rows, np.asarray(query_vector).size)
        scores = matrix.cosines(q8)
        best = np.lexsort((-matrix.ids, -scores))[:pool]  # best cosine first, ties: newer first
        dense_top = matrix.ids[best].tolist()
        wanted = np.isin(matrix.ids, np.fromiter(lexical_hits, dtype=np.int64, count=len(lexical_hits)))
        wanted[best] = True  # only these cosines are looked at
        cos = dict(zip(matrix.ids[wanted].tolist(), scores[wanted].tolist(), strict=True))
    missing = [mid for mid in lexical_hits if mid not in cos]
    if missing:
        for mid, vec in message_vectors(missing).items():
            c = cosine_q8_many(q8, [quantize_vector(vec)])[0]
            if not np.isnan(c):
                cos[mid] = float(c)
    dense_only = [mid for mid in dense_top if mid not in lexical_hits]
    bm = {**lexical_hits, **(scored.of(dense_only) if scored is not None
                             else lexical.message_bm25(match, stream_id=stream_id, message_ids=dense_only))}
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
    ids = np.fromiter(map(itemgetter(0), rows), dtype=np.int64, count=len(rows))
    blobs = [b"" if blob is None else blob for blob in map(itemgetter(1), rows)]
    good = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) == size
    if not good.all():
        blobs, ids = list(compress(blobs, good)), ids[good]
    raw = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), size)
    header = raw[:, :HEADER_SIZE]
    keep = (header[:, :4] == np.frombuffer(MAGIC, dtype=np.uint8)).all(axis=1)
    keep &= header[:, 4:8].copy().view("<u4").ravel() == dim
    payload = np.ascontiguousarray(raw[keep, HEADER_SIZE:]).view(np.int8)
    ids = ids[keep]
    wide = payload.astype(np.int16)  # squares summed exactly (≤ 128² · dim), then float32 as before
    norms = np.sqrt(np.einsum("ij,ij->i", wide, wide, dtype=np.int32).astype(np.float32))
    return Int8Matrix(ids=ids, matrix=payload.reshape(len(ids), dim), norms=norms)


_VECTORS_SQL = "SELECT id, content, embedding, role FROM messages WHERE {ids}"  # plain SQL, vectors in binary


def message_vectors_read(message_ids: Iterable[int]) -> read_ahead.Read:
    """:func:`message_vectors`' read of the stored vectors, to be sent with a confirm's others."""
    ids = list(dict.fromkeys(int(i) for i in message_ids))
    return read_ahead.Read(("message_vectors", tuple(ids)),
                        _VECTORS_SQL.format(ids=f"id IN ({backends.in_placeholders(ids)})"), ids, binary=True)


def turn_context_vectors_read(turn_id: int) -> read_ahead.Read:
    """:func:`message_vectors_read` of the context a turn recorded, sent before the turn is read;
    :func:`memory.search.read_ahead.serve_from` files its rows under the read of those the confirm uses."""
    ids = backends.in_subquery_sql("id", backends.json_ids_sql("turns", "context_message_ids"))
    return read_ahead.Read(("turn_context_vectors", int(turn_id)), _VECTORS_SQL.format(ids=ids), [int(turn_id)],
                        binary=True)


def user_message_ids(message_ids: Sequence[int]) -> list[int]:
    """The user messages among ``message_ids``, in that order (unknown ids and other roles left
    out) — from :func:`message_vectors_read`, so a confirm that read the vectors ahead reads
    nothing more."""
    texts = message_texts(message_ids, role="user")
    return [mid for mid in map(int, message_ids) if mid in texts]


def message_texts(message_ids: Sequence[int], *, role: str | None = None) -> dict[int, str]:
    """``{message id: text}`` of ``message_ids`` (of ``role`` only when given; unknown ids left out) —
    from :func:`message_vectors_read`, so a confirm that read the vectors ahead reads nothing more."""
    rows = read_ahead.read(message_vectors_read(message_ids))
    return {int(mid): content for mid, content, _raw, kind in rows if role is None or kind == role}


def message_vectors(message_ids: Iterable[int], *, embedder: Embedder | None = None) -> dict[int, np.ndarray]:
    """float32 vectors of messages, each computed at most once.

    Stored vectors are read; missing ones (and ones of another dimension than the
    embedder's) are embedded through the configured embedder in batches of at most
    ``EMBEDDING_BATCH`` and stored (``services.store_message_vector``), so the next
    call reads them. Without an embedder only stored vectors come back; a failed
    embedding call leaves its messages out. Unknown ids are absent. This is the one
    selector that writes: the vector is a cache of the message text.
    """
    ids = list(dict.fromkeys(int(i) for i in message_ids))
    if not ids:
        return {}
    if embedder is None:
        embedder = provider_config.get_embedder(serving=True)  # a request waits: one short attempt
    dim = int(getattr(embedder, "dim", 0) or 0) if embedder is not None else 0
    out: dict[int, np.ndarray] = {}
    todo: list[tuple[int, str]] = []
    stored = read_ahead.read(message_vectors_read(ids))
    for mid, content, raw, _role in stored:
        vec = unpack_float32(bytes(raw)) if raw is not None else None
        if vec is not None and (not dim or vec.shape[0] == dim):
            out[mid] = vec
        else:
            todo.append((mid, content))
    if embedder is None or not todo:
        return out
    size = provider_config.embedding_batch()
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
            with transaction.atomic(), connection.cursor() as cur:
                backends.commit_without_flush(cur)  # a cache of the text: a crash loses nothing that can't be redone
                for mid, arr in fresh.items():
                    services.store_message_vector(message_id=mid, vector=arr)
            out.update(fresh)
    return out


# --- the console's stream pages ---------------------------------------------------------------


def stream_rows() -> list[Stream]:
    """Streams with message, pending and episode counts (subquery counts, one query + pending)."""
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
    pending = pending_counts()
    for row in rows:
        row.pending = pending.get(row.pk, 0)
    return rows


def filter_messages(stream: Stream, data: dict[str, Any]) -> QuerySet[Message]:
    """A stream's messages, newest first, filtered by speaker, local date range and summarised or not."""
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


def stream_speakers(*, stream_id: int) -> QuerySet[Person]:
    """The persons who sent messages in a stream, by id."""
    senders = Message.objects.filter(stream_id=stream_id, sender_person__isnull=False).values("sender_person")
    return Person.objects.filter(pk__in=senders.distinct()).order_by("id")
