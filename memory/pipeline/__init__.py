"""Background work of the memory layer, as plain services (no Celery needed to call them).

* :func:`summarize_stream` — one L2 episode from the oldest pending batch (docs/REFERENCE.md §15).
* :func:`extract_stream` — facts + knowledge from the next batch after the cursor (docs/REFERENCE.md §14).
* :func:`backfill_vectors` — embeddings for rows whose vector is missing (docs/REFERENCE.md §5).
* :func:`edges_decay` — the association-edge freeze sweep (docs/REFERENCE.md §17).
* :func:`split_into_chunks`, :func:`start_import`, :func:`run_import`,
  :func:`delete_batch_preview`, :func:`delete_batch` — the knowledge import centre (docs/REFERENCE.md §13).

``memory.pipeline.tasks`` holds the Celery adapters; they own locking and retries, while
everything that decides *what* is written lives here. The model call of a batch
always happens outside any transaction, and each write is one short transaction
(SQLite takes the write lock at BEGIN, see settings).

Failure accounting is persisted in ``queue_failures`` so several workers and
restarts agree on when a stuck batch is given up: the third consecutive failure
of the same head message writes a placeholder episode (summaries) or moves the
cursor past the batch (extraction).
"""
from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from memory import backends, broker, selectors, services
from memory.dispatch import enqueue, jobs, triggers
from memory.dispatch.triggers import EXTRACT, SUMMARIZE, extract_due, read_cursor, summarize_due
from memory.engine import tokenize
from memory.engine.scope import SCOPE_ALL, origin_kind_for_stream
from memory.meta import meta_set
from memory.models import (
    EXTRACT_CURSOR_KEY,
    Episode,
    Fact,
    Identity,
    ImportBatch,
    Job,
    Knowledge,
    MemoryNode,
    Message,
    Person,
    QueueFailure,
    Stream,
)
from memory.providers import DialogueLine, Embedder, Emit, Extractor, KnownFact, Participant, Summariser
from memory.providers import config as provider_config
from memory.providers.embeddings import clamp_batch
from memory.search import lexical

logger = logging.getLogger(__name__)

__all__ = [
    "BackfillResult",
    "BatchOutcome",
    "ImportBatchNotFoundError",
    "ImportBusyError",
    "ImportLimitError",
    "backfill_vectors",
    "delete_batch",
    "delete_batch_preview",
    "edges_decay",
    "extract_stream",
    "run_import",
    "split_into_chunks",
    "start_import",
    "summarize_stream",
    "validate_upload",
]

#: A summary batch never has fewer messages than this (docs/REFERENCE.md §15).
MIN_SUMMARY_BATCH = 4
#: The third consecutive failure of the same head batch gives it up.
BATCH_RETRY_LIMIT = 3
#: Participants offered to the extractor per batch.
PARTICIPANT_LIMIT = 12
KNOWN_FACT_PER_PERSON = 6
KNOWN_FACT_LIMIT = 30
KNOWLEDGE_SOURCE = "fact_extract"
UNSUMMARIZED_SUMMARY = "这一批对话未能生成摘要：{reason}"
NO_SUMMARY_REASON = "模型未返回合法的摘要 JSON"
NO_EXTRACTION_REASON = "模型未返回合法的抽取 JSON"
ERROR_MAX_CHARS = 300


def _now(at: int | None) -> int:
    return services.now_ms() if at is None else int(at)


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:ERROR_MAX_CHARS]


def _bot_name() -> str:
    """The bot's name in rendered dialogue; empty lets each provider use its own default."""
    return settings.MEMORY_BOT_NAME


@dataclass(frozen=True)
class BatchOutcome:
    """What one summarisation/extraction step did.

    ``status`` is one of ``missing`` (no such stream), ``idle`` (below the
    trigger), ``too_few`` (batch < 4), ``written``, ``failed`` (counted),
    ``skipped`` (third failure: placeholder / cursor moved on),
    ``no_participants`` (extraction batch without a resolvable speaker),
    ``raced`` (another worker wrote this batch first) or ``disabled`` (no model).
    ``more`` says whether the stream is still due after this step.
    """

    status: str
    stream_id: int
    messages: int = 0
    episode_id: int | None = None
    failures: int = 0
    error: str = ""
    fact_ids: tuple[int, ...] = ()
    knowledge_ids: tuple[int, ...] = ()
    edges: int = 0
    more: bool = False


# --- failure accounting ----------------------------------------------------------


def _record_failure(*, stream_id: int, queue: str, head_message_id: int, error: str, at: int) -> int:
    """Count one failure of the batch starting at ``head_message_id``; returns the streak.

    A different head message id restarts the count at 1.
    """
    with transaction.atomic():
        row = QueueFailure.objects.filter(stream_id=stream_id, queue=queue).first()
        if row is None:
            QueueFailure.objects.create(
                stream_id=stream_id, queue=queue, head_message_id=head_message_id,
                failures=1, last_error=error, updated_at=at,
            )
            return 1
        failures = row.failures + 1 if row.head_message_id == head_message_id else 1
        QueueFailure.objects.filter(pk=row.pk).update(
            head_message_id=head_message_id, failures=failures, last_error=error, updated_at=at
        )
        return failures


def _clear_failures(*, stream_id: int, queue: str) -> None:
    QueueFailure.objects.filter(stream_id=stream_id, queue=queue).delete()


# --- dialogue rendering inputs -------------------------------------------------------


def _participants(stream: Stream, messages: Sequence[Message]) -> list[Participant]:
    """The batch's own user senders in order of appearance (at most 12).

    Each person is referred to by their first identity (one on the stream's
    platform preferred); a person without any identity gets ``p<id>``.
    """
    order: list[int] = []
    for m in messages:
        if m.role == "user" and m.sender_person_id and m.sender_person_id not in order:
            order.append(m.sender_person_id)
            if len(order) >= PARTICIPANT_LIMIT:
                break
    if not order:
        return []
    persons = {p.pk: p for p in Person.objects.filter(pk__in=order)}
    identities: dict[int, Identity] = {}
    for identity in Identity.objects.filter(person_id__in=order).order_by("id"):
        best = identities.get(identity.person_id)
        if best is None or (best.platform != stream.platform and identity.platform == stream.platform):
            identities[identity.person_id] = identity
    out = []
    for pid in order:
        person = persons.get(pid)
        if person is None:
            continue
        identity = identities.get(pid)
        ref = identity.external_id if identity else f"p{pid}"
        name = (identity.display_name if identity else "") or person.display_name or ref
        out.append(Participant(external_id=ref, name=name, person_id=pid))
    return out


def _dialogue(messages: Sequence[Message], participants: Sequence[Participant]) -> list[DialogueLine]:
    by_person = {p.person_id: p for p in participants}
    bot = _bot_name()
    lines = []
    for m in messages:
        if m.role == "assistant":
            lines.append(DialogueLine(role="assistant", speaker_ref=None, speaker_name=bot, content=m.content))
            continue
        p = by_person.get(m.sender_person_id)
        lines.append(
            DialogueLine(
                role="user",
                speaker_ref=p.external_id if p else None,
                speaker_name=p.name if p else "某人",
                content=m.content,
            )
        )
    return lines


def _still_pending(stream_id: int, message_ids: Sequence[int]) -> bool:
    """True while no other writer has archived any message of the batch."""
    return Message.objects.filter(stream_id=stream_id, id__in=list(message_ids), episode__isnull=True).count() == len(
        message_ids
    )


# --- summarisation (docs/REFERENCE.md §15) --------------------------------------------------------


def summarize_stream(*, stream_id: int, summariser: Summariser | None = None, at: int | None = None) -> BatchOutcome:
    """Summarise the oldest pending batch of a stream into one episode, if it is due.

    1. Nothing happens below ``SUMMARIZE_TRIGGER_MESSAGES`` (48) pending messages
       or when the batch (``SUMMARIZE_BATCH_MESSAGES``, 16) has fewer than 4.
    2. The summariser runs outside any transaction; ``None`` or an exception is
       one failure of this batch (counted in ``queue_failures``).
    3. Success writes the episode, its cues and the archive marks in one
       transaction (re-checking that the batch is still pending, so a duplicate
       run writes nothing) and clears the failure count.
    4. The third consecutive failure of the same head message writes the
       ``unsummarized`` placeholder episode (no cues) so the queue moves on.

    Rerunning is safe: a batch once archived is never pending again.
    """
    stream = Stream.objects.filter(pk=stream_id).first()
    if stream is None:
        return BatchOutcome("missing", stream_id)
    if not summarize_due(stream_id):
        return BatchOutcome("idle", stream_id)
    batch = list(selectors.oldest_pending(stream_id=stream_id, n=settings.SUMMARIZE_BATCH_MESSAGES))
    if len(batch) < MIN_SUMMARY_BATCH:
        return BatchOutcome("too_few", stream_id, messages=len(batch))
    if summariser is None:
        summariser = provider_config.get_summariser()
    if summariser is None:
        return BatchOutcome("disabled", stream_id)

    ids = [m.pk for m in batch]
    participants = _participants(stream, batch)
    error = ""
    lines = _dialogue(batch, participants)
    try:
        draft = summariser.summarise(lines, participants)
    except SoftTimeLimitExceeded:
        raise
    except Exception as exc:  # every model failure counts towards giving the batch up
        logger.warning("summary_failed stream=%s head=%s error=%s", stream_id, ids[0], _error_text(exc))
        draft, error = None, _error_text(exc)
    if draft is not None and not (draft.summary or "").strip():
        draft = None
    if draft is None:
        return _summary_failed(stream_id, batch, error or NO_SUMMARY_REASON, at)

    cues = [c for c in (draft.cues or []) if c and c.strip()] or [draft.summary]
    with transaction.atomic():
        if not _still_pending(stream_id, ids):
            return BatchOutcome("raced", stream_id, messages=len(ids), more=summarize_due(stream_id))
        episode = services.add_episode(
            stream_id=stream_id,
            summary=draft.summary.strip(),
            cues=cues,
            started_at=batch[0].created_at,
            ended_at=batch[-1].created_at,
            message_ids=ids,
            source=getattr(summariser, "label", ""),
            at=at,
        )
        logger.info("summary_writing stream=%s episode=%s messages=%d", stream_id, episode.pk, len(ids))
        _clear_failures(stream_id=stream_id, queue=SUMMARIZE)
    return BatchOutcome("written", stream_id, messages=len(ids), episode_id=episode.pk, more=summarize_due(stream_id))


def _summary_failed(stream_id: int, batch: Sequence[Message], reason: str, at: int | None) -> BatchOutcome:
    head = batch[0].pk
    now = _now(at)
    failures = _record_failure(stream_id=stream_id, queue=SUMMARIZE, head_message_id=head, error=reason, at=now)
    services.emit_event(
        "summary_failed",
        {"streamId": stream_id, "headMessageId": head, "failures": failures, "reason": reason},
        at=now, stream_id=stream_id, stage="summarize",
    )
    if failures < BATCH_RETRY_LIMIT:
        return BatchOutcome("failed", stream_id, messages=len(batch), failures=failures, error=reason)
    ids = [m.pk for m in batch]
    try:
        with transaction.atomic():
            if not _still_pending(stream_id, ids):
                return BatchOutcome("raced", stream_id, messages=len(ids), more=summarize_due(stream_id))
            episode = services.add_episode(
                stream_id=stream_id,
                summary=UNSUMMARIZED_SUMMARY.format(reason=reason),
                cues=[],
                started_at=batch[0].created_at,
                ended_at=batch[-1].created_at,
                message_ids=ids,
                kind=Episode.Kind.UNSUMMARIZED,
                at=at,
            )
            _clear_failures(stream_id=stream_id, queue=SUMMARIZE)
            services.emit_event(
                "summary_batch_skipped",
                {"streamId": stream_id, "headMessageId": head, "episodeId": episode.pk,
                 "messageCount": len(ids), "reason": reason},
                at=now, stream_id=stream_id, stage="summarize",
            )
    except DatabaseError:
        # The count stays at the limit, so the next attempt tries the placeholder again.
        logger.exception("summary_placeholder_failed stream=%s head=%s", stream_id, head)
        return BatchOutcome("failed", stream_id, messages=len(ids), failures=failures, error=reason)
    logger.warning("summary_batch_skipped stream=%s head=%s reason=%s", stream_id, head, reason)
    return BatchOutcome(
        "skipped", stream_id, messages=len(ids), episode_id=episode.pk, failures=failures, error=reason,
        more=summarize_due(stream_id),
    )


# --- fact extraction (docs/REFERENCE.md §14) ------------------------------------------------------


def cursor_moved(stream_id: int, cursor: int) -> bool:
    """Lock the cursors until the transaction ends, then tell whether this stream's is no longer ``cursor``.

    Every stream's cursor lives in one meta row that each batch reads, changes and writes
    back: without the lock, two streams' batches committing at once on PostgreSQL (read
    committed) would each write the map they read, and one stream's cursor would go back.
    """
    with connection.cursor() as cur:
        backends.lock_key(cur, backends.LOCK_EXTRACT_CURSORS, 0)
    return read_cursor(stream_id) != cursor


def advance_cursor(stream_id: int, message_id: int) -> None:
    """Set a stream's cursor (:mod:`memory.dispatch.triggers`); call inside the transaction that wrote the batch, after :func:`cursor_moved`."""
    cursors = triggers.cursor_map()
    cursors[str(stream_id)] = int(message_id)
    meta_set(EXTRACT_CURSOR_KEY, cursors)


def _known_facts(participants: Sequence[Participant], now: int) -> list[KnownFact]:
    """Up to 6 facts per participant, 30 in all, ignoring visibility.

    This is the one place visibility is bypassed: private facts must be in the
    de-duplication list or the extractor would write them again.
    """
    known: list[KnownFact] = []
    for p in participants:
        for fact in selectors.top_facts(
            person_id=p.person_id, limit=KNOWN_FACT_PER_PERSON, now=now, stream_kind=SCOPE_ALL
        ):
            known.append(KnownFact(id=fact.id, person_ref=p.external_id, content=fact.content, slot=fact.slot or ""))
            if len(known) >= KNOWN_FACT_LIMIT:
                return known
    return known


def _person_ref(raw: str) -> str:
    return (raw or "").strip().strip("[]").strip()


def extract_stream(*, stream_id: int, extractor: Extractor | None = None, at: int | None = None) -> BatchOutcome:
    """Extract facts and knowledge from the next batch after the stream's cursor.

    1. Nothing happens below ``FACT_EXTRACT_TRIGGER_MESSAGES`` (32) messages
       after the cursor; the batch is the next ``FACT_EXTRACT_BATCH_MESSAGES`` (12).
    2. A batch without a resolvable speaker has nothing to say about anyone:
       the cursor moves past it without a model call.
    3. The extractor runs outside any transaction with the participants and
       their known facts; ``None`` or an exception is one counted failure
       (event ``memory_extract_failed``); the third failure moves the cursor
       past the batch (``fact_extract_batch_skipped``).
    4. Success writes facts, knowledge, the co-activation edges of everything
       written and the cursor in one transaction — it re-reads the cursor
       first, so a duplicate run writes nothing — and enqueues embedding.
    """
    stream = Stream.objects.filter(pk=stream_id).first()
    if stream is None:
        return BatchOutcome("missing", stream_id)
    cursor = read_cursor(stream_id)
    if not extract_due(stream_id):
        return BatchOutcome("idle", stream_id)
    batch = list(
        selectors.messages_after(stream_id=stream_id, since_id=cursor, limit=settings.FACT_EXTRACT_BATCH_MESSAGES)
    )
    if not batch:
        return BatchOutcome("idle", stream_id)
    now = _now(at)
    last_id = batch[-1].pk
    participants = _participants(stream, batch)
    if not participants:
        with transaction.atomic():
            if cursor_moved(stream_id, cursor):
                return BatchOutcome("raced", stream_id, more=extract_due(stream_id))
            advance_cursor(stream_id, last_id)
        return BatchOutcome("no_participants", stream_id, messages=len(batch), more=extract_due(stream_id))
    if extractor is None:
        extractor = provider_config.get_extractor()
    if extractor is None:
        return BatchOutcome("disabled", stream_id)

    def emit(kind: str, payload: dict[str, Any]) -> None:
        services.emit_event(kind, payload, at=now, stream_id=stream_id, stage="extract")

    error = ""
    known = _known_facts(participants, now)
    lines = _dialogue(batch, participants)
    try:
        extraction = extractor.extract(lines, participants, known, emit=emit)
    except SoftTimeLimitExceeded:
        raise
    except Exception as exc:  # every model failure counts towards giving the batch up
        logger.warning("extract_failed stream=%s cursor=%s error=%s", stream_id, cursor, _error_text(exc))
        extraction, error = None, _error_text(exc)
    if extraction is None:
        return _extract_failed(stream_id, batch, cursor, error or NO_EXTRACTION_REASON, now)

    by_ref = {p.external_id: p for p in participants}
    origin = origin_kind_for_stream(stream.kind)
    with transaction.atomic():
        if cursor_moved(stream_id, cursor):
            return BatchOutcome("raced", stream_id, more=extract_due(stream_id))
        fact_ids = _persist_facts(extraction.facts, by_ref, origin=origin, stream_id=stream_id, at=now, emit=emit,
                                  batch=batch)
        knowledge_ids = _persist_knowledge(extraction.knowledge, at=now, emit=emit)
        refs = [("fact", i) for i in fact_ids] + [("knowledge", i) for i in knowledge_ids]
        edges = services.link_together(refs=refs, at=now)
        advance_cursor(stream_id, last_id)
        _clear_failures(stream_id=stream_id, queue=EXTRACT)
        emit(
            "memory_extract",
            {"streamId": stream_id, "messageCount": len(batch), "extracted": len(extraction.facts),
             "written": len(fact_ids), "knowledge": len(knowledge_ids), "edges": edges},
        )
        # New facts and knowledge enqueue their embedding on commit (services.add_fact/add_knowledge).
    return BatchOutcome(
        "written", stream_id, messages=len(batch), fact_ids=tuple(fact_ids), knowledge_ids=tuple(knowledge_ids),
        edges=edges, more=extract_due(stream_id),
    )


@functools.lru_cache(maxsize=256)
def _terms(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The words and CJK pairs of a text (:func:`heard_in` compares a batch's lines with each of its facts)."""
    return frozenset(tokenize.words(text)), frozenset(tokenize.bigrams(text))


def heard_in(content: str, batch: Sequence[Message], person_id: int) -> int | None:
    """The message of ``batch`` a fact about ``person_id`` was most likely heard in: the one sharing
    most words and CJK character pairs with it, the person's own messages first (a fact about a
    speaker is mostly what they said); ``None`` when no message shares any (nothing to go by)."""
    want_words, want_pairs = _terms(content)

    def shared(message: Message) -> int:
        said_words, said_pairs = _terms(message.content)  # a batch's lines are read once for all its facts
        return len(want_words & said_words) + len(want_pairs & said_pairs)

    for group in ([m for m in batch if m.sender_person_id == person_id], list(batch)):
        scored = [(shared(m), m.pk) for m in group]
        best = max(scored, default=(0, 0))
        if best[0] > 0:
            return best[1]
    return None


def _persist_facts(
    facts: Sequence[Any], by_ref: dict[str, Participant], *, origin: str, stream_id: int, at: int,
    emit: Emit, batch: Sequence[Message] = (),
) -> list[int]:
    written: list[int] = []
    for fact in facts:
        person = by_ref.get(_person_ref(fact.person_ref))
        if person is None:
            emit("memory_fact_dropped", {"reason": "unknown_person", "personRef": fact.person_ref})
            continue
        result = services.add_fact(
            person_id=person.person_id, content=fact.content, kind=fact.kind, slot=fact.slot,
            supersedes=fact.supersedes, origin_kind=origin, actor="auto", source=f"extract:stream{stream_id}", at=at,
            source_message_id=heard_in(fact.content, batch, person.person_id),
        )
        if not result.fact_id:
            continue
        if result.fact_id not in written:
            written.append(result.fact_id)
        emit("memory_fact", {"factId": result.fact_id, "personId": person.person_id, "memoryKind": fact.kind,
                             "content": fact.content})
        if result.superseded:
            emit("memory_fact_superseded",
                 {"factId": result.fact_id, "supersededId": result.superseded, "personId": person.person_id})
        elif fact.supersedes:
            emit("memory_fact_supersede_dropped",
                 {"supersededId": fact.supersedes, "reason": "target_not_writable", "personId": person.person_id})
        if result.conflict_with:
            emit("memory_fact_conflict", {"factId": result.fact_id, "slot": fact.slot,
                                          "conflictWith": list(result.conflict_with), "personId": person.person_id})
    return written


def _persist_knowledge(items: Sequence[str], *, at: int, emit: Emit) -> list[int]:
    ids: list[int] = []
    for item in items:
        kid = services.add_knowledge(content=item, source=KNOWLEDGE_SOURCE, at=at)
        if kid and kid not in ids:
            ids.append(kid)
    if ids:
        emit("knowledge_learned", {"count": len(ids), "source": KNOWLEDGE_SOURCE})
    return ids


def _extract_failed(stream_id: int, batch: Sequence[Message], cursor: int, reason: str, now: int) -> BatchOutcome:
    head = batch[0].pk
    failures = _record_failure(stream_id=stream_id, queue=EXTRACT, head_message_id=head, error=reason, at=now)
    services.emit_event(
        "memory_extract_failed", {"streamId": stream_id, "cursor": cursor, "failures": failures, "reason": reason},
        at=now, stream_id=stream_id, stage="extract",
    )
    if failures < BATCH_RETRY_LIMIT:
        return BatchOutcome("failed", stream_id, messages=len(batch), failures=failures, error=reason)
    with transaction.atomic():
        if cursor_moved(stream_id, cursor):
            return BatchOutcome("raced", stream_id, more=extract_due(stream_id))
        advance_cursor(stream_id, batch[-1].pk)
        _clear_failures(stream_id=stream_id, queue=EXTRACT)
        services.emit_event(
            "fact_extract_batch_skipped",
            {"streamId": stream_id, "headMessageId": head, "cursor": batch[-1].pk, "messageCount": len(batch),
             "reason": reason},
            at=now, stream_id=stream_id, stage="extract",
        )
    logger.warning("fact_extract_batch_skipped stream=%s head=%s reason=%s", stream_id, head, reason)
    return BatchOutcome("skipped", stream_id, messages=len(batch), failures=failures, error=reason,
                        more=extract_due(stream_id))


# --- embeddings (docs/REFERENCE.md §5) ------------------------------------------------------------


@dataclass
class BackfillResult:
    """Rows embedded per table; ``failed`` rows stay NULL for the next run.

    ``more`` is True when the run stopped at its row budget with work left and
    nothing failed (a caller may go again at once); ``last_ids`` are the highest
    row ids looked at per table.
    """

    facts: int = 0
    knowledge: int = 0
    messages: int = 0
    failed: int = 0
    cleared: int = 0
    more: bool = False
    enabled: bool = True
    last_ids: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"facts": self.facts, "knowledge": self.knowledge, "messages": self.messages, "failed": self.failed,
                "cleared": self.cleared, "more": self.more, "enabled": self.enabled}


_VECTOR_MODELS: dict[str, Any] = {"facts": Fact, "knowledge": Knowledge, "messages": Message}


def _store(consumer: str, row_id: int, vector: Any) -> None:
    if consumer == "facts":
        services.store_fact_vector(fact_id=row_id, vector=vector)
    elif consumer == "knowledge":
        services.store_knowledge_vector(knowledge_id=row_id, vector=vector)
    else:
        services.store_message_vector(message_id=row_id, vector=vector)


def _batch_size(batch: int | None) -> int:
    return clamp_batch(batch) if batch else provider_config.embedding_batch()


def _api_format(embedder: Embedder) -> str:
    fmt = getattr(embedder, "api_format", "")
    if fmt:
        return str(fmt)
    label = str(getattr(embedder, "label", "") or "")
    return label.split(":", 1)[0] if ":" in label else type(embedder).__name__


def reconcile_spaces(embedder: Embedder, consumers: Sequence[str] = tuple(_VECTOR_MODELS)) -> int:
    """Register the embedder's space for each consumer; a changed space clears that table's vectors."""
    cleared = 0
    for consumer in consumers:
        cleared += services.reconcile_vector_space(
            consumer=consumer, model=embedder.name, api_format=_api_format(embedder), dim=int(embedder.dim)
        )
    return cleared


def _missing_vectors(model: Any) -> Any:
    """The rows a backfill embeds: no vector yet, and a text to embed. A message may be stored with an empty body
    and filled later (``PATCH /messages/{id}``): until then it has nothing to embed, which is no failure."""
    return model.objects.filter(embedding__isnull=True).exclude(content="")


def _embed_rows(consumer: str, rows: Sequence[tuple[int, str]], embedder: Embedder) -> tuple[int, int]:
    """Embed one batch and store the vectors in one transaction; returns (stored, failed).

    A blank text (whitespace only) is not sent: it has nothing to embed, it is neither stored nor failed."""
    rows = [(row_id, content) for row_id, content in rows if content.strip()]
    if not rows:
        return 0, 0
    vectors = list(embedder.embed([content for _, content in rows]))
    if len(vectors) != len(rows):  # breaks the embedder contract: trust none of it
        logger.warning("embed_batch_misaligned consumer=%s sent=%d got=%d", consumer, len(rows), len(vectors))
        return 0, len(rows)
    stored = failed = 0
    with transaction.atomic():
        for (row_id, _), vector in zip(rows, vectors, strict=True):
            if vector is None:
                failed += 1
                continue
            try:
                _store(consumer, row_id, vector)
            except ValueError:  # a non-finite or empty vector: leave the row for the next run
                logger.warning("vector_store_rejected consumer=%s id=%s", consumer, row_id)
                failed += 1
                continue
            stored += 1
    return stored, failed


def backfill_vectors(
    *, embedder: Embedder | None = None, batch: int | None = None, max_rows: int | None = None,
    only_ids: dict[str, Sequence[int]] | None = None,
) -> BackfillResult:
    """Embed facts, then knowledge, then messages whose ``embedding`` is NULL, one bounded batch at a time.

    The embedding space is reconciled first (a changed model or dimension clears
    the stored vectors, which this run then recomputes). Batches hold at most
    ``EMBEDDING_BATCH`` (≤ 20) rows in id order; each row is tried once per run
    (a failed batch stays NULL and the next run retries it; a remote provider found down
    ends the run after its first failed batch). Rerunning is safe:
    rows are selected by their missing vector. ``max_rows`` bounds the run;
    ``only_ids`` restricts it to given rows per table.
    """
    result = BackfillResult()
    if embedder is None:
        embedder = provider_config.get_embedder()
    if embedder is None:
        result.enabled = False
        return result
    size = _batch_size(batch)
    result.cleared = reconcile_spaces(embedder)
    processed = 0
    stopped = False
    for consumer in _VECTOR_MODELS:
        model = _VECTOR_MODELS[consumer]
        last = 0
        query = _missing_vectors(model)
        if only_ids is not None:
            wanted = sorted({int(i) for i in only_ids.get(consumer, ()) if i})
            if not wanted:
                continue
            query = query.filter(pk__in=wanted)
        while True:
            take = size
            if max_rows is not None:
                take = min(size, max_rows - processed)
                if take <= 0:
                    result.more = query.filter(pk__gt=last).exists()
                    break
            rows = list(query.filter(pk__gt=last).order_by("pk").values_list("pk", "content")[:take])
            if not rows:
                break
            stored, failed = _embed_rows(consumer, rows, embedder)
            setattr(result, consumer, getattr(result, consumer) + stored)
            result.failed += failed
            processed += len(rows)
            last = rows[-1][0]
            if failed and _embedder_down(embedder):
                stopped = True
                break
            if len(rows) < take:
                break
        result.last_ids[consumer] = last
        if result.more or stopped:
            break
    if result.failed:
        result.more = False
    if result.facts or result.knowledge or result.messages or result.failed:
        logger.info("vector_backfill_done facts=%d knowledge=%d messages=%d failed=%d cleared=%d more=%s",
                    result.facts, result.knowledge, result.messages, result.failed, result.cleared, result.more)
    if result.failed:
        logger.warning("vector_backfill_left_null failed=%d", result.failed)
    return result


def _embedder_down(embedder: Embedder) -> bool:
    """A remote embedder's breaker is open (memory/providers/embeddings.py): the rest waits for the next run."""
    down = getattr(embedder, "is_down", None)
    if down is None or not down():
        return False
    logger.warning("vector_backfill_stopped: the embedding provider is marked down")
    return True


def vectors_pending_after(last_ids: dict[str, int]) -> bool:
    """Whether rows without a vector exist beyond what a backfill run looked at."""
    return any(
        _missing_vectors(model).filter(pk__gt=last_ids.get(consumer, 0)).exists()
        for consumer, model in _VECTOR_MODELS.items()
    )


# --- edge decay (docs/REFERENCE.md §17) -----------------------------------------------------------


def edges_decay(*, at: int | None = None) -> int:
    """Freeze association edges whose retention fell below 0.1 (event ``edges_decayed``).

    Decay is computed from stored timestamps, so a rerun at the same time freezes nothing new.
    """
    return services.decay_edges(at=at)


# --- knowledge import centre (docs/REFERENCE.md §13) ----------------------------------------------

MAX_PASTE_CHARS = 200_000
MAX_FILE_BYTES = 2_000_000
MAX_BATCH_ITEMS = 5_000
CHUNK_MAX_CHARS = 1_200
IMPORT_SOURCE = "import_center"
IMPORT_PROGRESS_EVERY = 20
#: A batch still "running" after this long belongs to a worker that died.
IMPORT_STALE_MS = 30 * 60 * 1000
PREVIEW_SAMPLES = 5
PREVIEW_CHARS = 120

_PARAGRAPH_RE = re.compile(r"\n[ \t\u3000]*\n")
_SENTENCE_END_RE = re.compile(r"(?<=[。！？!?.])")


class ImportLimitError(ValueError):
    """The import is too big or empty (HTTP 400/413)."""


class ImportBusyError(RuntimeError):
    """Another import is running (HTTP 409)."""


class ImportBatchNotFoundError(LookupError):
    """No import batch with that id (HTTP 404)."""


def split_into_chunks(text: str) -> list[str]:
    """Knowledge chunks of a text: blank-line paragraphs of at most 1200 characters.

    A longer paragraph is split after 。！？!?. and its sentences are packed
    greedily (joined with a space) up to 1200 characters; a sentence still
    longer than that is cut hard.
    """
    text = (text or "").replace("\r\n", "\n").replace("\r", "\n")
    chunks: list[str] = []
    for paragraph in _PARAGRAPH_RE.split(text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= CHUNK_MAX_CHARS:
            chunks.append(paragraph)
            continue
        current = ""
        for sentence in _SENTENCE_END_RE.split(paragraph):
            sentence = sentence.strip()
            if not sentence:
                continue
            candidate = f"{current} {sentence}" if current else sentence
            if len(candidate) <= CHUNK_MAX_CHARS:
                current = candidate
                continue
            if current:
                chunks.append(current)
            current = sentence
            while len(current) > CHUNK_MAX_CHARS:
                chunks.append(current[:CHUNK_MAX_CHARS])
                current = current[CHUNK_MAX_CHARS:].strip()
        if current:
            chunks.append(current)
    return chunks


def validate_upload(data: bytes) -> str:
    """Decode an uploaded file (UTF-8, BOM allowed) after checking its size."""
    if len(data) > MAX_FILE_BYTES:
        raise ImportLimitError(f"文件 {len(data)} 字节，超过上限 {MAX_FILE_BYTES} 字节")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportLimitError("文件不是 UTF-8 文本") from exc


def _check_limits(text: str, kind: str) -> list[str]:
    if kind == "upload":
        size = len(text.encode("utf-8"))
        if size > MAX_FILE_BYTES:
            raise ImportLimitError(f"文件 {size} 字节，超过上限 {MAX_FILE_BYTES} 字节")
    elif len(text) > MAX_PASTE_CHARS:
        raise ImportLimitError(f"粘贴内容 {len(text)} 字，超过上限 {MAX_PASTE_CHARS} 字")
    chunks = split_into_chunks(text)
    if not chunks:
        raise ImportLimitError("没有可导入的内容")
    if len(chunks) > MAX_BATCH_ITEMS:
        raise ImportLimitError(f"切分后有 {len(chunks)} 条，超过单批上限 {MAX_BATCH_ITEMS} 条")
    return chunks


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:80]
    return ""


IMPORT_NOT_SENT = "无法提交导入任务：{reason}。这个导入没有开始，可以直接重新提交。"


def _enqueue_import(job_id: int, batch_id: int) -> None:
    """Send the import task; if the broker is down, fail the job and its batch, then re-raise.

    Runs right after the registering transaction commits, so a failed send
    leaves nothing ``queued``/``running`` behind to block later imports (409).
    """
    if not enqueue.enabled():
        return
    try:
        enqueue.publish(enqueue.IMPORT_TASK, (job_id, batch_id))
    except broker.BrokerUnavailable as exc:
        error = IMPORT_NOT_SENT.format(reason=exc)
        now = services.now_ms()
        with transaction.atomic():
            ImportBatch.objects.filter(pk=batch_id, status=ImportBatch.Status.RUNNING).update(
                status=ImportBatch.Status.FAILED, error=error, finished_at=now
            )
            job = Job.objects.filter(pk=job_id).only("params").first()
            jobs.job_fail(job_id=job_id, error=error, params=_public_params(job.params if job else {}))
        logger.warning("import_enqueue_failed job=%s batch=%s error=%s", job_id, batch_id, exc)
        raise


def start_import(
    *, text: str, origin_name: str = "", kind: str = "paste", user: str = "", enqueue: bool = True,
    at: int | None = None,
) -> Job:
    """Validate an import and register it: an ``import_batches`` row and a queued job.

    Limits are checked up front (``ImportLimitError``). Only one import runs at a
    time: the check for a running batch and the insert share one write
    transaction, so two concurrent starts cannot both pass (``ImportBusyError``).
    The import task is enqueued after commit (unless ``enqueue`` is False or
    ``MEMORY_ENQUEUE_TASKS`` is off; then call :func:`run_import`). When the
    broker is down the job and the batch are marked failed with the reason and
    :class:`memory.broker.BrokerUnavailable` propagates (HTTP 503).
    """
    if kind not in ("paste", "upload"):
        raise ImportLimitError("导入类型只能是 paste 或 upload")
    text = text or ""
    chunks = _check_limits(text, kind)
    now = _now(at)
    with transaction.atomic():
        stale = ImportBatch.objects.filter(status=ImportBatch.Status.RUNNING, created_at__lt=now - IMPORT_STALE_MS)
        stale.update(status=ImportBatch.Status.FAILED, error="导入超时未完成（工作进程可能已退出）", finished_at=now)
        if ImportBatch.objects.filter(status=ImportBatch.Status.RUNNING).exists():
            raise ImportBusyError("另一个导入正在进行，请等它完成后再试")
        batch = ImportBatch.objects.create(
            kind=kind, origin_name=(origin_name or "")[:255], summary=_first_line(text), submitted=len(chunks),
            status=ImportBatch.Status.RUNNING, created_at=now,
        )
        job = jobs.job_create(
            kind=Job.Kind.IMPORT, total=len(chunks), user=user,
            params={"batch_id": batch.pk, "origin_name": batch.origin_name, "kind": kind, "text": text},
        )
        if enqueue:
            job_id, batch_id = job.pk, batch.pk
            transaction.on_commit(lambda: _enqueue_import(job_id, batch_id))
    return job


def _public_params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k != "text"}


def run_import(
    *, job_id: int, batch_id: int | None = None, embedder: Embedder | None = None, embed: bool = True, at: int | None = None,
    on_progress: Callable[[int, int], None] | None = None, worker: str = "",
) -> dict[str, Any] | None:
    """Run an import job: chunks → knowledge rows of its batch, then their vectors.

    Progress (the job's heartbeat) is written every 20 chunks. Rerunning is safe:
    knowledge is deduplicated by content, so a job re-queued after its worker
    died (:func:`memory.dispatch.jobs.recover_orphaned_jobs`) only re-finds its rows; a
    finished job returns its stored result; a job another delivery is running,
    a missing job, and a job of another batch than ``batch_id`` (when given: the
    batch the task was sent for) return None without touching it.
    """
    job = Job.objects.filter(pk=job_id, kind=Job.Kind.IMPORT).first()
    if job is None:
        return None
    if job.status == Job.Status.DONE:
        return job.result
    if job.status == Job.Status.FAILED:
        return None
    params = dict(job.params or {})
    if batch_id is not None and params.get("batch_id") != batch_id:
        logger.warning("import_batch_mismatch job=%s sent=%s stored=%s", job_id, batch_id, params.get("batch_id"))
        return None
    batch = ImportBatch.objects.filter(pk=params.get("batch_id")).first()
    if batch is None or batch.status != "running":
        jobs.job_fail(job_id=job_id, error="导入批次不存在或已结束", params=_public_params(params))
        return None
    if not jobs.job_start(job_id=job_id, worker=worker):
        return None  # running elsewhere; a dead worker's job is re-queued by the lease sweep
    now = _now(at)
    chunks = split_into_chunks(params.get("text", ""))
    total = len(chunks)
    services.emit_event(
        "import_started", {"batchId": batch.pk, "jobId": job_id, "submitted": total, "kind": batch.kind,
                           "originName": batch.origin_name}, at=now, stage="import",
    )
    try:
        ids: list[int] = []
        for start in range(0, total, IMPORT_PROGRESS_EVERY):
            with transaction.atomic():
                for chunk in chunks[start : start + IMPORT_PROGRESS_EVERY]:
                    ids.append(services.add_knowledge(content=chunk, source=IMPORT_SOURCE, at=now, batch_id=batch.pk))
            done = min(total, start + IMPORT_PROGRESS_EVERY)
            jobs.job_progress(job_id=job_id, progress=done)
            if on_progress is not None:
                on_progress(done, total)
        embedded = 0
        if embed:
            vectors = backfill_vectors(embedder=embedder, only_ids={"knowledge": ids})
            embedded = vectors.knowledge
            if vectors.cleared and enqueue.enabled():  # a new embedding space: everything else needs its vector again
                enqueue.vector_backfill()
        added = Knowledge.objects.filter(import_batch_id=batch.pk).count()
        result = {"batch_id": batch.pk, "submitted": total, "added": added, "duplicated": total - added,
                  "embedded": embedded}
        finished = services.now_ms()
        with transaction.atomic():
            ImportBatch.objects.filter(pk=batch.pk, status=ImportBatch.Status.RUNNING).update(
                status=ImportBatch.Status.DONE, added=added, finished_at=finished
            )
            jobs.job_finish(job_id=job_id, result=result, params=_public_params(params))
        services.emit_event("import_done", {"batchId": batch.pk, "jobId": job_id, **result}, at=finished,
                            stage="import")
        return result
    except BaseException as exc:
        error = _error_text(exc)[:500]
        finished = services.now_ms()
        try:
            ImportBatch.objects.filter(pk=batch.pk, status=ImportBatch.Status.RUNNING).update(
                status=ImportBatch.Status.FAILED, error=error, finished_at=finished
            )
            jobs.job_fail(job_id=job_id, error=error, params=_public_params(params))
            services.emit_event("import_failed", {"batchId": batch.pk, "jobId": job_id, "error": error},
                                at=finished, stage="import")
        except DatabaseError:
            logger.exception("import_fail_record_failed job=%s", job_id)
        raise


def delete_batch_preview(batch_id: int) -> dict[str, Any]:
    """What :func:`delete_batch` would remove: the count and 5 samples (120-char prefixes)."""
    batch = ImportBatch.objects.filter(pk=batch_id).first()
    if batch is None:
        raise ImportBatchNotFoundError(f"import batch {batch_id} not found")
    rows = Knowledge.objects.filter(import_batch_id=batch_id)
    samples = [c[:PREVIEW_CHARS] for c in rows.order_by("id").values_list("content", flat=True)[:PREVIEW_SAMPLES]]
    return {"batch_id": batch.pk, "count": rows.count(), "samples": samples}


def delete_batch(batch_id: int, *, at: int | None = None) -> int:
    """Delete the knowledge rows of one import batch (one transaction); returns how many.

    Each row's stored ``tokens`` is fed back to the contentless FTS index as a
    ``'delete'``; the rows' association-graph nodes go too (their edges cascade).
    Rows of other batches and rows without a batch are never touched; the batch
    row itself is kept as history. Rerunning deletes nothing more.
    """
    if not ImportBatch.objects.filter(pk=batch_id).exists():
        raise ImportBatchNotFoundError(f"import batch {batch_id} not found")
    now = _now(at)
    with transaction.atomic():
        rows = list(Knowledge.objects.filter(import_batch_id=batch_id).values_list("id", "tokens"))
        ids = [row_id for row_id, _ in rows]
        for row_id, tokens in rows:
            if tokens:
                lexical.delete_row("knowledge_fts", row_id, tokens)
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            MemoryNode.objects.filter(ref_kind=MemoryNode.RefKind.KNOWLEDGE, ref_id__in=part).delete()
            Knowledge.objects.filter(pk__in=part, import_batch_id=batch_id).delete()
        services.emit_event("import_batch_deleted", {"batchId": batch_id, "deleted": len(ids)}, at=now,
                            stage="import")
    return len(ids)
