"""Forgetting on request: a cascade preview, then one transaction that removes it all.

A target is one message, fact or episode, a person (every message they sent, every
fact about them, their identities, their turn traces) or a stream (its messages,
episodes, turns, events, and the facts extracted in it). :func:`plan_forget` lists
what goes and what is touched; :func:`forget` recomputes the same plan inside one
write transaction, refuses to run when it differs from the previewed one
(``expected_digest``), and carries it out. It is journalled in ``forget_log`` (who,
when, counts — never the text) and cannot be undone.

What counts as holding the forgotten text:

- **links**: a message's episode; facts heard in it (``Fact.source_message``: the extractor
  records it, a bot may pass it), whoever they are about; facts of the sender whose text is
  contained in the message (what extraction keeps of it); for a stream the facts extracted in it
  (``source = extract:stream<id>``); journal rows, graph nodes and turn-pool entries
  of forgotten facts; events naming a forgotten fact;
- **quotes**: anything containing one of the forgotten messages' *fragments* — the
  whole text and each sentence of at least ``MIN_QUOTE`` characters: other messages
  (the quote is replaced by ``REDACTED``), facts and knowledge (deleted), episode
  summaries (redacted), cues (deleted), turn traces (deleted), pipeline events
  (deleted), journal snapshots (``prev`` redacted).

What holds it *derived* (checked by ``tests/memory/test_forget_schema.py``, which reads every
table and text column of the schema for the forgotten words and their index tokens):

- **the change log**: the ``messages`` triggers write a deleted or edited message's index
  tokens (``memory_changes.old_tokens``, migration 0025) — enough to rebuild the sentence.
  Every change row of a forgotten or redacted message is deleted and the messages' lexical
  revision bumped, so every process's resident message statistics and per-stream postings
  reload instead of reading the log (a reload, not a wrong count);
- **job reports**: evaluation, comparison and fit reports quote each turn's text: entries of
  deleted turns lose it, and quotes are redacted anywhere in a job's params, result and error;
- **the admin's history** (``django_admin_log``): entries about deleted rows, or quoting the text, go;
- **Redis**: the shared short-term activation forgets the deleted graph nodes (after the commit).

A fact that records no source message and paraphrases the text cannot be linked to it; forget the
fact itself or the person. An episode that loses only some of its messages keeps its row (the
remaining messages stay archived in it) but its summary is replaced by
``REDACTED_SUMMARY``, it becomes a placeholder (hidden from recall) and loses all its
cues. Every FTS row goes through :mod:`memory.search.lexical`, whose ``purge_deleted`` then
rewrites the touched FTS tables so the terms leave the file; ``secure_delete`` zeroes
the freed pages. Resident indexes see the deletions through their revision triggers.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import DatabaseError, connection, models, transaction
from django.db.models import F, Q

from memory import backends, services
from memory.dispatch.triggers import read_cursor
from memory.meta import meta_get, meta_set
from memory.models import (
    EXTRACT_CURSOR_KEY,
    Episode,
    EpisodeCue,
    Fact,
    FactOperation,
    ForgetRecord,
    Identity,
    Job,
    Knowledge,
    MemoryEdge,
    MemoryNode,
    Message,
    Person,
    PipelineEvent,
    QueueFailure,
    Stream,
    Turn,
)
from memory.search import lexical
from memory.search.activation import activation
from memory.search.lexical_index import MESSAGE_REVISION_KEY

logger = logging.getLogger(__name__)

TARGETS = tuple(ForgetRecord.Target.values)
MIN_QUOTE = 6  # characters: shorter sentences are too common to count as a quote
MIN_EXTRACTED = 2  # a sender's fact contained in the message counts as extracted from it
REDACTED = "〔已遗忘〕"
REDACTED_SUMMARY = "〔这一段对话含有应要求遗忘的内容，摘要已删除〕"
CHUNK = 500


def _turn_fields(*names: str) -> tuple[str, ...]:
    present = {f.name for f in Turn._meta.get_fields()}
    return tuple(name for name in names if name in present)


#: id lists of a turn trace that name facts / messages: forgotten ids are removed from them
#: (``held_back_fact_ids`` and ``context_message_ids`` are recorded once the turn keeps them)
TURN_FACT_LISTS = _turn_fields("prompt_fact_ids", "reinforced_fact_ids", "held_back_fact_ids")
TURN_MESSAGE_LISTS = _turn_fields("context_message_ids")

_SENTENCE = re.compile(r"[。！？!?；;\n\r]+")
_TRIM = " \t\u3000，,、：:\"'“”‘’…—-()（）[]【】<>《》"


class ForgetTargetNotFound(LookupError):
    """The message, fact, episode, person or stream does not exist."""


class ForgetRefused(Exception):
    """A target that cannot be forgotten (the bot's owner person)."""


class ForgetPlanChanged(Exception):
    """The memory changed between the preview and the confirmation; preview again."""


def quote_fragments(text: str) -> list[str]:
    """The pieces of ``text`` whose presence elsewhere counts as quoting it."""
    text = (text or "").strip()
    pieces = [text, *(p.strip(_TRIM) for p in _SENTENCE.split(text))]
    return list(dict.fromkeys(p for p in pieces if len(p) >= MIN_QUOTE))


@dataclass
class ForgetPlan:
    """What a forgetting removes (deleted) and touches (redacted/trimmed), by id."""

    target: str
    target_id: int
    label: str = ""
    messages: list[int] = field(default_factory=list)  # deleted
    redacted_messages: list[int] = field(default_factory=list)  # other messages: quotes replaced
    facts: list[int] = field(default_factory=list)  # deleted
    invalidated_facts: list[int] = field(default_factory=list)  # superseded by a forgotten fact: invalidated
    episodes: list[int] = field(default_factory=list)  # deleted (every message forgotten)
    redacted_episodes: list[int] = field(default_factory=list)  # summary replaced, cues deleted
    cues: list[int] = field(default_factory=list)  # deleted
    knowledge: list[int] = field(default_factory=list)  # deleted
    nodes: list[int] = field(default_factory=list)  # graph nodes deleted
    edges: list[int] = field(default_factory=list)  # graph edges deleted with them
    turns: list[int] = field(default_factory=list)  # turn traces deleted
    trimmed_turns: list[int] = field(default_factory=list)  # forgotten fact ids removed from their pools
    events: list[int] = field(default_factory=list)  # pipeline events deleted
    operations: list[int] = field(default_factory=list)  # journal rows of forgotten facts deleted
    redacted_operations: list[int] = field(default_factory=list)  # snapshots redacted / links cleared
    identities: list[int] = field(default_factory=list)
    persons: list[int] = field(default_factory=list)
    streams: list[int] = field(default_factory=list)
    queue_failures: list[int] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)  # job reports: deleted turns' texts and quotes redacted
    admin_entries: list[int] = field(default_factory=list)  # the admin's history of deleted rows / quoting it
    # rows of other apps' tables that reference a deleted fact or turn (table → ids): they go with it
    dependents: dict[str, list[int]] = field(default_factory=dict)
    vectors: int = 0  # stored vectors removed (deleted or redacted rows)
    fts_rows: int = 0  # lexical index rows removed (redacted messages are re-indexed)
    fragments: list[str] = field(default_factory=list, repr=False)

    @property
    def id_fields(self) -> list[str]:
        return [f.name for f in fields(self) if isinstance(getattr(self, f.name), list) and f.name != "fragments"]

    def counts(self) -> dict[str, int]:
        out = {name: len(getattr(self, name)) for name in self.id_fields}
        out.update({table: len(ids) for table, ids in sorted(self.dependents.items())})
        out.update(vectors=self.vectors, fts_rows=self.fts_rows)
        return out

    def digest(self) -> str:
        ids = {name: sorted(getattr(self, name)) for name in self.id_fields}
        ids.update({f"dependents:{table}": sorted(rows) for table, rows in self.dependents.items()})
        raw = json.dumps([self.target, self.target_id, ids], sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _chunks(ids: Sequence[int]) -> Iterator[list[int]]:
    ids = list(ids)
    for start in range(0, len(ids), CHUNK):
        yield ids[start:start + CHUNK]


def _delete(model: type[models.Model], ids: Sequence[int]) -> None:
    """Delete the rows of ``model`` with these ids, in chunks."""
    for chunk in _chunks(ids):
        model.objects.filter(pk__in=chunk).delete()


def _ids(model: Any, ids: Iterable[int]) -> Iterator[Any]:
    """Rows of ``model`` with these ids, in chunks (SQLite bounds the parameters of a statement)."""
    for chunk in _chunks(sorted(set(ids))):
        yield from model.objects.filter(pk__in=chunk)


def _quote_pattern(fragments: Sequence[str]) -> re.Pattern[str] | None:
    if not fragments:
        return None
    return re.compile("|".join(re.escape(f) for f in sorted(fragments, key=len, reverse=True)))


def _target_rows(plan: ForgetPlan) -> tuple[set[int], set[int], set[int]]:
    """The explicit message, fact and episode ids of the target (before links and quotes)."""
    target, pk = plan.target, plan.target_id
    messages: set[int] = set()
    facts: set[int] = set()
    episodes: set[int] = set()
    if target == "message":
        row = Message.objects.filter(pk=pk).only("id", "stream_id").first()
        if row is None:
            raise ForgetTargetNotFound(f"message {pk} does not exist")
        messages.add(pk)
        plan.label = f"消息 #{pk}"
    elif target == "fact":
        if not Fact.objects.filter(pk=pk).exists():
            raise ForgetTargetNotFound(f"fact {pk} does not exist")
        facts.add(pk)
        plan.label = f"事实 #{pk}"
    elif target == "episode":
        if not Episode.objects.filter(pk=pk).exists():
            raise ForgetTargetNotFound(f"episode {pk} does not exist")
        episodes.add(pk)
        messages.update(Message.objects.filter(episode_id=pk).values_list("id", flat=True))
        plan.label = f"片段 #{pk}"
    elif target == "person":
        person = Person.objects.filter(pk=pk).first()
        if person is None:
            raise ForgetTargetNotFound(f"person {pk} does not exist")
        if person.kind == "owner":
            raise ForgetRefused("the bot's owner person cannot be forgotten")
        messages.update(Message.objects.filter(sender_person_id=pk).values_list("id", flat=True))
        facts.update(Fact.objects.filter(person_id=pk).values_list("id", flat=True))
        plan.identities = list(Identity.objects.filter(person_id=pk).order_by("id").values_list("id", flat=True))
        plan.persons = [pk]
        plan.label = f"人物 #{pk} {person.display_name}".strip()
    elif target == "stream":
        stream = Stream.objects.filter(pk=pk).first()
        if stream is None:
            raise ForgetTargetNotFound(f"stream {pk} does not exist")
        messages.update(Message.objects.filter(stream_id=pk).values_list("id", flat=True))
        episodes.update(Episode.objects.filter(stream_id=pk).values_list("id", flat=True))
        facts.update(Fact.objects.filter(source=f"extract:stream{pk}").values_list("id", flat=True))
        plan.streams = [pk]
        plan.queue_failures = list(QueueFailure.objects.filter(stream_id=pk).values_list("id", flat=True))
        plan.label = f"会话 #{pk} {stream}"
    else:
        raise ValueError(f"unknown forget target {target!r}; choose from {', '.join(TARGETS)}")
    return messages, facts, episodes


def plan_forget(*, target: str, target_id: int) -> ForgetPlan:
    """The cascade preview: exactly what :func:`forget` would delete and touch now (read-only)."""
    plan = ForgetPlan(target=target, target_id=int(target_id))
    messages, facts, episodes = _target_rows(plan)

    # The forgotten messages' text: their fragments, and the sender's facts they contain.
    texts: dict[int, tuple[str, int | None]] = {}
    for chunk in _chunks(sorted(messages)):
        for mid, content, sender in Message.objects.filter(pk__in=chunk).values_list(
            "id", "content", "sender_person_id"
        ):
            texts[mid] = (content, sender)
    plan.fragments = list(dict.fromkeys(f for content, _ in texts.values() for f in quote_fragments(content)))
    senders = {sender for _, sender in texts.values() if sender}
    if senders:
        by_sender: dict[int, list[str]] = {}
        for content, sender in texts.values():
            if sender:
                by_sender.setdefault(sender, []).append(content)
        for fid, pid, content in Fact.objects.filter(person_id__in=senders).values_list("id", "person_id", "content"):
            text = content.strip()
            if len(text) >= MIN_EXTRACTED and any(text in said for said in by_sender[pid]):
                facts.add(fid)

    # Facts heard in a forgotten message (the extractor's or the bot's source_message_id), whoever they are about.
    for chunk in _chunks(sorted(messages)):
        facts.update(Fact.objects.filter(source_message_id__in=chunk).values_list("id", flat=True))

    # Episodes of forgotten messages: deleted when every message goes, else redacted.
    redacted_episodes: set[int] = set()
    touched = set()
    for chunk in _chunks(sorted(messages)):
        touched.update(Message.objects.filter(pk__in=chunk, episode_id__isnull=False).values_list("episode_id", flat=True))
    for eid in touched - episodes:
        remaining = Message.objects.filter(episode_id=eid).values_list("id", flat=True)
        if set(remaining) <= messages:
            episodes.add(eid)
        else:
            redacted_episodes.add(eid)

    # Quotes anywhere else.
    pattern = _quote_pattern(plan.fragments)
    redacted_messages: list[int] = []
    cues: set[int] = set()
    knowledge: set[int] = set()
    if pattern is not None:
        for mid, content in Message.objects.values_list("id", "content").iterator(chunk_size=2000):
            if mid not in messages and pattern.search(content):
                redacted_messages.append(mid)
        for fid, content in Fact.objects.values_list("id", "content").iterator(chunk_size=2000):
            if fid not in facts and pattern.search(content):
                facts.add(fid)
        for eid, summary in Episode.objects.values_list("id", "summary").iterator(chunk_size=2000):
            if eid not in episodes and pattern.search(summary):
                redacted_episodes.add(eid)
        for cid, cue in EpisodeCue.objects.values_list("id", "cue").iterator(chunk_size=2000):
            if pattern.search(cue):
                cues.add(cid)
        for kid, content in Knowledge.objects.values_list("id", "content").iterator(chunk_size=2000):
            if pattern.search(content):
                knowledge.add(kid)
    cues.update(EpisodeCue.objects.filter(episode_id__in=episodes | redacted_episodes).values_list("id", flat=True))

    # Traces, events and the journal.
    turns: list[int] = []
    trimmed: list[int] = []
    person = plan.target_id if plan.target == "person" else None
    stream = plan.target_id if plan.target == "stream" else None
    for tid, text, impression, speaker, sid, pool, *lists in Turn.objects.values_list(
        "id", "text", "impression", "speaker_id", "stream_id", "pool", *TURN_FACT_LISTS, *TURN_MESSAGE_LISTS
    ).iterator(chunk_size=2000):
        fact_lists, message_lists = lists[:len(TURN_FACT_LISTS)], lists[len(TURN_FACT_LISTS):]
        if speaker == person or sid == stream or (pattern is not None and pattern.search(f"{text}\n{impression}")):
            turns.append(tid)
        elif (_pool_ids(pool) & facts or any(set(ids or []) & facts for ids in fact_lists)
              or any(set(ids or []) & messages for ids in message_lists)):
            trimmed.append(tid)
    events: list[int] = []
    for seq, sid, payload in PipelineEvent.objects.values_list("seq", "stream_id", "payload").iterator(chunk_size=2000):
        if sid is not None and sid == stream:
            events.append(seq)
            continue
        if _names_any(payload, facts, person) or (
            pattern is not None and pattern.search(json.dumps(payload, ensure_ascii=False))
        ):
            events.append(seq)
    operations: list[int] = []
    redacted_operations: list[int] = []
    for oid, fid, related, prev in FactOperation.objects.values_list("id", "fact_id", "related_fact_id", "prev"):
        if fid in facts:
            operations.append(oid)
        elif related in facts or (pattern is not None and pattern.search(json.dumps(prev, ensure_ascii=False))):
            redacted_operations.append(oid)

    plan.messages = sorted(messages)
    plan.redacted_messages = sorted(redacted_messages)
    plan.facts = sorted(facts)
    plan.invalidated_facts = sorted(
        fid for chunk in _chunks(sorted(facts))
        for fid in Fact.objects.filter(superseded_by_id__in=chunk).values_list("id", flat=True)
        if fid not in facts
    )
    plan.episodes = sorted(episodes)
    plan.redacted_episodes = sorted(redacted_episodes - episodes)
    plan.cues = sorted(cues)
    plan.knowledge = sorted(knowledge)
    kinds = MemoryNode.RefKind
    refs = Q(ref_kind=kinds.FACT, ref_id__in=plan.facts) | Q(ref_kind=kinds.EPISODE, ref_id__in=plan.episodes)
    refs |= Q(ref_kind=kinds.KNOWLEDGE, ref_id__in=plan.knowledge)
    plan.nodes = sorted(MemoryNode.objects.filter(refs).values_list("id", flat=True))
    plan.edges = sorted(
        MemoryEdge.objects.filter(Q(source_id__in=plan.nodes) | Q(target_id__in=plan.nodes)).values_list("id", flat=True)
    )
    plan.turns = sorted(turns)
    plan.trimmed_turns = sorted(trimmed)
    plan.events = sorted(events)
    plan.operations = sorted(operations)
    plan.redacted_operations = sorted(redacted_operations)
    plan.dependents = _dependents(plan)
    gone_turns = set(plan.turns)
    plan.jobs = sorted(
        jid for jid, params, result, error in Job.objects.values_list("id", "params", "result", "error").iterator(chunk_size=200)
        if _job_holds(params, gone_turns, pattern) or _job_holds(result, gone_turns, pattern)
        or (pattern is not None and pattern.search(error or ""))
    )
    plan.admin_entries = _admin_entries(plan, pattern)
    _count_storage(plan)
    return plan


#: the models whose deleted rows' admin history goes with them (plan field → model)
_ADMIN_LOGGED = {"messages": Message, "facts": Fact, "episodes": Episode, "cues": EpisodeCue, "knowledge": Knowledge,
                 "nodes": MemoryNode, "turns": Turn, "events": PipelineEvent, "operations": FactOperation,
                 "identities": Identity, "persons": Person, "streams": Stream, "queue_failures": QueueFailure}


def _admin_entries(plan: ForgetPlan, pattern: re.Pattern[str] | None) -> list[int]:
    """The admin's history entries about a deleted row (its ``object_repr`` may be the row's text, a
    person's name) or quoting the forgotten text."""
    found: set[int] = set()
    for name, model in _ADMIN_LOGGED.items():
        ids = getattr(plan, name)
        if not ids:
            continue
        kind = ContentType.objects.get_for_model(model)
        for chunk in _chunks(ids):
            found.update(LogEntry.objects.filter(content_type=kind, object_id__in=[str(i) for i in chunk])
                         .values_list("id", flat=True))
    if pattern is not None:
        for eid, repr_, message in LogEntry.objects.values_list("id", "object_repr", "change_message").iterator(
                chunk_size=2000):
            if pattern.search(f"{repr_}\n{message}"):
                found.add(eid)
    return sorted(found)


def _job_holds(value: Any, turns: set[int], pattern: re.Pattern[str] | None) -> bool:
    return _scrub_report(value, turns, pattern) != value


def _scrub_report(value: Any, turns: set[int], pattern: re.Pattern[str] | None) -> Any:
    """A job's params or result without the texts of deleted turns (an entry naming one by ``turn_id``
    keeps its numbers, its ``text`` is redacted) and without quotes of the forgotten text."""
    if isinstance(value, dict):
        out = {k: _scrub_report(v, turns, pattern) for k, v in value.items()}
        if out.get("turn_id") in turns and isinstance(out.get("text"), str) and out["text"]:
            out["text"] = REDACTED
        return out
    if isinstance(value, list):
        return [_scrub_report(v, turns, pattern) for v in value]
    if isinstance(value, str) and pattern is not None:
        return pattern.sub(REDACTED, value)
    return value


def _dependents(plan: ForgetPlan) -> dict[str, list[int]]:
    """Rows of tables outside memory whose foreign key to a deleted fact or turn cascades (an app's
    relevance labels, its journal of them): found from the schema's relations, so a table added later is
    counted in the preview too. Deleting the facts and turns deletes them (the ORM's cascade)."""
    out: dict[str, set[int]] = {}
    for model, ids in ((Fact, plan.facts), (Turn, plan.turns)):
        for relation in model._meta.get_fields(include_hidden=True):
            if not (relation.auto_created and not relation.concrete and (relation.one_to_many or relation.one_to_one)):
                continue  # only the reverse side of another table's foreign key
            related = relation.related_model
            if related._meta.app_label == Fact._meta.app_label or relation.on_delete is not models.CASCADE:
                continue
            for chunk in _chunks(ids):
                found = related.objects.filter(**{f"{relation.field.name}__in": chunk}).values_list("pk", flat=True)
                out.setdefault(related._meta.db_table, set()).update(found)
    return {table: sorted(rows) for table, rows in out.items() if rows}


def _pool_ids(pool: Any) -> set[int]:
    return {int(e.get("factId")) for e in pool or [] if isinstance(e, dict) and isinstance(e.get("factId"), int)}


def _names_any(payload: Any, facts: set[int], person: int | None) -> bool:
    if not isinstance(payload, dict):
        return False
    for key in ("factId", "supersededId"):
        if payload.get(key) in facts:
            return True
    if any(i in facts for i in payload.get("conflictWith") or [] if isinstance(i, int)):
        return True
    return person is not None and payload.get("personId") == person


def _count_storage(plan: ForgetPlan) -> None:
    """Stored vectors and lexical index rows that go (redacted messages lose both and are re-indexed)."""
    vectors = fts = 0
    for model, ids, column in (
        (Message, plan.messages + plan.redacted_messages, "tokens"),
        (Fact, plan.facts, "tokens"),
        (Knowledge, plan.knowledge, "tokens"),
    ):
        for chunk in _chunks(ids):
            rows = model.objects.filter(pk__in=chunk)
            vectors += rows.filter(embedding__isnull=False).count()
            fts += rows.exclude(**{column: ""}).count()
    for chunk in _chunks(plan.cues):
        fts += EpisodeCue.objects.filter(pk__in=chunk).exclude(tokens="").count()
    plan.vectors, plan.fts_rows = vectors, fts


def forget(
    *, target: str, target_id: int, user: str, expected_digest: str | None = None, at: int | None = None
) -> tuple[ForgetPlan, ForgetRecord]:
    """Carry out the plan in one transaction; not undoable. Returns the plan and its journal row."""
    at = services.now_ms() if at is None else at
    with transaction.atomic():
        plan = plan_forget(target=target, target_id=target_id)
        if expected_digest and expected_digest != plan.digest():
            raise ForgetPlanChanged("the memory changed since the preview; preview again before forgetting")
        with connection.cursor() as cur:
            backends.secure_delete(cur)  # SQLite: freed pages are zeroed, not left in the file
        _carry_out(plan)
        record = ForgetRecord.objects.create(
            at=at, user=user[:150], target=plan.target, target_id=plan.target_id, counts=plan.counts()
        )
        transaction.on_commit(_refresh_statistics_after_commit)
    return plan, record


def _refresh_statistics_after_commit() -> None:
    try:
        refresh_statistics()
    except DatabaseError as exc:  # the forgetting is committed: say so, and what is left to do
        logger.warning("forget_statistics_not_refreshed reason=%s (run ANALYZE)", str(exc).strip()[:200])


def refresh_statistics() -> None:
    """Sample every table again once the deletions are committed, so that the planner's statistics
    keep no forgotten value (:func:`memory.backends.postgresql.resample_statistics`; nothing to do
    on SQLite, which keeps no such samples)."""
    backends.module().resample_statistics(logger)


def _carry_out(plan: ForgetPlan) -> None:
    tables: set[str] = set()
    # Lexical rows first, from the tokens the rows still hold.
    fact_rows = [(r.pk, r.tokens, r.person_id) for r in _ids(Fact, plan.facts)]
    if fact_rows:
        lexical.delete_fact_rows(fact_rows)
        tables.add("facts_fts")
    cue_rows = [
        row for chunk in _chunks(plan.cues)
        for row in EpisodeCue.objects.filter(pk__in=chunk).values_list("id", "tokens", "episode__stream_id")
    ]
    if cue_rows:
        lexical.delete_cue_rows(cue_rows)
        tables.add("cues_fts")
    for row in _ids(Knowledge, plan.knowledge):
        if row.tokens:
            lexical.delete_row("knowledge_fts", row.pk, row.tokens)
        tables.add("knowledge_fts")

    pattern = _quote_pattern(plan.fragments)
    for message in _ids(Message, plan.redacted_messages):
        content = pattern.sub(REDACTED, message.content) if pattern else message.content
        Message.objects.filter(pk=message.pk).update(content=content, embedding=None, embedding_q8=None)
        lexical.reindex_message(message.pk, content, message.stream_id, message.tokens)
        tables.add("messages_fts")
    for chunk in _chunks(plan.redacted_episodes):
        Episode.objects.filter(pk__in=chunk).update(summary=REDACTED_SUMMARY, kind=Episode.Kind.UNSUMMARIZED)
    _delete(EpisodeCue, plan.cues)

    _delete(MemoryEdge, plan.edges)
    _delete(MemoryNode, plan.nodes)

    forgotten = set(plan.facts)
    for op in _ids(FactOperation, plan.redacted_operations):
        op.prev = _redact_json(op.prev, pattern)
        op.related_fact_id = None if op.related_fact_id in forgotten else op.related_fact_id
        op.save(update_fields=["prev", "related_fact"])
    for chunk in _chunks(plan.operations):
        FactOperation.objects.filter(pk__in=chunk).update(undone_by=None, undo_of=None)
        FactOperation.objects.filter(Q(undone_by__in=chunk) | Q(undo_of__in=chunk)).update(undone_by=None, undo_of=None)
        FactOperation.objects.filter(pk__in=chunk).delete()
    _delete(PipelineEvent, plan.events)
    gone_messages = set(plan.messages)
    for turn in _ids(Turn, plan.trimmed_turns):
        turn.pool = [e for e in turn.pool or [] if not (isinstance(e, dict) and e.get("factId") in forgotten)]
        for name in TURN_FACT_LISTS:
            setattr(turn, name, [i for i in getattr(turn, name) or [] if i not in forgotten])
        for name in TURN_MESSAGE_LISTS:
            setattr(turn, name, [i for i in getattr(turn, name) or [] if i not in gone_messages])
        turn.save(update_fields=["pool", *TURN_FACT_LISTS, *TURN_MESSAGE_LISTS])
    _delete(Turn, plan.turns)

    _delete(Message, plan.messages)  # a trigger removes their messages_fts rows
    if plan.messages:
        tables.add("messages_fts")
    scrub_message_changes([*plan.messages, *plan.redacted_messages])
    gone_turns = set(plan.turns)
    for job in _ids(Job, plan.jobs):
        job.params = _scrub_report(job.params, gone_turns, pattern)
        job.result = _scrub_report(job.result, gone_turns, pattern)
        job.error = pattern.sub(REDACTED, job.error) if pattern is not None else job.error
        job.save(update_fields=["params", "result", "error"])
    _delete(LogEntry, plan.admin_entries)
    for chunk in _chunks(plan.invalidated_facts):
        Fact.objects.filter(pk__in=chunk).update(superseded_by=F("id"))
    _delete(Fact, plan.facts)
    _delete(Episode, plan.episodes)
    _delete(Knowledge, plan.knowledge)
    Identity.objects.filter(pk__in=plan.identities).delete()
    Person.objects.filter(pk__in=plan.persons).delete()
    QueueFailure.objects.filter(pk__in=plan.queue_failures).delete()
    Stream.objects.filter(pk__in=plan.streams).delete()
    for sid in plan.streams:
        _drop_cursor(sid)

    if tables:
        lexical.purge_deleted(sorted(tables))
    # Episode summaries are edited in place here (nowhere else): make the spreading
    # node-text cache reload, which it does when the facts' lexical revision changes.
    with connection.cursor() as cur:
        backends.bump_revision(cur, "lexical_revision:facts")
    if plan.nodes:
        nodes = list(plan.nodes)
        transaction.on_commit(lambda: activation().discard(nodes))


def scrub_message_changes(message_ids: Sequence[int]) -> int:
    """Delete the change-log rows of these messages, in the caller's transaction; returns the rows.

    The ``messages`` triggers log a delete or an edit with the row's index tokens before it
    (``old_tokens``, migration 0025): the tokens of a forgotten or emptied message would stay
    there until the log is pruned. Without them a process's resident message statistics
    cannot take the rows' share out by reading the log, so the messages' lexical revision is
    bumped with the deletion (same commit): every process reloads them on its next read.
    """
    ids = sorted(set(message_ids))
    if not ids:
        return 0
    dropped = 0
    with connection.cursor() as cur:
        for chunk in _chunks(ids):
            cur.execute(f"DELETE FROM memory_changes WHERE source = 'messages' AND row_id IN ({backends.in_placeholders(chunk)})",
                        chunk)
            dropped += max(cur.rowcount, 0)
        backends.bump_revision(cur, MESSAGE_REVISION_KEY)
    return dropped


def _redact_json(value: Any, pattern: re.Pattern[str] | None) -> Any:
    if pattern is None:
        return value
    if isinstance(value, str):
        return pattern.sub(REDACTED, value)
    if isinstance(value, dict):
        return {k: _redact_json(v, pattern) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_json(v, pattern) for v in value]
    return value


def _drop_cursor(stream_id: int) -> None:
    with connection.cursor() as cur:  # the cursors' one meta row (memory.pipeline.cursor_moved)
        backends.lock_key(cur, backends.LOCK_EXTRACT_CURSORS, 0)
    cursors = meta_get(EXTRACT_CURSOR_KEY, {})
    if isinstance(cursors, dict) and str(stream_id) in cursors:
        cursors.pop(str(stream_id))
        meta_set(EXTRACT_CURSOR_KEY, cursors)


# --- message retention (MESSAGE_RETENTION_DAYS) -------------------------------------------

RETENTION_META_KEY = "message_retention"
RETENTION_BATCH = 500


def message_retention_days() -> int:
    """``MESSAGE_RETENTION_DAYS``: bodies older than this are emptied by the daily sweep (0: kept for ever)."""
    return settings.MESSAGE_RETENTION_DAYS


def expire_message_bodies(*, days: int, at: int | None = None) -> int:
    """Empty the bodies of messages older than ``days`` that are summarised *and* extracted.

    A body goes only once its message has an episode (summarised) and the stream's
    extraction cursor is past it; the row, its episode link and its sender stay, its
    FTS row and vector go too. Batches of ``RETENTION_BATCH``, one transaction each;
    ``days <= 0`` is off. Returns how many bodies were emptied (recorded in ``meta``).
    """
    if days <= 0:
        return 0
    now = services.now_ms() if at is None else at
    cutoff = now - int(days) * 86_400_000
    stream_ids = Message.objects.filter(created_at__lt=cutoff, episode_id__isnull=False).exclude(content="")
    stream_ids = sorted(set(stream_ids.values_list("stream_id", flat=True)))
    emptied = 0
    for stream_id in stream_ids:
        cursor = read_cursor(stream_id)
        while True:
            with transaction.atomic():
                rows = list(
                    Message.objects.filter(stream_id=stream_id, created_at__lt=cutoff, episode_id__isnull=False,
                                           pk__lte=cursor)
                    .exclude(content="").only("id", "tokens", "stream_id")[:RETENTION_BATCH]
                )
                for row in rows:
                    lexical.reindex_message(row.pk, "", stream_id, row.tokens)
                Message.objects.filter(pk__in=[r.pk for r in rows]).update(content="", embedding=None, embedding_q8=None)
                scrub_message_changes([r.pk for r in rows])
                if rows:
                    with connection.cursor() as cur:
                        backends.secure_delete(cur)
                    lexical.purge_deleted(["messages_fts"])
            emptied += len(rows)
            if len(rows) < RETENTION_BATCH:
                break
    if emptied:
        refresh_statistics()
    previous = meta_get(RETENTION_META_KEY, {})
    total = (previous.get("total", 0) if isinstance(previous, dict) else 0) + emptied
    meta_set(RETENTION_META_KEY, {"at": now, "days": int(days), "emptied": emptied, "total": total})
    return emptied
