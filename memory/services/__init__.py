"""Writes of the memory layers. Each public function is one transaction.

Services take keyword-only arguments and the current time as ``at`` (epoch
milliseconds; :func:`now_ms` when omitted) so replays and tests are exact.
The FTS row of every new fact, cue and knowledge item is written here, in the
transaction of its row.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.db import IntegrityError, connection, transaction

from memory import backends
from memory.api.schemas import message_max_chars
from memory.dispatch import enqueue
from memory.engine import decay
from memory.engine.quantize import pack_float32, quantize_vector
from memory.engine.scope import upgraded_origin
from memory.engine.similarity import exact_key, is_same_fact
from memory.engine.tokenize import words
from memory.models import (
    Episode,
    EpisodeCue,
    Fact,
    FactOperation,
    FactState,
    Identity,
    Knowledge,
    KnowledgeNode,
    MemoryNode,
    Message,
    Person,
    PipelineEvent,
    Stream,
    StreamKind,
    VectorSpace,
)
from memory.search import lexical, read_ahead

logger = logging.getLogger(__name__)

REF_KINDS = tuple(MemoryNode.RefKind.values)


class MemoryInputError(ValueError):
    """Bad input from a caller (maps to HTTP 400/422)."""


class NotFound(LookupError):
    """A referenced row does not exist (maps to HTTP 404)."""


def now_ms() -> int:
    """The only clock read of the memory layer."""
    return int(time.time() * 1000)


def _at(at: int | None) -> int:
    return now_ms() if at is None else int(at)


# --- events -----------------------------------------------------------


def emit_event(
    kind: str,
    payload: dict[str, Any],
    *,
    at: int | None = None,
    stream_id: int | None = None,
    turn_id: int | None = None,
    stage: str = "",
) -> None:
    """Append one observation event to the ledger (``pipeline_events``).

    One plain INSERT (a turn writes two events): the payload adapted by the model's JSON field,
    as ``PipelineEvent.objects.create`` would, without its per-call query compilation.
    """
    value = _PAYLOAD_FIELD.get_db_prep_value(payload, connection)
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO pipeline_events (at, stream_id, turn_id, stage, kind, payload) VALUES (%s, %s, %s, %s, %s, %s)",
            [_at(at), stream_id, turn_id, stage, kind, value],
        )


_PAYLOAD_FIELD = PipelineEvent._meta.get_field("payload")


# --- persons and streams ---------------------------------------------------------


def _check_length(content: str) -> None:
    if len(content) > message_max_chars():
        raise MemoryInputError(f"content is longer than {message_max_chars()} characters")


def _one(sql: str, params: Sequence[Any]) -> tuple | None:
    """One row of a plain query: the hot look-ups of ingest skip the ORM's query compiler."""
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()


def _person_key(platform: str, external_id: str) -> tuple[str, str]:
    platform, external_id = platform.strip(), external_id.strip()
    if not platform or not external_id:
        raise MemoryInputError("person ref needs a platform and an external_id")
    return platform, external_id


def _stream_key(platform: str, kind: str, external_id: str) -> tuple[str, str]:
    if kind not in StreamKind.values:
        raise MemoryInputError(f"stream kind must be one of {', '.join(StreamKind.values)}")
    platform, external_id = platform.strip(), external_id.strip()
    if not platform or not external_id:
        raise MemoryInputError("stream ref needs a platform and an external_id")
    return platform, external_id


def resolve_person(*, platform: str, external_id: str, name: str = "", at: int | None = None) -> Person:
    """The person behind a platform identity, created on first use.

    A new non-empty ``name`` refreshes the identity's display name (and the
    person's, when it has none yet).
    """
    platform, external_id = _person_key(platform, external_id)
    row = _one(
        "SELECT p.id, p.kind, p.display_name, p.first_seen_at, i.id, i.display_name FROM identities i"
        " JOIN persons p ON p.id = i.person_id WHERE i.platform = %s AND i.external_id = %s",
        [platform, external_id],
    )
    if row is not None:
        person_id, kind, person_name, first_seen_at, identity_id, identity_name = row
        if name and identity_name != name:
            Identity.objects.filter(pk=identity_id).update(display_name=name)
            if not person_name:
                Person.objects.filter(pk=person_id).update(display_name=name)
                person_name = name
        return Person.from_db(
            "default", ["id", "kind", "display_name", "first_seen_at"], [person_id, kind, person_name, first_seen_at]
        )
    try:
        with transaction.atomic():
            person = Person.objects.create(kind="user", display_name=name, first_seen_at=_at(at))
            Identity.objects.create(person=person, platform=platform, external_id=external_id, display_name=name)
            return person
    except IntegrityError:  # created concurrently by another request
        return Identity.objects.get(platform=platform, external_id=external_id).person


def resolve_stream(*, platform: str, kind: str, external_id: str, name: str = "") -> Stream:
    """The stream of a platform conversation, created on first use."""
    platform, external_id = _stream_key(platform, kind, external_id)
    row = _one(
        "SELECT id, display_name FROM streams WHERE platform = %s AND kind = %s AND external_id = %s",
        [platform, kind, external_id],
    )
    if row is not None:
        stream_id, display_name = row
        if name and display_name != name:
            Stream.objects.filter(pk=stream_id).update(display_name=name)
            display_name = name
        return Stream.from_db(
            "default", ["id", "platform", "kind", "external_id", "display_name"],
            [stream_id, platform, kind, external_id, display_name],
        )
    try:
        with transaction.atomic():
            return Stream.objects.create(platform=platform, kind=kind, external_id=external_id, display_name=name)
    except IntegrityError:
        return Stream.objects.get(platform=platform, kind=kind, external_id=external_id)


def resolve_turn_refs(
    *, stream: dict[str, str], speaker: dict[str, str], watermark_message_id: int | None = None, at: int | None = None
) -> tuple[Stream | None, Person | None]:
    """The stream and speaker of a turn (:func:`resolve_stream`, :func:`resolve_person`), and whether
    ``watermark_message_id`` is a message of that stream: ``(None, None)`` when it is not (nothing
    is created then).

    One statement looks up both refs and the watermark; only a ref not found yet, or one whose
    display name changes, goes through its resolver (which creates or renames it).
    """
    platform, external_id = _stream_key(stream["platform"], stream["kind"], stream["external_id"])
    person_platform, person_external_id = _person_key(speaker["platform"], speaker["external_id"])
    row = _one(
        "SELECT s.id, s.display_name, p.id, p.kind, p.display_name, p.first_seen_at, i.display_name,"
        " (SELECT 1 FROM messages m WHERE m.id = %s AND m.stream_id = s.id)"
        " FROM (SELECT 1) AS one"
        " LEFT JOIN streams s ON s.platform = %s AND s.kind = %s AND s.external_id = %s"
        " LEFT JOIN identities i ON i.platform = %s AND i.external_id = %s"
        " LEFT JOIN persons p ON p.id = i.person_id",
        [watermark_message_id, platform, stream["kind"], external_id, person_platform, person_external_id],
    )
    stream_id, stream_name, person_id, kind, person_name, first_seen_at, identity_name, in_stream = row
    if watermark_message_id is not None and not in_stream:
        return None, None
    name = stream.get("name") or ""
    if stream_id is not None and (not name or name == stream_name):
        found = Stream.from_db("default", ["id", "platform", "kind", "external_id", "display_name"],
                               [stream_id, platform, stream["kind"], external_id, stream_name])
    else:
        found = resolve_stream(**stream)
    name = speaker.get("name") or ""
    if person_id is not None and (not name or name == identity_name):
        person = Person.from_db("default", ["id", "kind", "display_name", "first_seen_at"],
                                [person_id, kind, person_name, first_seen_at])
    else:
        person = resolve_person(**speaker, at=at)
    return found, person


# --- L1 messages -----------------------------------------------------------------


def _check_message(role: str, content: str, *, has_sender: bool) -> None:
    if role not in ("user", "assistant"):
        raise MemoryInputError("role must be 'user' or 'assistant'")
    if role == "user" and not has_sender:
        raise MemoryInputError("a user message needs its sender")
    _check_length(content)


def store_message(
    *,
    stream: dict[str, str],
    sender: dict[str, str] | None,
    role: str,
    content: str,
    external_message_id: str | None = None,
    at: int | None = None,
) -> tuple[Message, bool]:
    """A message posted with the platform refs of its stream and sender (``POST /messages``).

    The same as :func:`resolve_stream` (``stream``: its keyword arguments),
    :func:`resolve_person` (``sender``: its keyword arguments but ``at``; ``None`` for no
    sender) and :func:`append_message` in one transaction. On PostgreSQL, when both refs
    exist and neither display name changes (the usual message), one statement looks them up
    and stores the message: one round trip instead of six (BEGIN, two look-ups, the insert,
    COMMIT); otherwise, or when it finds a ref missing, the three functions run as before.
    """
    at = _at(at)
    if backends.is_postgresql():
        platform, external_id = _stream_key(stream["platform"], stream["kind"], stream["external_id"])
        stream_key = (platform, stream["kind"], external_id, stream.get("name") or "")
        sender_key = None
        if sender is not None:
            sender_key = (*_person_key(sender["platform"], sender["external_id"]), sender.get("name") or "")
        _check_message(role, content, has_sender=sender is not None)
        row = {"role": role, "content": content, "created_at": at, "external_message_id": external_message_id}
        stream_id, person_id, stored = backends.postgresql.store_message(stream_key, sender_key, row)
        if stored is not None:
            enqueue.stream_checks_on_commit(stream_id)  # outside a transaction: committed, runs now
            message = Message(id=stored[0], tokens=stored[1], stream_id=stream_id, sender_person_id=person_id, **row)
            message._state.adding, message._state.db = False, connection.alias
            return message, True
        if stream_id is not None and (sender is None or person_id is not None) and external_message_id is not None:
            # both refs found, nothing inserted: the stream holds this external id (as append_message returns it)
            return Message.objects.get(stream_id=stream_id, external_message_id=external_message_id), False
    with transaction.atomic():
        s = resolve_stream(**stream)
        person = resolve_person(**sender, at=at) if sender is not None else None
        return append_message(stream_id=s.pk, role=role, content=content,
                              sender_person_id=person.pk if person else None,
                              external_message_id=external_message_id, at=at)


def append_message(
    *,
    stream_id: int,
    role: str,
    content: str,
    sender_person_id: int | None = None,
    external_message_id: str | None = None,
    at: int | None = None,
) -> tuple[Message, bool]:
    """Store one inbound or outbound message synchronously.

    Posting the same ``(stream, external_message_id)`` again returns the stored
    row and ``created=False``; nothing is duplicated. After commit the stream's
    summarisation and extraction checks are enqueued.
    """
    _check_message(role, content, has_sender=sender_person_id is not None)
    row = {"role": role, "content": content, "created_at": _at(at), "stream_id": stream_id,
           "sender_person_id": sender_person_id, "external_message_id": external_message_id}
    if backends.is_postgresql():
        # One statement, its own transaction outside one: a single round trip to the server (SQLite's
        # path below would be nine: the look-up, BEGIN, five statements, COMMIT). A repeated
        # external id inserts nothing (ON CONFLICT) and the stored row is returned.
        stored = backends.postgresql.insert_message(row)
        if stored is None:
            return Message.objects.get(stream_id=stream_id, external_message_id=external_message_id), False
        enqueue.stream_checks_on_commit(stream_id)  # outside a transaction: committed, runs now
        message = Message(id=stored[0], tokens=stored[1], **row)
        message._state.adding, message._state.db = False, connection.alias
        return message, True
    if external_message_id is not None and _one(
        "SELECT 1 FROM messages WHERE stream_id = %s AND external_message_id = %s", [stream_id, external_message_id]
    ):
        return Message.objects.get(stream_id=stream_id, external_message_id=external_message_id), False
    try:
        with transaction.atomic():
            message = Message.objects.create(**row)
            message.tokens = lexical.index_messages([(message.pk, content, stream_id)])[0]
            enqueue.stream_checks_on_commit(stream_id)
    except IntegrityError:
        existing = Message.objects.filter(stream_id=stream_id, external_message_id=external_message_id).first()
        if existing is None:
            raise
        return existing, False
    return message, True


def update_message_content(*, message_id: int, content: str, stream_id: int | None = None) -> Message:
    """Fill a placeholder body later; the row keeps its arrival timestamp.

    One transaction: the content, its FTS row (re-indexed) and, when the text
    changed, the message vector cleared (the backfill recomputes it).
    """
    _check_length(content)
    with transaction.atomic():
        sql = "SELECT stream_id, tokens, content FROM messages WHERE id = %s"
        params: list[Any] = [message_id]
        if stream_id is not None:
            sql += " AND stream_id = %s"
            params.append(stream_id)
        row = _one(sql, params)
        if row is None:
            raise NotFound(f"message {message_id} not found")
        owner, old_tokens, old_content = row
        if content != old_content:
            with connection.cursor() as cur:
                cur.execute(
                    "UPDATE messages SET content = %s, embedding = NULL, embedding_q8 = NULL WHERE id = %s",
                    [content, message_id],
                )
            lexical.reindex_message(message_id, content, owner, old_tokens)
            enqueue.message_vector_on_commit()
    return Message.objects.get(pk=message_id)


# --- L2 episodes -----------------------------------------------------------------


def add_episode(
    *,
    stream_id: int,
    summary: str,
    cues: Iterable[str],
    started_at: int,
    ended_at: int,
    message_ids: Sequence[int],
    kind: str = Episode.Kind.CONVERSATION,
    source: str = "",
    at: int | None = None,
) -> Episode:
    """One transaction: the episode, its cues and their FTS rows, and the batch archived.

    There is never a state where the summary exists and its messages still look pending.
    """
    with transaction.atomic():
        episode = Episode.objects.create(
            stream_id=stream_id,
            kind=kind,
            summary=summary,
            started_at=started_at,
            ended_at=ended_at,
            created_at=_at(at),
            source=source,
        )
        for text in cues:
            text = (text or "").strip()
            if not text:
                continue
            cue = EpisodeCue.objects.create(episode=episode, cue=text)
            lexical.index_cue(cue.pk, text, stream_id)
        if message_ids:
            Message.objects.filter(stream_id=stream_id, id__in=list(message_ids)).update(episode=episode)
    return episode


# --- L3 facts --------------------------------------------------------------------


@dataclass
class FactWrite:
    fact_id: int
    created: bool = False
    conflict_with: list[int] = field(default_factory=list)
    superseded: int = 0
    origin_promoted: bool = False
    operation_id: int = 0


SIMILAR_CANDIDATES = 8  # the person's best-matching facts (bm25) a new fact is compared with


def _find_similar(person_id: int, content: str, key: str) -> Fact | None:
    exact = Fact.objects.filter(person_id=person_id, content_key=key).first()
    if exact is not None:
        return exact
    match = lexical.match_for("facts_fts", content)
    # When every match fits among the candidates, the candidates are all of them and their bm25 order only
    # decides between two that are both the same fact: the answer is known without ranking (and without
    # the document frequencies ranking reads, whose cost grows with the store) unless two are.
    matches = lexical.fact_matches(match, person_id=person_id, limit=SIMILAR_CANDIDATES)
    if matches is not None:
        same = [fact_id for fact_id, other in matches if is_same_fact(content, other)]
        if len(same) < 2:
            return Fact.objects.get(pk=same[0]) if same else None
    for fact_id, other in lexical.similar_fact_candidates(match, person_id=person_id, limit=SIMILAR_CANDIDATES):
        if is_same_fact(content, other):
            return Fact.objects.get(pk=fact_id)
    return None


def _apply_supersede(person_id: int, target: int, *, replaced_by: int) -> int:
    """Guarded supersede: same person, not already superseded, not itself."""
    if target == replaced_by:
        return 0
    updated = Fact.objects.valid().filter(pk=target, person_id=person_id).update(
        superseded_by=replaced_by
    )
    return target if updated == 1 else 0


def journal_operation(
    *, op: str, actor: str, person_id: int, fact_id: int, prev: dict[str, Any], at: int, user: str = "",
    related_fact_id: int | None = None, undo_of_id: int | None = None,
) -> FactOperation:
    """Append one row to the fact-operations journal; call inside the transaction of the change.

    ``prev`` holds the values the operation overwrote, so that undo can write them back.
    """
    return FactOperation.objects.create(
        at=at, actor=actor, op=op, person_id=person_id, fact_id=fact_id, related_fact_id=related_fact_id,
        prev=prev, user=user, undo_of_id=undo_of_id,
    )


def _log_supersede(
    *, actor: str, person_id: int, old_id: int, new_id: int, new_row_created: bool, at: int, user: str
) -> int:
    op = journal_operation(
        op=FactOperation.Op.REPLACE if actor == FactOperation.Actor.MANUAL else FactOperation.Op.SUPERSEDE,
        actor=actor, person_id=person_id, fact_id=old_id, related_fact_id=new_id,
        prev={"superseded_by": None, "new_row_created": new_row_created}, at=at, user=user,
    )
    return op.pk


def _conflicts_of(fact: Fact) -> list[int]:
    if not fact.slot:
        return []
    return list(
        Fact.objects.in_state(FactState.ACTIVE).filter(person_id=fact.person_id, slot=fact.slot)
        .exclude(pk=fact.pk)
        .order_by("id")
        .values_list("id", flat=True)
    )


def add_fact(
    *,
    person_id: int,
    content: str,
    kind: str = "未分类",
    slot: str = "",
    supersedes: int = 0,
    origin_kind: str = "legacy",
    actor: str = "auto",
    source: str = "",
    user: str = "",
    at: int | None = None,
    source_message_id: int | None = None,
) -> FactWrite:
    """Remember a fact about a person (one transaction).

    ``source_message_id`` — the message it was heard in (the ranking's "where it was told",
    memory/selectors/told.py): a new fact records it; a reinforced one keeps the message it was
    first heard in, or takes this one when it had none.

    1. A similar fact of the same person (exact key, then FTS + char/bigram
       Jaccard) is reinforced instead of duplicated; its origin may only be
       promoted ``direct → group``.
    2. Otherwise a new row is written with its FTS row; slot conflicts with
       other active facts of the same slot are reported, never resolved.
    3. An explicit ``supersedes`` is applied only when the target is the same
       person's, not already superseded and not the fact itself; it is logged
       in the operation journal and can be undone.
    """
    at = _at(at)
    content = (content or "").strip()
    key = exact_key(content)
    if not content or not key:
        return FactWrite(fact_id=0)
    slot = (slot or "").strip()
    supersedes = supersedes if isinstance(supersedes, int) and supersedes > 0 else 0
    with transaction.atomic():
        with connection.cursor() as cur:  # two writers must not both miss each other's similar fact
            backends.lock_key(cur, backends.LOCK_PERSON_FACTS, person_id)
        existing = _find_similar(person_id, content, key)
        if existing is not None:
            nxt = decay.reinforce(existing.retention_at(at))
            promoted = upgraded_origin(existing.origin_kind, origin_kind)
            Fact.objects.filter(pk=existing.pk).update(
                strength=nxt,
                updated_at=at,
                due_at=decay.freeze_due_at(nxt, at, existing.half_life_hours),
                active=True,
                hit_count=existing.hit_count + 1,
                origin_kind=promoted,
                **({"source_message_id": source_message_id}
                   if source_message_id and existing.source_message_id is None else {}),
            )
            write = FactWrite(fact_id=existing.pk, origin_promoted=promoted != existing.origin_kind)
            if supersedes:
                write.superseded = _apply_supersede(person_id, supersedes, replaced_by=existing.pk)
                if write.superseded:
                    write.operation_id = _log_supersede(
                        actor=actor, person_id=person_id, old_id=supersedes, new_id=existing.pk,
                        new_row_created=False, at=at, user=user,
                    )
            return write
        half_life = decay.half_life_for(kind)
        fact = Fact.objects.create(
            person_id=person_id,
            kind=kind or "未分类",
            content=content,
            content_key=key,
            strength=1.0,
            half_life_hours=half_life,
            updated_at=at,
            created_at=at,
            due_at=decay.freeze_due_at(1.0, at, half_life),
            active=True,
            slot=slot,
            origin_kind=origin_kind,
            source=source[:120],
            source_message_id=source_message_id or None,
        )
        lexical.index_fact(fact.pk, content, person_id)
        enqueue.vector_backfill_on_commit()  # text first, vector soon after
        write = FactWrite(fact_id=fact.pk, created=True)
        if supersedes:
            write.superseded = _apply_supersede(person_id, supersedes, replaced_by=fact.pk)
            if write.superseded:
                write.operation_id = _log_supersede(
                    actor=actor, person_id=person_id, old_id=supersedes, new_id=fact.pk,
                    new_row_created=True, at=at, user=user,
                )
        write.conflict_with = _conflicts_of(fact)
    return write


def reinforcement(facts: Sequence[Any], at: int) -> list[tuple[int, int, float, int]]:
    """What reinforcing ``facts`` at ``at`` writes, in their order (each fact once): ``(fact id,
    person id, new strength, new due_at)``, the strength ``reinforce(retention at recall time)``."""
    values = []
    for fact in dict((f.id, f) for f in facts).values():
        nxt = decay.reinforce(fact.retention)
        values.append((int(fact.id), int(fact.person_id), nxt, decay.freeze_due_at(nxt, at, fact.half_life_hours)))
    return values


def reinforce_recalled_facts(*, facts: Sequence[Any], at: int | None = None) -> list[int]:
    """Reinforce exactly the facts that entered a prompt (one statement); the ids reinforced, in order.

    Each fact's new strength is ``reinforce(retention at recall time)``; a frozen
    fact becomes active again (any reinforcement lands above REVIVE). A fact is
    reinforced only while it still belongs to the person it was recalled for.
    """
    at = _at(at)
    values = reinforcement(facts, at)
    if not values:
        return []
    # VALUES names its columns column1…column4 on both backends
    rows = ",".join(["(%s, %s, %s, %s)"] * len(values))
    with transaction.atomic(savepoint=False), connection.cursor() as cur:
        cur.execute(
            "UPDATE facts SET strength = v.column3, updated_at = %s, due_at = v.column4, active = TRUE,"
            f" hit_count = hit_count + 1, last_hit_at = %s FROM (VALUES {rows}) AS v"
            " WHERE facts.id = v.column1 AND facts.person_id = v.column2 RETURNING facts.id",
            [at, at, *(x for row in values for x in row)],
        )
        done = {int(r[0]) for r in cur.fetchall()}
    return [fact_id for fact_id, *_ in values if fact_id in done]


SWEEP_BATCH = 1000  # due facts read at a time


def sweep(*, at: int | None = None, once: bool = False) -> int:
    """Freeze active facts whose retention fell below FREEZE; the number frozen.

    Reads only ``active AND due_at <= now`` through ``idx_facts_due``, soonest due first,
    ``SWEEP_BATCH`` rows at a time until none is left; ``once``: one batch (a turn's sweep:
    its cost stays bounded after a long pause, the rest goes to the next turn or the
    periodic sweep). Rows still a hair above the threshold (``due_at`` is truncated to the
    ms) are left for a later sweep. A due row whose retention is well above the threshold
    (its ``due_at`` written by other hands: an import, a hand edit) gets the instant
    its state gives, so it is read once, not by every turn. The read runs outside a
    transaction and a write transaction opens only when something changes (a
    turn's sweep usually finds nothing and takes no write lock); the updates
    re-check ``due_at``, so a fact reinforced in between (its ``due_at`` moved on)
    is left as it is.
    """
    at = _at(at)
    if once:  # a turn's: read with the turn's other reads (memory.search.read_ahead.one_state)
        return _sweep_batch(at, read_ahead.read(due_facts_read(at)))[0]
    total = 0
    while True:
        with connection.cursor() as cur:
            read = due_facts_read(at)
            cur.execute(read.sql, read.params)
            frozen, changed, full = _sweep_batch(at, cur.fetchall())
        total += frozen
        if not full or not changed:
            return total


def due_facts_read(at: int) -> read_ahead.Read:
    """The first ``SWEEP_BATCH`` active facts due at ``at``, soonest first (:func:`sweep`)."""
    return read_ahead.Read(
        ("due_facts", at, SWEEP_BATCH),
        # the index order and the LIMIT keep both planners on idx_facts_due: ``active = TRUE``, not a bare
        # ``active`` (SQLite would skip-scan both halves of the index, every frozen fact's past due_at), and
        # PostgreSQL, which cannot know that the due rows are the frozen ones, would estimate a quarter of
        # the table and scan all of it without the LIMIT
        "SELECT id, strength, updated_at, half_life_hours, due_at FROM facts WHERE active = TRUE AND due_at <= %s"
        " ORDER BY active, due_at LIMIT %s",
        [at, SWEEP_BATCH],
    )


def _sweep_batch(at: int, due: Sequence[tuple]) -> tuple[int, bool, bool]:
    """One batch of :func:`sweep` (``due``: :func:`due_facts_read`'s rows): ``(frozen, anything changed,
    the batch was full)``."""
    frozen, misdated = [], []
    for fact_id, strength, updated_at, half_life, due_at in due:
        state = decay.evaluate(decay.DecayState(strength, updated_at, half_life, True), at)
        if not state.active:
            frozen.append(fact_id)
        elif state.due_at > at:
            misdated.append((state.due_at, fact_id, due_at))
    full = len(due) == SWEEP_BATCH
    if not frozen and not misdated:
        return 0, False, full
    with transaction.atomic(), connection.cursor() as cur:
        if misdated:
            cur.executemany("UPDATE facts SET due_at = %s WHERE id = %s AND active AND due_at = %s", misdated)
        if not frozen:
            return 0, True, full
        cur.execute(
            f"UPDATE facts SET active = FALSE WHERE id IN ({backends.in_placeholders(frozen)}) AND active AND due_at <= %s",
            [*frozen, at],
        )
        return cur.rowcount, True, full


# --- knowledge ---------------------------------------------------------------------


def add_knowledge(*, content: str, source: str, at: int | None = None, batch_id: int | None = None) -> int:
    """Store a knowledge item (deduplicated by ``content_key``) and index it at once.

    Returns the id of the new or the existing row; 0 for blank or punctuation-only content.
    """
    text = (content or "").strip()
    key = exact_key(text)
    if not text or not key:
        return 0
    existing = Knowledge.objects.filter(content_key=key).values_list("id", flat=True).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            item = Knowledge.objects.create(
                content=text, content_key=key, source=source, created_at=_at(at), import_batch_id=batch_id
            )
            lexical.index_row("knowledge_fts", item.pk, text)  # also stores the row's tokens
            enqueue.vector_backfill_on_commit()
    except IntegrityError:
        return Knowledge.objects.get(content_key=key).pk
    _note_concepts(text, at=_at(at))
    return item.pk


def _note_concepts(text: str, *, at: int) -> None:
    """Grow the concept graph: keywords of a knowledge item co-occur pairwise."""
    concepts = []
    for word in words(text):
        if len(word) >= 2 and word not in concepts:
            concepts.append(word)
    concepts = concepts[:8]
    if len(concepts) < 2:
        return
    with transaction.atomic():
        ids = []
        for concept in concepts:
            node, _ = KnowledgeNode.objects.get_or_create(concept=concept, defaults={"created_at": at})
            ids.append(node.pk)
        with connection.cursor() as cur:
            for i, a in enumerate(ids):
                for b in ids[i + 1:]:
                    low, high = min(a, b), max(a, b)
                    cur.execute(
                        "INSERT INTO knowledge_edges(source_id, target_id, strength, updated_at)"
                        " VALUES (%s, %s, 1.0, %s) ON CONFLICT(source_id, target_id)"
                        " DO UPDATE SET strength = knowledge_edges.strength + 1, updated_at = excluded.updated_at",
                        [low, high, at],
                    )
            bump_revision(cur, CONCEPT_GRAPH_REVISION)


CONCEPT_GRAPH_REVISION = "concept_graph_revision"


def bump_revision(cur: Any, key: str) -> None:
    """Set a meta revision to ``<counter + 1>-<random>`` (never equal to an earlier value)."""
    backends.bump_revision(cur, key)


def touch_knowledge(*, ids: Iterable[int], at: int | None = None) -> None:
    unique = list(dict.fromkeys(ids))
    if not unique:
        return
    at = _at(at)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE knowledge SET hit_count = hit_count + 1, last_hit_at = %s"
            f" WHERE id IN ({backends.in_placeholders(unique)})",
            [at, *unique],
        )


# --- vectors ---------------------------------------------------------------------------


def vector_pair(vector: Any) -> tuple[bytes, bytes]:
    """A vector as stored: its raw float32 bytes and its SQ8 form (validated: finite, non-empty)."""
    vec = np.asarray(vector, dtype=np.float32).ravel()
    q8 = quantize_vector(vec)  # validates (finite, non-empty) before anything is written
    return pack_float32(vec), q8


def store_fact_vector(*, fact_id: int, vector: Any) -> None:
    """Write the raw float32 vector and its SQ8 form in one UPDATE."""
    raw, q8 = vector_pair(vector)
    with connection.cursor() as cur:
        cur.execute("UPDATE facts SET embedding = %s, embedding_q8 = %s WHERE id = %s", [raw, q8, fact_id])


def store_knowledge_vector(*, knowledge_id: int, vector: Any) -> None:
    """Write the raw float32 vector and its SQ8 form in one UPDATE (bumps the index revision)."""
    raw, q8 = vector_pair(vector)
    with connection.cursor() as cur:
        cur.execute("UPDATE knowledge SET embedding = %s, embedding_q8 = %s WHERE id = %s", [raw, q8, knowledge_id])


def store_message_vector(*, message_id: int, vector: Any) -> None:
    """Write a message's raw float32 vector and its SQ8 form in one UPDATE."""
    raw, q8 = vector_pair(vector)
    with connection.cursor() as cur:
        cur.execute("UPDATE messages SET embedding = %s, embedding_q8 = %s WHERE id = %s", [raw, q8, message_id])


VECTOR_TABLES = {"facts": "facts", "knowledge": "knowledge", "messages": "messages"}


def reconcile_vector_space(
    *, consumer: str, model: str, api_format: str, dim: int, recipe: str = "content", at: int | None = None
) -> int:
    """Register the embedding space of a consumer; a change clears its vectors.

    First registration keeps existing vectors; an identical space returns 0; a
    changed model/format/dimension/recipe clears every stored vector of that
    table in one transaction (the backfill then recomputes them).
    """
    table = VECTOR_TABLES.get(consumer)
    if table is None:
        raise MemoryInputError(f"unknown vector consumer {consumer!r}")
    at = _at(at)
    with transaction.atomic():
        current = VectorSpace.objects.filter(consumer=consumer).first()
        wanted = {"model": model, "api_format": api_format, "dim": dim, "recipe": recipe}
        if current is None:
            VectorSpace.objects.create(consumer=consumer, updated_at=at, **wanted)
            return 0
        if all(getattr(current, k) == v for k, v in wanted.items()):
            return 0
        with connection.cursor() as cur:
            cur.execute(
                f"UPDATE {table} SET embedding = NULL, embedding_q8 = NULL"
                " WHERE embedding IS NOT NULL OR embedding_q8 IS NOT NULL"
            )
            cleared = cur.rowcount
        VectorSpace.objects.filter(consumer=consumer).update(updated_at=at, **wanted)
    return cleared


# --- association --------------------------------------------------------------------------


def _node_ids(refs: Sequence[tuple[str, int]]) -> list[int]:
    ids = []
    for kind, ref_id in refs:
        if kind not in REF_KINDS:
            raise MemoryInputError(f"unknown memory layer {kind!r}")
        node, _ = MemoryNode.objects.get_or_create(ref_kind=kind, ref_id=ref_id)
        ids.append(node.pk)
    return ids


def link_together(*, refs: Iterable[tuple[str, int]], at: int | None = None) -> int:
    """Reinforce the co-activation edge of every pair of items lit together.

    Edges are stored once per pair (smaller node id first); a new edge starts at
    0.35, an existing one is reinforced from its stored strength and re-activated.
    Returns the number of pairs (n·(n−1)/2 of the distinct refs).
    """
    unique = list(dict.fromkeys((kind, int(ref)) for kind, ref in refs))
    if len(unique) < 2:
        return 0
    at = _at(at)
    with transaction.atomic():
        nodes = _node_ids(unique)
        pairs = 0
        with connection.cursor() as cur:
            for i, a in enumerate(nodes):
                for b in nodes[i + 1:]:
                    if a == b:
                        continue
                    low, high = min(a, b), max(a, b)
                    cur.execute("SELECT strength FROM memory_edges WHERE source_id = %s AND target_id = %s", [low, high])
                    row = cur.fetchone()
                    if row is None:
                        cur.execute(
                            "INSERT INTO memory_edges(source_id, target_id, strength, updated_at, active)"
                            " VALUES (%s, %s, %s, %s, TRUE)",
                            [low, high, decay.BOOST, at],
                        )
                    else:
                        cur.execute(
                            "UPDATE memory_edges SET strength = %s, updated_at = %s, active = TRUE"
                            " WHERE source_id = %s AND target_id = %s",
                            [decay.reinforce(row[0]), at, low, high],
                        )
                    pairs += 1
    return pairs


EDGE_DECAY_CHUNK = 20_000  # edge ids per UPDATE: the write lock is held ~0.1 s at a time, not for the whole table


def decay_edges(*, at: int | None = None) -> int:
    """Freeze active edges whose retention (720 h half-life) fell below FREEZE; never deletes.

    Set-based: an UPDATE evaluates ``strength · 2^(−hours/720) < 0.1`` in SQL, which
    is equivalent to ``updated_at < now − 720·log2(strength/0.1)·H``, over one range of
    :data:`EDGE_DECAY_CHUNK` edge ids at a time, each its own transaction, so that the
    bot's writes can slip in between on a large graph.
    """
    at = _at(at)
    frozen = 0
    with connection.cursor() as cur:
        cur.execute("SELECT min(id), max(id) FROM memory_edges WHERE active")
        low, high = cur.fetchone()
        for start in range(low or 0, (high or -1) + 1, EDGE_DECAY_CHUNK):
            with transaction.atomic():
                cur.execute(
                    "UPDATE memory_edges SET active = FALSE WHERE id BETWEEN %s AND %s AND active AND ("
                    f" strength < %s OR (%s - updated_at) > %s * {backends.log2_sql('strength / %s')} * %s)",
                    [start, start + EDGE_DECAY_CHUNK - 1, decay.FREEZE, at, decay.EDGE_HALF_LIFE_HOURS, decay.FREEZE,
                     decay.MS_PER_HOUR],
                )
                frozen += cur.rowcount
    emit_event("edges_decayed", {"frozen": frozen}, at=at)
    return frozen
