"""The read path of a bot turn and the cognitive actions (recall, inspect, consult).

A turn has two steps. :func:`prepare_turn` runs when a message arrives: it
sweeps due facts, builds the lexical fact pool for the present persons (two
queries: the current text and the conversation impression), the episodes and
the working memory, and records the turn's retrieval trace — without touching
any fact. :func:`confirm_turn` runs once the bot decides to reply: the query
vector is taken, dense candidates join the pool, the pool is re-ranked with
fused relevance and exactly the facts that enter the prompt are reinforced.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from django.conf import settings

from memory import overrides, selectors, services
from memory.engine import context as conversation
from memory.engine import decay, spreading
from memory.engine.scope import fact_visible_in_stream
from memory.engine.scoring import RankedCandidate, Verdict, apply_pool_percentile, held_back, is_reference_profile
from memory.models import Episode, Fact, Identity, Message, Person, Stream
from memory.providers import config as provider_config
from memory.recall.turn_store import LineVector, turn_store
from memory.search import lexical, read_ahead
from memory.selectors import RecalledEpisode, ScopedFact
from memory.selectors._common import private_facts_in_group

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

OBSERVATION_LIMIT = 600
ITEM_LIMIT = 80
TRUNCATED = "…（已截断）"


class TurnNotFound(LookupError):
    pass


class TurnStateError(Exception):
    """The turn cannot take this step (e.g. it was already confirmed)."""


def _overrides() -> Mapping[str, Any]:
    return overrides.active_overrides()


def live_profile() -> tuple[str, Mapping[str, Any]]:
    """The profile in force and its overrides, read together (a turn records both)."""
    return overrides.in_force()


def configured_limits() -> dict[str, int]:
    """The retrieval parameters whose default is a setting (a profile may override each): their configured values."""
    return {
        "fact_recall_limit": settings.FACT_RECALL_LIMIT,
        "recalled_episode_limit": settings.RECALLED_EPISODE_LIMIT,
        "recent_episode_limit": settings.RECENT_EPISODE_LIMIT,
    }


def _limit(overrides: Mapping[str, Any], name: str) -> int:
    """The limit ``name`` of :func:`configured_limits` as ``overrides`` (a profile, an evaluation) has it."""
    return int(overrides[name]) if name in overrides else configured_limits()[name]


def fact_recall_limit(overrides: Mapping[str, Any]) -> int:
    """How many facts a turn's prompt takes: the profile's ``fact_recall_limit``, else ``FACT_RECALL_LIMIT``."""
    return _limit(overrides, "fact_recall_limit")


def _stream(stream_id: int) -> Stream:
    found = list(Stream.objects.raw("SELECT * FROM streams WHERE id = %s", [stream_id]))  # no ORM compile per turn
    if not found:
        raise services.NotFound(f"stream {stream_id} not found")
    return found[0]


def present_persons(*, stream_id: int, speaker_id: int, before_id: int) -> list[int]:
    """The current speaker first, then the stream's recent speakers."""
    return list(dict.fromkeys([speaker_id, *selectors.recent_speakers(stream_id=stream_id, before_id=before_id)]))


def replay_turn_pool(
    *,
    person_ids: Sequence[int],
    text: str,
    impression: str,
    now: int,
    stream_kind: str,
    overrides: Mapping[str, Any],
    events: bool = False,
    blocked_counts: list[int] | None = None,
    context: Sequence[tuple[str, float]] = (),
    shown: frozenset[str] = frozenset(),
    shown_out: list[int] | None = None,
) -> list[ScopedFact]:
    """The lexical candidate pool of a turn — the same code path production runs.

    ``recall_facts_in_scope`` for the current text, then for the impression;
    union by id (first occurrence kept, with its relevance; a fact found by both
    queries keeps its best IDF coverage and rarest-word flag); the union ranked once by the engine's ``rank``
    (``selectors.rank_facts``; stable: current-text candidates first on ties);
    cut by the tuned pool percentile. Candidates under the relevance floors stay
    in the pool (the confirm step may lift them with a cosine) but after the
    eligible ones.

    ``context`` — ``(line, weight)`` for the recent user lines (:func:`conversation_lines`):
    each line is a query of its own; what it finds joins the pool with its relevance and
    coverage multiplied by the line's recency weight (a fact already found keeps its own
    relevance and the better coverage).

    ``shown`` — the lines the conversation shows already (:func:`shown_in_conversation`): a fact
    whose text is one of them is no candidate (its id appended to ``shown_out`` when given), and
    the union is ranked without it.
    """
    limit = fact_recall_limit(overrides)
    pool: dict[int, ScopedFact] = {}
    for query in (text, impression):
        if not query or not query.strip():
            continue
        for fact in selectors.recall_facts_in_scope(
            person_ids=person_ids, query=query, limit=limit, now=now, stream_kind=stream_kind,
            return_candidates=True, overrides=overrides, events=events, blocked_counts=blocked_counts,
        ):
            first = pool.setdefault(fact.id, fact)
            if first is not fact and fact.coverage is not None:
                # relevant to either query is enough for the floors: best coverage, rarest of either
                pool[fact.id] = first.copy_with(coverage=max(first.coverage or 0.0, fact.coverage),
                                          rarest=first.rarest or fact.rarest)
    for line, weight in context:
        for fact in selectors.recall_facts_in_scope(
            person_ids=person_ids, query=line, limit=limit, now=now, stream_kind=stream_kind,
            return_candidates=True, overrides=overrides, events=False,
        ):
            coverage = fact.coverage * weight if fact.coverage is not None else None
            first = pool.get(fact.id)
            if first is None:
                pool[fact.id] = fact.copy_with(
                    lexical_relevance=fact.lexical_relevance * weight, coverage=coverage, rarest=False, source="context",
                )
            elif coverage is not None and coverage > (first.coverage or 0.0):
                pool[fact.id] = first.copy_with(coverage=coverage)
    # Why a turn ranks more than once. Each query line's candidates came back ranked
    # (recall_facts_in_scope is the one recall path, shared with /actions/recall and the console);
    # here only their order survives, as the tie-break of the union. The union is ranked again
    # because calibration and the relevance gate are relative to the pool — its best relevance,
    # its best coverage — and one line's pool is not the turn's. The confirm ranks a third time
    # (rank_pool), with what the prepare does not have: the query's vector (embedded only once
    # the bot decided to reply), the candidates' cosines and the dense channel's candidates.
    candidates = _not_shown(list(pool.values()), shown, shown_out)
    ordered = selectors.rank_facts(candidates, overrides, window=selectors.query_window(text, now), query=text)
    kept = apply_pool_percentile([f.score for f in ordered], float(overrides.get("pool_score_percentile", 0.0)))
    return ordered[:kept]


def shown_in_conversation(
    context: Sequence[ContextLine], overrides: Mapping[str, Any], texts: Mapping[int, str] | None = None,
) -> frozenset[str]:
    """The lines a turn's conversation shows the bot already (``context_shown_out``,
    :data:`memory.engine.context.DEFAULT_SHOWN_OUT`), as :func:`memory.engine.context.shown_keys`:
    the lines of ``context`` as :func:`read_turn` gives it — a text's lines before its own, the
    stream's recent messages, the assistant's too — within the conversation's window (the newest
    ``max(context_lexical_lines, context_dense_messages)``, 12: a long pasted history's older lines
    are memories the turn may well ask about), a stored message's text taken from ``texts`` when the
    line was recorded without it (a confirm's context is message ids). The turn's own line is not
    among them: a memory the user says again is still recalled (and reinforced).
    Empty when the knob is 0 and under the reference ranking (its turns replay as recorded).

    Why: a memory that is word for word a line of the conversation (a chat imported as memories,
    a fact extracted from a message that is still in the window) fills a slot of the prompt with
    what the prompt shows already (docs/ARCHITECTURE.md, "Ranking")."""
    if int(overrides.get("context_shown_out", conversation.DEFAULT_SHOWN_OUT)) <= 0 or is_reference_profile(overrides):
        return frozenset()
    found, size = texts or {}, _context_size(overrides)
    return conversation.shown_keys(c.content or found.get(c.message_id, "") for c in context if c.position <= size)


def _not_shown(facts: list[ScopedFact], shown: frozenset[str], out: list[int] | None = None) -> list[ScopedFact]:
    """``facts`` without those whose text is a line the conversation shows (their ids appended to ``out``)."""
    if not shown:
        return facts
    kept = []
    for f in facts:
        if conversation.shown_key(f.content) in shown:
            if out is not None:
                out.append(f.id)
        else:
            kept.append(f)
    return kept


def _episodes(recalled: Sequence[RecalledEpisode], recent: Sequence[RecalledEpisode]) -> list[RecalledEpisode]:
    """A turn's episodes: those its cues recalled, then the stream's newest, each once, at most
    ``EPISODE_CONTEXT_LIMIT``."""
    merged: dict[int, RecalledEpisode] = {}
    for episode in [*recalled, *recent]:
        merged.setdefault(episode.id, episode)
    return list(merged.values())[: settings.EPISODE_CONTEXT_LIMIT]


def _recalled_episode_limit(overrides: Mapping[str, Any]) -> int:
    return _limit(overrides, "recalled_episode_limit")


def _recent_episode_limit(overrides: Mapping[str, Any]) -> int:
    return _limit(overrides, "recent_episode_limit")


@dataclass(frozen=True)
class PromptFact:
    fact: ScopedFact
    conflict_slot: str = ""
    completed: bool = False  # added only to show a conflict group whole; not recalled


def conflict_keys(facts: Sequence[ScopedFact]) -> list[tuple[int, str]]:
    """The ``(person, slot)`` groups :func:`complete_conflicts` looks up for ``facts``."""
    return [(f.person_id, f.slot) for f in facts if f.active]


def complete_conflicts(
    facts: Sequence[ScopedFact], *, now: int, groups: Mapping[tuple[int, str], list[tuple]] | None = None
) -> list[PromptFact]:
    """Annotate slot conflicts and append every missing member of their groups.

    Conflicting values are always shown side by side: the model must never see
    only one side and take it as settled. ``groups`` — the result of
    :func:`selectors.conflict_members_read` of :func:`conflict_keys`, when the caller read it already
    (a confirm reads it with its write).
    """
    if groups is None:
        members = selectors.conflict_members_read(conflict_keys(facts))
        groups = read_ahead.read(members) if members is not None else {}
    out = [
        PromptFact(f, conflict_slot=f.slot if (f.person_id, f.slot) in groups else "") for f in facts
    ]
    present = {f.id for f in facts}
    # Groups are per (person, slot): two persons may both have a 居住地 conflict.
    for rows in groups.values():
        for fid, person_id, slot, content, kind, origin, strength, updated_at, half_life, active in rows:
            if fid in present:
                continue
            extra = ScopedFact(
                id=fid, person_id=person_id, kind=kind, content=content, slot=slot, origin_kind=origin,
                retention=decay.retention(strength, updated_at, half_life, now), score=0.0, lexical_relevance=0.0,
                bm25=None, half_life_hours=half_life, active=bool(active),
            )
            out.append(PromptFact(extra, conflict_slot=slot, completed=True))
    return out


@dataclass(frozen=True)
class ContextLine:
    """A recent message of the turn's stream: ``position`` 1 is the one just before the turn's line."""

    message_id: int
    role: str
    content: str
    position: int


def read_turn(text: str, context: Sequence[ContextLine], overrides: Mapping[str, Any]) -> tuple[str, list[ContextLine]]:
    """``(the turn's line, its context)``: a text of several lines (:func:`memory.engine.context.split_turn`)
    is read as the chat it would have been — its last line is the turn's line, the lines before it
    the newest user lines of the conversation (message id 0: no stored message), ahead of the
    stream's recent messages (their positions move back by as many). A text of one line, or
    ``context_text_lines`` 0, or the reference ranking (its query is the turn's text, whatever its
    recorded profile says of this knob), is read as it is: ``(text, context)``."""
    if int(overrides.get("context_text_lines", conversation.DEFAULT_TEXT_LINES)) <= 0 or is_reference_profile(overrides):
        return text, list(context)
    line, earlier = conversation.split_turn(text)
    if not earlier:
        return text, list(context)
    shift = len(earlier)
    lines = [ContextLine(0, "user", content, k) for k, content in enumerate(earlier, start=1)]
    lines += [ContextLine(c.message_id, c.role, c.content, c.position + shift) for c in context]
    return line, lines


def _context_gap_ms(overrides: Mapping[str, Any]) -> int:
    """The silence that ends a conversation (``context_gap_minutes``), in ms."""
    return int(float(overrides.get("context_gap_minutes", conversation.DEFAULT_GAP_MINUTES)) * 60_000)


def _context_knobs(overrides: Mapping[str, Any]) -> tuple[int, int, float]:
    """``(lexical lines, dense messages, half-life)`` of the tuned profile (engine defaults otherwise)."""
    return (
        int(overrides.get("context_lexical_lines", conversation.DEFAULT_LEXICAL_LINES)),
        int(overrides.get("context_dense_messages", conversation.DEFAULT_DENSE_MESSAGES)),
        float(overrides.get("context_half_life", conversation.DEFAULT_HALF_LIFE)),
    )


def recent_context(
    *, stream_id: int, upto_id: int, text: str, overrides: Mapping[str, Any], at: int | None = None
) -> list[ContextLine]:
    """The recent messages that join the turn's query, newest first.

    The window is the last ``max(context_lexical_lines, context_dense_messages)`` messages
    up to the turn's watermark (archived ones included: a summary does not end a topic),
    without the turn's own line (the newest message when it says the same as ``text``), and
    only the current conversation: with the turn's time ``at``, the window ends at the first
    silence longer than ``context_gap_minutes`` (between the turn and the newest message or
    between two messages) — last week's topic does not steer a new one.
    """
    size = _context_size(overrides)
    if size <= 0 or not upto_id:
        return []
    rows = read_ahead.read(_context_read(stream_id, upto_id, size))
    if rows and " ".join(rows[0][2].split()) == " ".join(text.split()):
        rows = rows[1:]
    if at is not None:
        gap, kept, later = _context_gap_ms(overrides), [], at
        for row in rows:
            if later - row[3] > gap:
                break
            kept.append(row)
            later = row[3]
        rows = kept
    return [ContextLine(mid, role, content, k) for k, (mid, role, content, _at) in enumerate(rows[:size], start=1)]


def _context_size(overrides: Mapping[str, Any]) -> int:
    lines, dense, _ = _context_knobs(overrides)
    return max(lines, dense)


def _context_read(stream_id: int, upto_id: int, size: int) -> read_ahead.Read:
    """:func:`recent_context`'s messages (one more: the turn's own line may be among them)."""
    return read_ahead.Read(  # a turn's read: plain SQL, no ORM compile per call
        ("recent_context", stream_id, upto_id, size),
        "SELECT id, role, content, created_at FROM messages WHERE stream_id = %s AND id <= %s ORDER BY id DESC LIMIT %s",
        [stream_id, upto_id, size + 1],
    )


def conversation_lines(
    context: Sequence[ContextLine], overrides: Mapping[str, Any], whole: str | None = None,
) -> list[tuple[str, float]]:
    """``(text, weight)`` of the user lines among the newest ``context_lexical_lines`` messages, and —
    ``whole``: a text of several lines read as a chat (:func:`whole_text`) — that text whole, one more
    query line of weight ``context_whole_lexical`` (when it is above 0)."""
    lexical, _, half_life = _context_knobs(overrides)
    lines = [
        (line.content, 2.0 ** (-line.position / half_life))
        for line in context
        if line.position <= lexical and line.role == "user" and line.content.strip()
    ]
    weight = _whole_weights(overrides)[1]
    if whole and weight > 0:
        lines.append((whole, weight))
    return lines


def whole_text(text: str, line: str) -> str | None:
    """The turn's text when :func:`read_turn` read it as a chat (its line is not the text), else None:
    a text of several lines keeps its reading whole beside its lines (``context_whole_weight``,
    ``context_whole_lexical``)."""
    return text if line != text else None


def read_whole(text: str, line: str, context: Sequence[ContextLine], overrides: Mapping[str, Any]) -> str | None:
    """What the turn's dense query reads whole (one more row, weight ``context_whole_weight``): a text
    of several lines itself (:func:`whole_text`); for a turn of one line in a conversation, that
    conversation as the user would have pasted it — the user lines among the dense window's stored
    messages, oldest first, then the turn's line, one per line — the newest ones that fit in
    :data:`memory.engine.context.TURN_TEXT_MAX_CHARS`, as a pasted text must. None when there is
    neither, or the weight is 0.

    Why: per-message vectors and the window's centroid read a chat one line at a time, and a
    question asked after a few lines of chit-chat ("…的活动，地点是什么？") lost what the earlier
    lines named where the same lines pasted as one text were found (docs/ARCHITECTURE.md gives the
    figures). A context read with its messages (prepare, replay) has their texts; a confirm's
    (message ids only) reads them with the window's vectors, which it sent ahead."""
    whole = whole_text(text, line)
    if whole is not None or _whole_weights(overrides)[0] <= 0:
        return whole
    stored = [c for c in _dense_window(context, overrides) if c.message_id]
    if not stored:
        return None
    if all(c.role for c in stored):
        texts = {c.message_id: c.content for c in stored if c.role == "user"}
    else:
        texts = selectors.message_texts([c.message_id for c in stored], role="user")
    users, room = [], conversation.TURN_TEXT_MAX_CHARS - len(line)
    for c in sorted(stored, key=lambda c: c.position):  # newest first, while the text stays within a turn's bound
        content = texts.get(c.message_id, "")
        if not content.strip():
            continue
        room -= len(content) + 1
        if room < 0:
            break
        users.append(content)
    return "\n".join([*reversed(users), line]) if users else None


def _whole_weights(overrides: Mapping[str, Any]) -> tuple[float, float]:
    """``(context_whole_weight, context_whole_lexical)``: the whole text's vector and lexical query."""
    return (
        float(overrides.get("context_whole_weight", conversation.DEFAULT_WHOLE_WEIGHT)),
        float(overrides.get("context_whole_lexical", conversation.DEFAULT_WHOLE_LEXICAL)),
    )


def conversation_query(
    text_vector: Any, context: Sequence[ContextLine], overrides: Mapping[str, Any], whole: str | None = None,
) -> Any:
    """The turn's query vector(s): its own vector, the window's (the centroid of the turn's vector
    and the user lines among the newest ``context_dense_messages`` messages, weight
    ``context_window_weight``) and the recency-weighted vectors of those messages
    (:func:`selectors.message_vectors`, each computed at most once) as a :class:`ConversationQuery`;
    the plain vector when the context adds none. ``whole`` — a text of several lines read as a chat
    (:func:`whole_text`): its own vector is one more row, weight ``context_whole_weight`` (when above 0)."""
    _, _, half_life = _context_knobs(overrides)
    window = _dense_window(context, overrides)
    whole_weight = _whole_weights(overrides)[0]
    with read_ahead.within():
        return _conversation_query(text_vector, window, overrides, whole if whole_weight > 0 else None, whole_weight,
                                   half_life)


def _conversation_query(
    text_vector: Any, window: Sequence[ContextLine], overrides: Mapping[str, Any], whole: str | None,
    whole_weight: float, half_life: float,
) -> Any:
    if text_vector is not None:  # a text's own lines (and the whole text) not embedded yet: in one call
        _embed_lines([*(line.content for line in window if not line.message_id), *([whole] if whole else [])])
    extra = (_line_vector(whole), whole_weight) if text_vector is not None and whole else None
    if extra is not None and extra[0] is None:
        extra = None
    if text_vector is None or not window:
        return conversation.ConversationQuery.build(text_vector, [], whole=extra) if extra else text_vector
    stored = [line.message_id for line in window if line.message_id]
    weights = conversation.recency_weights(max(line.position for line in window), half_life)
    vectors = selectors.message_vectors(stored) if stored else {}  # with their roles: one read (the block's)
    pairs = [
        (vectors.get(line.message_id) if line.message_id else _line_vector(line.content), weights[line.position - 1])
        for line in window
    ]
    joined = _window_vector(text_vector, window, [vector for vector, _ in pairs], stored, overrides)
    if joined is None and extra is None and all(vector is None for vector, _ in pairs):
        return text_vector
    return conversation.ConversationQuery.build(text_vector, pairs, window=joined, whole=extra)


def _window_weight(overrides: Mapping[str, Any]) -> float:
    return float(overrides.get("context_window_weight", conversation.DEFAULT_WINDOW_WEIGHT))


def _window_vector(
    text_vector: Any, window: Sequence[ContextLine], vectors: Sequence[Any], stored: Sequence[int],
    overrides: Mapping[str, Any],
) -> tuple[Any, float] | None:
    """``(vector, weight)`` of the window (:func:`memory.engine.context.window_vector` of the turn's
    vector and its user lines' ``vectors``: a multi-line text's own lines, :func:`read_turn`, and the
    user messages among the ``stored`` ids), or None: its weight is 0 or no user line has a vector."""
    weight = _window_weight(overrides)
    if weight <= 0:
        return None
    users = set(selectors.user_message_ids(stored)) if stored else set()
    lines = [vector for line, vector in zip(window, vectors, strict=True) if not line.message_id or line.message_id in users]
    joined = conversation.window_vector(text_vector, lines)
    return None if joined is None else (joined, weight)


def _line_vector(content: str) -> np.ndarray | None:
    """The vector of a multi-line text's own line (:func:`read_turn`), as a stored message has one."""
    return read_ahead.once(("line_vector", content), lambda: embed_query(content))


def _embed_lines(contents: Sequence[str]) -> None:
    """Inside a read-ahead block: the vectors of ``contents`` not in it yet, embedded in one call and kept
    for :func:`_line_vector` (a bot that sends its line's vector leaves its text's other lines to us:
    one call for them all, not one each). A failed call keeps nothing: each line is asked again alone."""
    pending = [content for content in dict.fromkeys(contents) if not read_ahead.holds(("line_vector", content))]
    if len(pending) < 2:
        return
    found = _embed_together(pending)
    if found is not None:
        _keep_line_vectors(pending, found)


def _embed_together(texts: Sequence[str]) -> list[Any] | None:
    """``texts`` embedded in one call of the serving embedder, or None: none configured, the call failed
    (or a remote provider did not answer within ``EMBEDDING_QUERY_TIMEOUT``), or it answered with another
    number of vectors. The vector is a side channel: without it the lexical order stands."""
    try:
        embedder = provider_config.get_embedder(serving=True)
        if embedder is None:
            return None
        found = list(embedder.embed(list(texts)))
    except Exception:
        logger.warning("query embedding failed", exc_info=True)
        return None
    if len(found) != len(texts):
        logger.warning("query embedding returned %d vectors for %d texts", len(found), len(texts))
        return None
    return found


def _keep_line_vectors(contents: Sequence[str], vectors: Sequence[Any]) -> None:
    """The vectors of a text's own lines, kept in the read-ahead block for :func:`_line_vector`."""
    for content, vector in zip(contents, vectors, strict=True):
        read_ahead.once(("line_vector", content), lambda v=vector: v)


def _turn_vector(
    text: str, context: Sequence[ContextLine], overrides: Mapping[str, Any], whole: str | None = None,
) -> np.ndarray | None:
    """The turn's vector, embedded in one call with, for a text of several lines, its other lines'
    and — ``context_whole_weight`` above 0 — the whole text's (kept for :func:`_line_vector` in the
    read-ahead block): one call of several texts costs less than several calls."""
    own = list(dict.fromkeys(line.content for line in _dense_window(context, overrides) if not line.message_id))
    if whole and _whole_weights(overrides)[0] > 0 and whole not in own:
        own.append(whole)
    found = _embed_together([text, *own])
    if found is None:
        return None
    _keep_line_vectors(own, found[1:])
    return found[0]


def _dense_window(context: Sequence[ContextLine], overrides: Mapping[str, Any]) -> list[ContextLine]:
    _, dense, _ = _context_knobs(overrides)
    return [line for line in context if line.position <= dense]


def query_weights(context: Sequence[ContextLine], overrides: Mapping[str, Any]) -> dict[int, tuple[float | None, float | None]]:
    """``{message id: (its weight as a lexical query line, its weight in the dense query)}`` for a turn's
    context under ``overrides`` — None where the message is not that kind of query (the weights
    :func:`conversation_lines` and :func:`conversation_query` give them)."""
    lexical, dense, half_life = _context_knobs(overrides)
    out = {}
    for line in context:
        weight = 2.0 ** (-line.position / half_life)
        queried = line.position <= lexical and line.role == "user" and bool(line.content.strip())
        out[line.message_id] = (weight if queried else None, weight if line.position <= dense else None)
    return out


def context_positions(message_ids: Sequence[int]) -> list[ContextLine]:
    """A recorded context as :func:`conversation_query` needs it: each message at its position,
    nothing read (a message deleted since has no vector and drops out there)."""
    return [ContextLine(int(mid), "", "", k) for k, mid in enumerate(message_ids, start=1)]


def context_from_ids(message_ids: Sequence[int]) -> list[ContextLine]:
    """The context a turn recorded (message ids, newest first), read back for confirm and replay."""
    rows = Message.objects.only("id", "role", "content").in_bulk(list(message_ids))  # not the vectors (~2.5 kB each)
    return [
        ContextLine(mid, rows[mid].role, rows[mid].content, k)
        for k, mid in enumerate(message_ids, start=1)
        if mid in rows
    ]


@dataclass
class TurnContext:
    turn_id: int | None
    stream: Stream
    speaker_id: int
    now: int
    working_memory: list[selectors.WorkingMessage]
    present_person_ids: list[int]
    pool: list[ScopedFact]
    facts: list[PromptFact]
    episodes: list[RecalledEpisode]
    blocked: int = 0
    overrides: Mapping[str, Any] = field(default_factory=dict)
    context: list[ContextLine] = field(default_factory=list)
    line: str = ""  # the turn's line (read_turn): its text, or the last line of a text of several
    shown: frozenset[str] = frozenset()  # the lines the conversation shows already (shown_in_conversation)
    shown_out: list[int] = field(default_factory=list)  # the facts left out for it


def _record_turn(
    values: dict[str, Any], trace: dict[str, Any], blocked_by_query: Sequence[int] = (), also: read_ahead.Read | None = None,
) -> tuple[int, Any]:
    """Store a turn (``values``: its fields), its ``memory_retrieval_trace`` event (``trace``: the
    payload but the turn's id) and a ``memory_fact_scope_blocked`` event for each query whose facts
    visibility held back (``blocked_by_query``: how many), through the backend's
    :class:`~memory.recall.turn_store.TurnStore`; ``(the turn's id, the result of also)`` — a read
    made with the write (PostgreSQL: in its round trip)."""
    event = {"at": values["at"], "stream_id": values["stream_id"], "stage": "turn", "kind": "memory_retrieval_trace",
             "payload": trace}
    blocked = [  # as selectors.recall_facts_in_scope reports them outside a turn
        {"at": values["at"], "stream_id": None, "stage": "", "kind": selectors.SCOPE_BLOCKED,
         "payload": selectors.scope_blocked_payload(values["stream_kind"], n)}
        for n in blocked_by_query
    ]
    return turn_store().record(values, event, blocked, also)


def prepare_turn(
    *,
    stream_id: int,
    speaker_id: int,
    text: str,
    impression: str = "",
    watermark_message_id: int | None = None,
    at: int | None = None,
    record: bool = True,
    stream: Stream | None = None,
) -> TurnContext:
    """Everything the bot needs to answer a message; read-only for facts.

    With ``record=False`` (the console's playground) nothing at all is written:
    no sweep, no events, no turn row. ``stream`` — the stream's row when the caller
    has it already (the API resolved it).
    """
    now = services.now_ms() if at is None else at
    stream = stream if stream is not None and stream.pk == stream_id else _stream(stream_id)
    profile, overrides = live_profile()
    watermark = watermark_message_id
    before = watermark if watermark is not None else selectors.latest_message_id(stream_id=stream_id)
    # the reads that need nothing but the turn's refs go to the database together (PostgreSQL: with
    # the change logs of the fact and cue indexes, one round trip); the rest of the turn reads them
    speakers = selectors.recent_speakers_read(stream_id=stream_id, before_id=before)
    scope = lexical.present_scope_read(speakers, speaker_id)
    reads = [
        speakers, scope,
        selectors.working_memory_read(stream_id=stream_id, limit=settings.WORKING_MEMORY_MESSAGES, watermark=watermark),
    ]
    if _recalled_episode_limit(overrides) > 0:
        reads.append(lexical.stream_cues_read(stream_id))
    if (recent := _recent_episode_limit(overrides)) > 0:
        reads.append(selectors.recent_episodes_read(stream_id=stream_id, limit=recent))
    if (size := _context_size(overrides)) > 0 and before:
        reads.append(_context_read(stream_id, before, size))
    if record:
        reads.append(services.due_facts_read(now))
    with read_ahead.one_state("facts_fts", "cues_fts", reads=reads):  # the turn's reads see one state of the lexical tables
        if record and services.sweep(at=now, once=True):
            read_ahead.drop(scope)  # its rows, read ahead (PostgreSQL), predate the facts the sweep froze
        persons = present_persons(stream_id=stream_id, speaker_id=speaker_id, before_id=before)
        lexical.scope_of(persons, scope)
        context = recent_context(stream_id=stream_id, upto_id=before, text=text, overrides=overrides, at=now)
        line, context = read_turn(text, context, overrides)
        blocked: list[int] = []  # what visibility held back, recorded with the turn (_record_turn)
        shown, shown_out = shown_in_conversation(context, overrides), []
        pool = replay_turn_pool(
            person_ids=persons, text=line, impression=impression, now=now, stream_kind=stream.kind,
            overrides=overrides, blocked_counts=blocked,
            context=conversation_lines(context, overrides, whole=whole_text(text, line)), shown=shown, shown_out=shown_out,
        )
        limit = fact_recall_limit(overrides)
        prompt = prompt_facts(pool, limit)
        facts = complete_conflicts(prompt, now=now)
        hits = selectors.episode_hits(stream_id=stream_id, query=line, limit=_recalled_episode_limit(overrides))
        recent = selectors.recent_episodes(stream_id=stream_id, limit=_recent_episode_limit(overrides))
        working = selectors.working_memory(stream_id=stream_id, limit=settings.WORKING_MEMORY_MESSAGES, watermark=watermark)
    # the recalled episodes' rows are read with the turn's write (PostgreSQL: in its round trip)
    recalled = selectors.episodes_read(hits) if hits else None
    turn_id, rows = None, None
    if record:
        episode_ids = list(dict.fromkeys([*hits, *(e.id for e in recent)]))[: settings.EPISODE_CONTEXT_LIMIT]
        turn_id, rows = _record_turn(
            {
                "stream_id": stream_id, "speaker_id": speaker_id, "at": now, "text": text, "impression": impression,
                "watermark_message_id": watermark, "stream_kind": stream.kind, "present_person_ids": persons,
                "pool": [f.as_dict() for f in pool], "prompt_fact_ids": [],
                "context_message_ids": [c.message_id for c in context if c.message_id],
                "episode_ids": episode_ids, "profile": {"name": profile, "params": dict(overrides)},
                "visibility_blocked": sum(blocked),
            },
            {
                "streamId": stream_id, "currentText": text,
                "conversationImpression": impression, "currentTextChars": len(text),
                "impressionChars": len(impression), "candidateCount": len(pool),
                "candidatePool": [{"factId": f.id, "score": f.score} for f in pool],
                "promptFactIds": [f.id for f in prompt], "presentPersonIds": persons,
                "streamKind": stream.kind, "heldBackFactIds": [f.id for f in held_back_facts(pool, limit)],
                "contextMessageIds": [c.message_id for c in context if c.message_id],
                "shownFactIds": shown_out,
            },
            blocked,
            also=recalled,
        )
    elif recalled is not None:
        rows = read_ahead.read(recalled)
    episodes = _episodes(selectors.recalled_episodes(hits, rows) if rows else [], recent)
    return TurnContext(
        turn_id=turn_id, stream=stream, speaker_id=speaker_id, now=now, working_memory=working,
        present_person_ids=persons, pool=pool, facts=facts, episodes=episodes, blocked=sum(blocked),
        overrides=overrides, context=context, line=line, shown=shown, shown_out=shown_out,
    )


def embed_query(text: str) -> np.ndarray | None:
    """Query vector from the configured embedding provider, or None (disabled, failed, or a remote
    provider that does not answer within ``EMBEDDING_QUERY_TIMEOUT``: the request does not wait)."""
    found = _embed_together([text])
    return found[0] if found is not None else None


def prompt_facts(ranked: Sequence[ScopedFact], limit: int) -> list[ScopedFact]:
    """The head of a ranked pool that enters the prompt: eligible facts only, at most ``limit``."""
    return [f for f in ranked if f.eligible][: max(0, limit)]


def held_back_facts(ranked: Sequence[ScopedFact], limit: int) -> list[ScopedFact]:
    """What forgetting held back (:func:`memory.engine.scoring.held_back` on a ranked pool):
    eligible facts relevance alone would have put in the prompt but the score ranked out."""
    terms = [
        RankedCandidate(
            id=i, relevance=f.relevance if f.relevance is not None else f.lexical_relevance,
            calibrated=f.calibrated if f.calibrated is not None else f.lexical_relevance,
            prior=f.prior or 0.0, score=f.score, retention=f.retention, eligible=f.eligible,
        )
        for i, f in enumerate(ranked)
    ]
    return [ranked[r.id] for r in held_back(terms, limit)]


@dataclass(frozen=True)
class _TurnToConfirm:
    """What a confirm reads of its turn (:func:`_turn_to_confirm`)."""

    id: int
    stream_id: int
    at: int
    text: str
    stream_kind: str
    confirmed_at: int | None
    watermark_message_id: int | None
    present_person_ids: list[int]
    pool: list[dict]
    context_message_ids: list[int]
    profile: dict = field(default_factory=dict)  # the profile the prepare ranked with ({"name", "params"})


def _keep_as_line_vector(turn: _TurnToConfirm, line: str, vector: Any, *, given: bool) -> LineVector | None:
    """The turn's vector as the vector of the turn's line (the message it was asked at), which the
    next turns of the conversation read (:func:`selectors.message_vectors`) — so no one embeds that
    line again, neither they nor the worker. The bot's vector is of the turn's text; one computed here
    is of its line: either is the message's when the message says the same. ``None`` without a server
    embedder or with a vector of another dimension than its (it would not be the stored vectors' space).
    """
    if vector is None or not turn.watermark_message_id or (not given and line != turn.text):
        return None
    embedder = provider_config.get_embedder(serving=True)
    dim = int(getattr(embedder, "dim", 0) or 0) if embedder is not None else 0
    if not dim or np.asarray(vector).size != dim:
        return None
    try:
        raw, q8 = services.vector_pair(vector)
    except ValueError:
        return None
    return LineVector(int(turn.watermark_message_id), turn.text, raw, q8)


def _turn_read(turn_id: int) -> read_ahead.Read:
    """The turn's row for :func:`confirm_turn` (``None`` when there is none): its columns by plain SQL
    (not a model instance: the ORM's machinery cost as much as the read), the JSON ones decoded as a
    JSONField does."""
    return read_ahead.Read(
        ("turn_to_confirm", int(turn_id)),
        "SELECT id, stream_id, at, text, stream_kind, confirmed_at, watermark_message_id, present_person_ids, pool,"
        " context_message_ids, profile FROM turns WHERE id = %s",
        [int(turn_id)],
        _turn_to_confirm,
    )


def _turn_to_confirm(rows: list[tuple]) -> _TurnToConfirm | None:
    if not rows:
        return None
    row = rows[0]
    return _TurnToConfirm(*row[:7], *(json.loads(v) if isinstance(v, str | bytes) else v for v in row[7:]))


def _pool_facts(turn: _TurnToConfirm) -> list[ScopedFact]:
    return recorded_pool(turn.pool)


def recorded_pool(pool: Sequence[Mapping[str, Any]]) -> list[ScopedFact]:
    """A turn's recorded lexical pool (``Turn.pool``) as the candidates its confirm ranked."""
    return [ScopedFact.from_dict(item) for item in pool]


@dataclass
class PromptRanking:
    """The confirmed ranking of a turn: the prompt facts, what forgetting held back, every candidate,
    and the verdict on each (``{fact id: memory.engine.scoring.Verdict}``; a candidate's ``gate``
    says why the relevance gate let it pass or held it back)."""

    prompt: list[ScopedFact]
    held_back: list[ScopedFact]
    ranked: list[ScopedFact]
    verdicts: dict[int, str] = field(default_factory=dict)
    shown_out: list[int] = field(default_factory=list)  # candidates the conversation shows already, left out


def rank_pool(
    *,
    pool: Sequence[ScopedFact],
    query_vector: Any,
    person_ids: Sequence[int],
    text: str,
    stream_kind: str,
    now: int,
    limit: int,
    overrides: Mapping[str, Any],
    shown: frozenset[str] = frozenset(),
    told_known: Mapping[int, float] | None = None,
) -> PromptRanking:
    """The confirm step on a lexical pool, read-only (turn confirm, ``/actions/recall``,
    the console playground and trace-replay evaluation all call it).

    With a query vector the dense candidates of the same persons join the pool
    (no percentile cut for them); facts invalidated since the pool was built
    leave it; every candidate gets its cosine (one read of the persons' valid facts,
    ``selectors.dense_scope``; ``selectors.valid_fact_cosines`` for the rest) and is
    ranked by the engine's ``rank``; the eligible top ``limit`` is the prompt. A fact whose text is
    one of the lines the conversation ``shown`` (:func:`shown_in_conversation`) is no candidate,
    neither of the pool nor of the dense channel (which takes its top among the others).
    ``told_known`` — where-it-was-told shares read for this text already (:func:`selectors.rank_facts`).
    """
    shown_out: list[int] = []
    pool = _not_shown(list(pool), shown, shown_out)
    scope = None
    if query_vector is not None:
        scope = selectors.dense_scope(
            person_ids=person_ids, query_vector=query_vector, limit=limit, now=now, stream_kind=stream_kind,
            overrides=overrides, shown=shown, shown_out=shown_out,
        )
    if scope is None:
        still_valid, cosines = selectors.valid_fact_cosines([f.id for f in pool], query_vector)
    else:
        pool = selectors.merge_dense_candidates(pool, scope.candidates, query=text, tokens=scope.tokens,
                                                overrides=overrides)
        # the pool is the persons' facts: the scope's one read checks and ranks it; a fact it does
        # not cover (invalidated since, or moved to another person) is read on its own
        still_valid, cosines = set(scope.valid), scope.cosines
        others = [f.id for f in pool if f.id not in scope.valid]
        if others:
            valid_others, other_cosines = selectors.valid_fact_cosines(others, query_vector)
            still_valid |= valid_others
            cosines = cosines.merged(other_cosines)
    pool = [f for f in pool if f.id in still_valid]
    ranked = selectors.rank_facts(pool, overrides, cosines=cosines, window=selectors.query_window(text, now), query=text,
                                  told_known=told_known)
    prompt, held = prompt_facts(ranked, limit), held_back_facts(ranked, limit)
    return PromptRanking(prompt=prompt, held_back=held, ranked=ranked, verdicts=fact_verdicts(ranked, prompt, held),
                         shown_out=list(dict.fromkeys(shown_out)))


def fact_verdicts(ranked: Sequence[ScopedFact], prompt: Sequence[ScopedFact], held: Sequence[ScopedFact]) -> dict[int, str]:
    """:func:`memory.engine.scoring.verdicts` of a ranked pool whose prompt and forgetting's held-back
    list are known already."""
    in_prompt, forgotten = {f.id for f in prompt}, {f.id for f in held}
    return {
        f.id: Verdict.PROMPT if f.id in in_prompt else Verdict.FORGETTING if f.id in forgotten
        else Verdict.LIMIT if f.eligible else Verdict.GATE
        for f in ranked
    }


@dataclass
class ConfirmResult:
    turn_id: int
    facts: list[PromptFact]
    conflict_members: list[PromptFact]
    reinforced: list[int]
    used_vector: bool
    held_back: list[ScopedFact] = field(default_factory=list)


def confirm_turn(*, turn_id: int, query_embedding: Any = None, at: int | None = None) -> ConfirmResult:
    """The reply is going out: dense channel, fused re-rank, reinforce exactly the prompt facts.

    Confirming a turn twice raises :class:`TurnStateError`.
    """
    now = services.now_ms() if at is None else at
    overrides = _overrides()
    limit = fact_recall_limit(overrides)
    # the turn's row and, when there will be a vector, the facts of the persons it recorded as present
    # and its context's vectors go with the fact index's change log (PostgreSQL: one round trip)
    turn_read = _turn_read(turn_id)
    ahead = []
    if query_embedding is not None or provider_config.get_embedder(serving=True) is not None:
        ahead = [selectors.turn_dense_scope_read(turn_id), selectors.turn_context_vectors_read(turn_id)]
    with read_ahead.one_state("facts_fts", reads=[turn_read, *ahead]):
        turn = read_ahead.read(turn_read)
        if turn is None:
            raise TurnNotFound(f"turn {turn_id} not found")
        if turn.confirmed_at is not None:
            raise TurnStateError(f"turn {turn_id} was already confirmed")
        line, context = read_turn(turn.text, context_positions(turn.context_message_ids), overrides)
        shown: frozenset[str] = frozenset()
        if ahead:  # what was read ahead is what the dense channel reads (nothing when it was not sent)
            read_ahead.serve_from(ahead[0], selectors.dense_scope_read(turn.present_person_ids))
            if stored := [int(m) for m in turn.context_message_ids]:
                # the context's rows, once (read ahead on PostgreSQL, here on SQLite): the window's vectors
                # and the lines the conversation shows, none of which the dense channel may bring
                every = selectors.message_vectors_read(stored)
                read_ahead.serve_from(ahead[1], every)
                texts = selectors.message_texts(stored)
                window = [c.message_id for c in _dense_window(context, overrides) if c.message_id]
                read_ahead.serve_from(every, selectors.message_vectors_read(window), keep=lambda row: row[0] in window)
                shown = shown_in_conversation(context, overrides, texts)
        whole = read_whole(turn.text, line, context, overrides)
        vector = query_embedding if query_embedding is not None else _turn_vector(line, context, overrides, whole)
        query = conversation_query(vector, context, overrides, whole=whole)
        # the prepare's lexical pool ranked again, now with the vector (why: replay_turn_pool); where its
        # candidates were told was read by the prepare for this line, under the same profile unless it changed
        pool = _pool_facts(turn)
        same_profile = (turn.profile or {}).get("params") == dict(overrides)
        ranking = rank_pool(
            pool=pool, query_vector=query, person_ids=turn.present_person_ids, text=line,
            stream_kind=turn.stream_kind, now=turn.at, limit=limit, overrides=overrides, shown=shown,
            told_known={f.id: f.told for f in pool if f.told is not None} if same_profile else None,
        )
    ranked = ranking.prompt
    held = [f.id for f in ranking.held_back]
    prompt_ids = [f.id for f in ranked]
    event = {
        "stream_id": turn.stream_id, "stage": "turn", "kind": "memory_retrieval_confirmed",
        "payload": {
            "turnId": turn_id, "promptFactIds": prompt_ids, "usedVector": vector is not None,
            "heldBackFactIds": held, "promptTerms": [f.terms() for f in ranked],
            "gatedFactIds": [fid for fid, v in ranking.verdicts.items() if v == Verdict.GATE],
            "shownFactIds": ranking.shown_out,
        },
    }
    # the slot-conflict groups of the prompt are read with the write (PostgreSQL: in its round trip)
    members = selectors.conflict_members_read(conflict_keys(ranked))
    reinforced, groups = turn_store().confirm(
        turn_id, at=now, ranked=ranked, held_back_ids=held, event=event, also=members,
        line=_keep_as_line_vector(turn, line, vector, given=query_embedding is not None),
    )
    if reinforced is None:
        raise TurnStateError(f"turn {turn_id} was already confirmed")
    completed = complete_conflicts(ranked, now=turn.at, groups=groups if members is not None else {})
    return ConfirmResult(
        turn_id=turn_id,
        facts=[p for p in completed if not p.completed],
        conflict_members=[p for p in completed if p.completed],
        reinforced=reinforced,
        used_vector=vector is not None,
        held_back=ranking.held_back,
    )


# --- cognitive actions ------------------------------------------------------------------------


def _clip(text: str, limit: int = ITEM_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + TRUNCATED


def _person_names(person_ids: Sequence[int]) -> dict[int, str]:
    names = {pid: name for pid, name in Person.objects.filter(pk__in=person_ids).values_list("id", "display_name")}
    for pid, name in Identity.objects.filter(person_id__in=person_ids).values_list("person_id", "display_name"):
        if not names.get(pid) and name:
            names[pid] = name
    return {pid: names.get(pid) or f"#{pid}" for pid in person_ids}


@dataclass
class RecallResult:
    facts: list[ScopedFact]
    episodes: list[RecalledEpisode]
    spread: list[selectors.SpreadItem]
    observation: str
    blocked: dict[str, int]
    fell_back: bool = False
    held_back: list[ScopedFact] = field(default_factory=list)
    used_vector: bool = False


RECALL_FACT_LIMIT = 5


def cognitive_recall(
    *,
    stream_id: int,
    speaker_id: int,
    query: str,
    cross_person: bool = False,
    hops: int | None = None,
    at: int | None = None,
    query_embedding: Any = None,
) -> RecallResult:
    """The reference's ``recall`` action (docs/REFERENCE.md): facts and episodes, then association spreading.

    Facts are the confirmed ranking of a turn for ``query`` (:func:`rank_pool`: the
    lexical pool of the present persons, the dense channel when a query vector is at
    hand, the engine's ``rank``), top 5; across persons (direct streams only) the
    lexical pool of every person, ranked by the same function. ``held_back`` lists what
    forgetting ranked out. No fact is reinforced. Spread hits pass the read-side filters (superseded
    facts, facts not visible in this stream, episodes of other streams);
    knowledge is never filtered. Seeds and visible hits are linked together
    (edges grow only when items are lit together) and touched in the
    short-term activation.
    """
    now = services.now_ms() if at is None else at
    stream = _stream(stream_id)
    overrides = _overrides()
    if hops is None:
        hops = int(overrides.get("ppr_hops", spreading.RECALL_HOPS))
    persons = present_persons(
        stream_id=stream_id, speaker_id=speaker_id, before_id=selectors.latest_message_id(stream_id=stream_id)
    )
    vector = None
    if cross_person and stream.kind != "group":
        ranked = selectors.recall_facts_across_persons(
            query=query, limit=RECALL_FACT_LIMIT, now=now, stream_kind=stream.kind, return_candidates=True,
            overrides=overrides,
        )
        facts, held = prompt_facts(ranked, RECALL_FACT_LIMIT), held_back_facts(ranked, RECALL_FACT_LIMIT)
    else:
        pool = selectors.recall_facts_in_scope(
            person_ids=persons, query=query, limit=RECALL_FACT_LIMIT, now=now, stream_kind=stream.kind,
            return_candidates=True, overrides=overrides,
        )
        vector = query_embedding if query_embedding is not None else embed_query(query)
        ranking = rank_pool(
            pool=pool, query_vector=vector, person_ids=persons, text=query, stream_kind=stream.kind, now=now,
            limit=RECALL_FACT_LIMIT, overrides=overrides,
        )
        facts, held = ranking.prompt, ranking.held_back
    episodes = selectors.recall_episodes(stream_id=stream_id, query=query, limit=3)
    names = _person_names(list({f.person_id for f in facts}))
    if not facts and not episodes:
        observation = f"你想了一下，没有想起任何和「{query}」有关的事。"
        return RecallResult([], [], [], observation, {}, held_back=held, used_vector=vector is not None)
    lines = [f"关于「{query}」，你想起这些："]
    lines += [f"- 你记得关于{names[f.person_id]}：{_clip(f.content)}" for f in facts]
    lines += [f"- 你们聊过：{_clip(e.summary)}" for e in episodes]
    seeds = [("fact", f.id, f.score) for f in facts] + [("episode", e.id, e.score) for e in episodes]
    activation = selectors.short_term_activation()
    spreading_result = selectors.spread(seeds=seeds, now=now, hops=hops, limit=spreading.SPREAD_LIMIT, activation=activation)
    blocked = {"blockedEpisodes": 0, "blockedSuperseded": 0, "blockedScope": 0}
    visible: list[selectors.SpreadItem] = []
    fact_rows = Fact.objects.in_bulk([h.ref_id for h in spreading_result.hits if h.kind == "fact"])
    episode_rows = Episode.objects.in_bulk([h.ref_id for h in spreading_result.hits if h.kind == "episode"])
    for hit in spreading_result.hits:
        if hit.kind == "fact" and hit.ref_id in fact_rows:
            row = fact_rows[hit.ref_id]
            if not row.valid:
                blocked["blockedSuperseded"] += 1
                continue
            if not fact_visible_in_stream(row.origin_kind, stream.kind, private_in_group=private_facts_in_group()):
                blocked["blockedScope"] += 1
                continue
        if hit.kind == "episode" and hit.ref_id in episode_rows and episode_rows[hit.ref_id].stream_id != stream_id:
            blocked["blockedEpisodes"] += 1
            continue
        visible.append(hit)
    if blocked["blockedScope"]:
        services.emit_event("memory_fact_scope_blocked", {"streamKind": stream.kind, "blocked": blocked["blockedScope"]}, at=now)
    if visible:
        hit_names = _person_names([fact_rows[h.ref_id].person_id for h in visible if h.kind == "fact"])
        lines.append("顺带想起来的：")
        for h in visible:
            if h.kind == "fact":
                lines.append(f"- 还想到关于{hit_names[fact_rows[h.ref_id].person_id]}：{_clip(h.content)}")
            elif h.kind == "episode":
                lines.append(f"- 还想到你们聊过：{_clip(h.content)}")
            else:
                lines.append(f"- 还想到：{_clip(h.content)}")
    adopted = [(k, i) for k, i, _ in seeds] + [(h.kind, h.ref_id) for h in visible]
    services.link_together(refs=adopted, at=now)
    activation.touch([s.node_id for s in spreading_result.seeds] + [h.node_id for h in visible], now)
    services.emit_event(
        "memory_spread",
        {
            "query": query, "seeds": len(seeds), "spread": len(visible), "hops": hops,
            "blockedEpisodes": blocked["blockedEpisodes"], "blockedSuperseded": blocked["blockedSuperseded"],
            "blockedRebuild": 0, "crossPerson": cross_person,
        },
        at=now, stream_id=stream_id,
    )
    observation = "\n".join(lines)
    if len(observation) > OBSERVATION_LIMIT:
        observation = observation[:OBSERVATION_LIMIT] + TRUNCATED
    return RecallResult(
        facts, episodes, visible, observation, blocked, spreading_result.fell_back, held_back=held,
        used_vector=vector is not None,
    )


def inspect_messages(
    *, stream_id: int, query: str, before_message_id: int | None = None, limit: int = 6, query_embedding: Any = None
) -> list[Message]:
    """The reference's ``inspect`` action: the stream's chat history before the watermark, by relevance.

    bm25 over the stream's message index, fused with message-vector cosine when a
    query vector is available (given, or from the configured embedder): on MemDaily
    the fusion beats both bm25 and dense-only (BENCHMARKS.md).
    """
    _stream(stream_id)
    vector = query_embedding if query_embedding is not None else embed_query(query)
    return selectors.search_messages(
        stream_id=stream_id, query=query, before_id=before_message_id, limit=limit, query_vector=vector
    )


def consult_knowledge(
    *, query: str, limit: int = 5, at: int | None = None, query_embedding: Any = None, touch: bool = True
) -> list[selectors.KnowledgeHit]:
    """The reference's ``consult`` action: knowledge search, hits counted when shown."""
    vector = query_embedding if query_embedding is not None else embed_query(query)
    hits = selectors.search_knowledge(query=query, limit=limit, query_embedding=vector)
    if touch and hits:
        services.touch_knowledge(ids=[h.id for h in hits], at=at)
    return hits
