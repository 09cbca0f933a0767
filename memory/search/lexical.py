"""The lexical index's API: what every reader and writer of the FTS tables calls.

Contentless FTS5 tables (``facts_fts``, ``cues_fts``, ``knowledge_fts``, ``messages_fts``)
hold ``index_tokens`` of their row's text with ``rowid`` = the row's primary
key; facts and cues also carry an unweighted scope column (``person`` /
``stream``) so person- and stream-scoped queries rank only their own rows.
The writer of a row writes its FTS row (:func:`index_row`, :func:`index_fact`,
:func:`index_cue`) inside the same transaction (the reference makes rowid alignment
the writer's job, not a trigger's) and keeps the tokens on the row too.

``messages_fts`` indexes chat messages the same way, scoped by a ``stream``
column; ``inspect`` only ever searches one stream (:func:`message_candidates`).
FTS5 would read every query term's doclist over all streams for its IDF, so outside a
transaction the resident message statistics (:class:`memory.search.lexical_index.ResidentMessages`)
score the stream's rows with the same numbers; there is no pruning. A message without a searchable
term has no FTS row; a trigger deletes the FTS row of a deleted message.

Queries over a whole table (every person's facts, every stream's cues,
knowledge) would make FTS5 compute ``bm25()`` for most of the table. The
resident index (:mod:`memory.search.lexical_index`) answers them with the same scores
at a fraction of the cost; when it cannot (inside a transaction, a phrase term,
``LEXICAL_RESIDENT_INDEX`` off) FTS5 does, after dropping the terms whose
document frequency is above ``FTS_PRUNE_DF_RATIO`` of the rows (read from the
``*_vocab`` fts5vocab tables; tables under 2,000 rows are never pruned).
``bench/`` reports the top-10 agreement of both with unpruned bm25. While a web worker's warm-up
builds the resident index, the scoped readers here (a scope's facts, a stream's cues and messages)
take the statements, which give the same numbers, instead of waiting
(:func:`memory.search.lexical_index.warm_up_in_background`).

The statements themselves live with their backend, behind one seam chosen once per process
(:func:`memory.backends.lexical`): FTS5's in :mod:`memory.backends.sqlite` (with the vocab
pruning), and on PostgreSQL (``DATABASE_URL``) postings tables scored with the very same bm25
(:mod:`memory.backends.postgresql`): callers never see which backend ranked.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from memory import backends
from memory.backends.portable import FACT_COLUMNS, cue_rows, ranked_fact_rows
from memory.engine.bm25 import fts_tokens, scope_bm25
from memory.engine.tokenize import match_expression, query_terms, terms_of
from memory.search.lexical_index import SOURCES, message_weights, resident, resident_messages
from memory.search.read_ahead import Read, has, once, read

TABLES = ("facts_fts", "cues_fts", "knowledge_fts", "messages_fts")
_SCOPED = ("cues_fts", "facts_fts", "messages_fts")  # tables whose rows carry a person or stream
_SCOPE_TOKEN = re.compile(r"[ps]\d+")  # the person / stream columns' tokens


def _statements() -> backends.LexicalStatements:
    return backends.lexical()


def _check(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"unknown FTS table {table!r}")
    return table


def index_row(table: str, rowid: int, text: str) -> str:
    """Write the FTS row of ``rowid`` and return the tokens written (cues: :func:`index_cue`)."""
    return index_rows(table, [(rowid, text)])[0]


def index_rows(table: str, rows: Sequence[tuple[int, str]]) -> list[str]:
    """Bulk form of :func:`index_row` (``rows`` = ``(rowid, text)``)."""
    if _check(table) in _SCOPED:
        raise ValueError("cue, fact and message rows carry their scope: use index_cue(s) / index_fact(s) / index_messages")
    return _statements().index_rows(table, rows)


def index_fact(rowid: int, text: str, person_id: int) -> str:
    """Write the FTS row of a fact, with its person in the (unweighted) ``person`` column."""
    return index_facts([(rowid, text, person_id)])[0]


def index_facts(rows: Sequence[tuple[int, str, int]]) -> list[str]:
    """Bulk form of :func:`index_fact` (``rows`` = ``(rowid, text, person_id)``)."""
    return _statements().index_scoped("facts_fts", rows)


def index_cue(rowid: int, text: str, stream_id: int) -> str:
    """Write the FTS row of an episode cue, with its stream in the (unweighted) ``stream`` column."""
    return index_cues([(rowid, text, stream_id)])[0]


def index_cues(rows: Sequence[tuple[int, str, int]]) -> list[str]:
    """Bulk form of :func:`index_cue` (``rows`` = ``(rowid, text, stream_id)``)."""
    return _statements().index_scoped("cues_fts", rows)


def index_messages(rows: Sequence[tuple[int, str, int]]) -> list[str]:
    """Write the FTS rows of messages ``(rowid, text, stream_id)`` and keep their tokens on the rows.

    A message without a searchable term gets no FTS row (its stored tokens stay ``''``),
    so ``messages.tokens <> ''`` is exactly "has an FTS row" (the delete trigger relies on it).
    """
    return _statements().index_messages(rows)


def reindex_message(rowid: int, text: str, stream_id: int, old_tokens: str) -> str:
    """Replace a message's FTS row after its content changed (same transaction as the UPDATE)."""
    return _statements().reindex_message(rowid, text, stream_id, old_tokens)


class StreamScores(NamedTuple):
    """The resident index's bm25 of every message of one stream that matches (``ids`` ascending)."""

    ids: np.ndarray
    bm25: np.ndarray

    def top(self, limit: int) -> list[tuple[int, float]]:
        """``(id, bm25)`` best first, ties: newer first (:func:`message_candidates`' order)."""
        order = np.lexsort((-self.ids, self.bm25))[:limit]
        return [(int(self.ids[k]), float(self.bm25[k])) for k in order]

    def of(self, message_ids: Sequence[int]) -> dict[int, float]:
        """bm25 of those of ``message_ids`` that match (:func:`message_bm25`)."""
        keep = np.isin(self.ids, np.fromiter((int(i) for i in message_ids), dtype=np.int64))
        return {int(i): float(b) for i, b in zip(self.ids[keep], self.bm25[keep], strict=True)}


def resident_message_scores(match: str, *, stream_id: int, before_id: int | None = None) -> StreamScores | None:
    """One stream's matching messages scored at once by the resident message index (one poll of
    the change log, one pass over the stream): what :func:`message_candidates` and
    :func:`message_bm25` give, for a caller that wants both. ``None`` when they would ask FTS5
    or PostgreSQL's postings (inside a transaction, a phrase term, the index off)."""
    if not match:
        return None
    index = resident_messages()
    scored = index.scores(stream_id, terms_of(match), before_id=before_id) if index is not None else None
    return StreamScores(*scored) if scored is not None else None


def message_candidates(
    match: str, *, stream_id: int, before_id: int | None = None, limit: int
) -> list[tuple[int, float]]:
    """One stream's messages matching ``match``, best bm25 first (ties: newer first): ``(id, bm25)``.

    The terms are confined to ``tokens`` and the stream is ANDed in through the
    unweighted ``stream`` column, so FTS5 scores only that stream's rows; ``before_id``
    is a rowid bound FTS5 applies itself. Archived messages are included.
    """
    if not match or limit < 1:
        return []
    scored = resident_message_scores(match, stream_id=stream_id, before_id=before_id)
    if scored is not None:
        return scored.top(limit)  # best first, ties: newer first
    return _statements().message_candidates(match, stream_id=stream_id, before_id=before_id, limit=limit)


def message_bm25(match: str, *, stream_id: int, message_ids: Sequence[int]) -> dict[int, float]:
    """bm25 of specific messages of one stream (messages that do not match are absent).

    The resident message index when it can answer, else the backend's statements.
    """
    if not match or not message_ids:
        return {}
    index = resident_messages()
    scored = index.scores(stream_id, terms_of(match), rowids=message_ids) if index is not None else None
    if scored is not None:
        return {int(i): float(b) for i, b in zip(*scored, strict=True)}
    return _statements().message_bm25(match, stream_id=stream_id, message_ids=message_ids)


def delete_row(table: str, rowid: int, tokens: str) -> None:
    """Remove a contentless FTS row: FTS5 needs the exact tokens that were indexed (facts, cues:
    :func:`delete_fact_rows`, :func:`delete_cue_rows`)."""
    if _check(table) in _SCOPED:
        raise ValueError("cue, fact and message rows carry their scope: use delete_fact_rows / delete_cue_rows")
    _statements().delete_rows(table, [(rowid, tokens)])


def delete_fact_rows(rows: Sequence[tuple[int, str, int]]) -> None:
    """Remove facts' FTS rows ``(rowid, tokens, person_id)`` (the exact indexed values)."""
    _statements().delete_rows("facts_fts", rows)


def delete_cue_rows(rows: Sequence[tuple[int, str, int]]) -> None:
    """Remove episode cues' FTS rows ``(rowid, tokens, stream_id)``."""
    _statements().delete_rows("cues_fts", rows)


def clear(table: str) -> None:
    """Empty one lexical index (tests: FTS5 tables are not flushed with the rows)."""
    _statements().clear(_check(table))


def purge_deleted(tables: Sequence[str]) -> None:
    """Rewrite the tables' segments so deleted rows' terms leave the file, not only the index.

    A contentless FTS5 ``'delete'`` writes a tombstone; the old segment keeps the
    terms until a merge. ``'optimize'`` merges every segment into one now (forgetting
    is rare; with ``secure_delete`` the freed pages are zeroed). PostgreSQL: deleted
    postings are dead tuples until (auto)vacuum; nothing to do here.
    """
    _statements().purge_deleted([_check(table) for table in tables])


def document_count(table: str) -> int:
    """Rows in the index: the resident index's (the count its BM25 and document frequencies
    use, so no query); else the backend's, read once per :func:`~memory.search.read_ahead.one_state` (on
    PostgreSQL each query line of a turn would otherwise ask again; SQLite caches it a few seconds)."""
    index = resident(table) if table in SOURCES else None
    if index is not None:
        return len(index)
    name = _check(table)
    return once(("document_count", name), lambda: _statements().document_count(name))


def document_frequencies(table: str, terms: Sequence[str]) -> dict[str, int]:
    """Rows containing each single-token term (phrase terms are absent from the result)."""
    if not terms:
        return {}
    # the vocab table (PostgreSQL: the postings) reads each term's whole doclist; the resident index
    # counts the ``tokens`` column only, so a term shaped like a scope column's token (p12, s3) is left
    # to the vocab
    index = resident(table) if table in SOURCES and not any(_SCOPE_TOKEN.fullmatch(t) for t in terms) else None
    if index is not None:
        return index.document_frequencies(terms)
    return _statements().document_frequencies(_check(table), terms)


def message_statistics(terms: Sequence[str]) -> tuple[dict[str, int], int]:
    """``({term: messages holding it}, messages)`` over every stream, to weigh words by: the resident
    message statistics when they can answer (up to ``MESSAGE_WEIGHTS_MAX_AGE_S`` old:
    :func:`~memory.search.lexical_index.message_weights`), else the backend's (FTS5's vocabulary,
    PostgreSQL's postings)."""
    terms = [t for t in dict.fromkeys(terms) if t]
    index = message_weights()
    if index is not None and not any(_SCOPE_TOKEN.fullmatch(t) for t in terms):
        return index.statistics(terms)
    dfs = document_frequencies("messages_fts", terms) if terms else {}
    return {t: n for t, n in dfs.items() if n > 0}, document_count("messages_fts")


def match_for(table: str, text: str) -> str:
    """The MATCH expression for a user text ('' when it has no searchable term)."""
    _check(table)
    return match_expression(query_terms(text))


def _whole_table_top(table: str, match: str, limit: int, offset: int = 0) -> list[tuple[int, float]] | None:
    """Exact bm25 top rows of a whole table from the resident index, or ``None`` (ask FTS5)."""
    index = resident(table)
    return None if index is None else index.top(terms_of(match), limit, offset=offset)


class FactRow(NamedTuple):
    """A fact candidate as the lexical index returns it (``bm25``: FTS5's, negative, lower is better)."""

    id: int
    bm25: float
    person_id: int
    kind: str
    content: str
    slot: str
    origin_kind: str
    strength: float
    half_life_hours: float
    updated_at: int
    active: bool
    has_vector: bool
    tokens: str | None = None  # the stored index tokens, when the read had them (the turn's scoped reads)
    source_message_id: int | None = None  # the message it was heard in, when the read had it (the scoped reads)


class CueHit(NamedTuple):
    """An episode cue matching a query: its episode, the cue, the cue's bm25."""

    episode_id: int
    cue_id: int
    bm25: float


def _fact_rows(rows) -> list[FactRow]:
    return [FactRow(*r) for r in rows]


def fact_candidates(
    match: str, *, person_ids: Sequence[int] | None, limit: int, include_invalid: bool = False
) -> list[FactRow]:
    """Facts matching ``match`` ordered by bm25, as :class:`FactRow` (``id, bm25, person_id, kind,
    content, slot, origin_kind, strength, half_life_hours, updated_at, active, has_vector``).

    Superseded/invalidated facts are excluded unless ``include_invalid``; frozen facts are
    kept (they stay lexically recallable). ``person_ids=None`` ranks every person's facts
    (the resident index when it can answer, else the backend's statements: pruned FTS5 on SQLite).
    """
    if not match:
        return []
    if person_ids is not None and not person_ids:
        return []
    if person_ids is None:
        rows = _resident_fact_candidates(match, limit, include_invalid)
    else:
        rows = _resident_scoped_facts(match, person_ids, limit, include_invalid)
    if rows is None:
        rows = _statements().fact_candidates(match, person_ids=person_ids, limit=limit, include_invalid=include_invalid)
    return _fact_rows(rows)


def _resident_scoped_facts(
    match: str, person_ids: Sequence[int], limit: int, include_invalid: bool
) -> list[tuple] | None:
    """The resident-index form of a person-scoped :func:`fact_candidates` (``None``: ask FTS5).

    The persons' facts are read by their ``person_id`` index and scored by the resident
    index with the whole table's statistics — FTS5's bm25 of the ``tokens : (…) AND
    person : (…)`` query, whose person phrases weigh 0 — instead of FTS5 reading every query
    term's doclist over all persons for its IDF. Ties: lower id first. Inside
    :func:`~memory.search.read_ahead.one_state` (a turn) the scope's rows, stored tokens included, are read once for
    all the turn's query lines.
    """
    index = resident("facts_fts", wait=False)
    if index is None:
        return None
    scope = read(scope_read(person_ids, include_invalid=include_invalid))
    scored = index.scores_for(terms_of(match), list(scope))
    if scored is None:
        return None
    ids, bm25 = scored
    ranked = [(int(ids[k]), float(bm25[k])) for k in np.lexsort((ids, bm25))[:limit]]
    return [(fid, b, *scope[fid][2:]) for fid, b in ranked]


class FactScope:
    """The facts a person-scoped query ranks — the present persons' valid facts, ``{fact id: stored
    tokens}`` — and bm25 with *their* statistics (:func:`memory.engine.bm25.scope_bm25`): a turn
    ranks only these facts, and a word rare in the whole table but in half of them (a person's
    name) must not decide between them. The resident index computes the numbers at the cost of
    the scope's rows (:meth:`~memory.search.lexical_index.ResidentBM25.scope_scores`); without it
    (inside a transaction, a phrase term, the index off) they are computed from the stored
    tokens — the same doubles on both backends."""

    def __init__(self, tokens: Mapping[int, str | None], rows: Mapping[int, tuple] | None = None) -> None:
        self.tokens = tokens
        self.rows = rows  # the facts' rows, when read (:func:`fact_scope`)
        self._docs: dict[int, list[str]] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def docs(self) -> dict[int, list[str]]:
        if self._docs is None:
            self._docs = {fid: fts_tokens(tokens or "") for fid, tokens in self.tokens.items()}
        return self._docs

    def bm25(self, match: str) -> dict[int, float]:
        """``{fact id: bm25}`` of the scope's facts matching ``match`` (negative, lower is better)."""
        terms = terms_of(match)
        if not terms or not self.tokens:
            return {}
        index = resident("facts_fts", wait=False)
        scored = index.scope_scores(terms, list(self.tokens)) if index is not None else None
        if scored is not None:
            return {int(i): float(b) for i, b in zip(*scored, strict=True)}
        phrases = [toks for toks in (fts_tokens(t) for t in terms) if toks]
        return scope_bm25(phrases, self.docs(), extra_tokens=SOURCES["facts_fts"].extra_tokens)

    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """Facts of the scope holding each single-token term (absent: none)."""
        if not terms or not self.tokens:
            return {}
        index = resident("facts_fts", wait=False)
        found = index.scope_frequencies(terms, list(self.tokens)) if index is not None else None
        if found is not None:
            return found
        out: dict[str, int] = {}
        held = [set(doc) for doc in self.docs().values()]
        for term in dict.fromkeys(terms):
            df = sum(1 for doc in held if term in doc)
            if df:
                out[term] = df
        return out


def fact_scope(person_ids: Sequence[int]) -> FactScope:
    """The :class:`FactScope` of ``person_ids`` (their valid facts, rows read by :func:`scope_read`),
    once per :func:`~memory.search.read_ahead.one_state`."""

    def build() -> FactScope:
        rows = read(scope_read(person_ids))
        return FactScope({fid: row[_SCOPE_TOKENS] for fid, row in rows.items()}, rows)

    return once(("fact_scope", _scope_key(person_ids, False)), build)


def scoped_fact_candidates(match: str, *, scope: FactScope, limit: int) -> list[FactRow]:
    """The facts of ``scope`` (:func:`fact_scope`) matching ``match`` ordered by bm25 over the scope's
    own statistics (ties: lower id first), as :class:`FactRow` with their stored tokens."""
    if not match or scope.rows is None:
        return []
    ranked = sorted(scope.bm25(match).items(), key=lambda kv: (kv[1], kv[0]))[:limit]
    return [FactRow(fid, b, *scope.rows[fid][2:]) for fid, b in ranked]


_SCOPE_SQL = f"SELECT {FACT_COLUMNS.format(bm25='0')}, f.tokens, f.source_message_id FROM facts f WHERE {{persons}}{{valid}}"
_SCOPE_TOKENS = 12  # the stored tokens' place in a row of _SCOPE_SQL (the message it was heard in: the next)


def scope_read(person_ids: Sequence[int], *, include_invalid: bool = False) -> Read:
    """The persons' facts a person-scoped :func:`fact_candidates` scores, stored tokens included:
    ``{fact id: row}``; read once per :func:`~memory.search.read_ahead.one_state` (a turn) for all its query lines."""
    key = _scope_key(person_ids, include_invalid)
    persons = key[1]
    return Read(key, _SCOPE_SQL.format(persons=f"f.person_id IN ({backends.in_placeholders(persons)})",
                                       valid=_valid(include_invalid)), persons, rows_by_id)


def _scope_key(person_ids: Sequence[int], include_invalid: bool) -> tuple:
    return "person_facts", tuple(dict.fromkeys(int(p) for p in person_ids)), include_invalid


def present_scope_read(speakers: Read, speaker_id: int) -> Read:
    """:func:`scope_read` of a turn's present persons — ``speaker_id`` and the persons ``speakers``
    (a read of person ids, as its own subquery) returns — sent before they are known, with a turn's
    other reads (:func:`~memory.search.read_ahead.one_state`); :func:`scope_of` files it under the persons' key once they are.
    """
    persons = backends.in_subquery_sql("f.person_id", f"SELECT CAST(%s AS BIGINT) UNION SELECT * FROM ({speakers.sql}) speakers")
    return Read(("present_facts", speakers.key, speaker_id), _SCOPE_SQL.format(persons=persons, valid=_valid(False)),
                [speaker_id, *speakers.params], rows_by_id)


def scope_of(person_ids: Sequence[int], present: Read) -> None:
    """Inside :func:`~memory.search.read_ahead.one_state`: ``present`` (:func:`present_scope_read`), when it was sent ahead with
    the block's reads, is the scope of ``person_ids`` (else their scope is read when first needed).

    On PostgreSQL the present persons and their facts are two statements of one round trip, each
    with its own snapshot: a sender whose message (with an id below the turn's) committed between
    the two may be in one and not the other. The facts of a person not in ``person_ids`` are
    dropped; a person missing from the read has no facts in this turn's scope (their next turn has).
    """
    if has(present):
        persons = set(person_ids)
        rows = read(present)
        once(_scope_key(person_ids, False), lambda: {fid: row for fid, row in rows.items() if row[2] in persons})


def _valid(include_invalid: bool) -> str:
    return "" if include_invalid else " AND f.superseded_by IS NULL"


def rows_by_id(rows: list[tuple]) -> dict[int, tuple]:
    """A read's rows by their first column, the id (a :class:`Read`'s ``convert``)."""
    return {row[0]: row for row in rows}


def _resident_fact_candidates(match: str, limit: int, include_invalid: bool) -> list[tuple] | None:
    """The resident-index form of :func:`fact_candidates` over every person (``None``: ask FTS5).

    Ranked ids come in growing batches until ``limit`` valid facts are found.
    """
    first = _whole_table_top("facts_fts", match, max(limit, 16))
    if first is None:
        return None

    def batches() -> Iterator[list[tuple[int, float]]]:
        hits, offset, batch = first, 0, max(limit, 16)
        while hits:
            yield hits
            if len(hits) < batch:
                return
            offset, batch = offset + batch, batch * 2
            hits = _whole_table_top("facts_fts", match, batch, offset)

    return ranked_fact_rows(batches(), include_invalid=include_invalid, limit=limit)


def fact_bm25(match: str, fact_ids: Sequence[int]) -> dict[int, float]:
    """Real bm25 of specific facts for ``match`` (facts that do not match are absent).

    The resident index scores just these rows; else (inside a transaction) the backend's statements.
    """
    if not match or not fact_ids:
        return {}
    index = resident("facts_fts", wait=False)
    scored = index.scores_for(terms_of(match), fact_ids) if index is not None else None
    if scored is not None:
        return {int(i): float(b) for i, b in zip(*scored, strict=True)}
    return _statements().fact_bm25(match, fact_ids)


def similar_fact_candidates(match: str, *, person_id: int, limit: int = 8) -> list[tuple[int, str]]:
    """Valid facts (active or frozen) of one person for duplicate detection: ``(id, content)``."""
    if not match:
        return []
    return _statements().similar_facts(match, person_id=person_id, limit=limit)


def fact_matches(match: str, *, person_id: int, limit: int) -> list[tuple[int, str]] | None:
    """The valid facts of one person matching ``match``, ``(id, content)`` in id order, when there are at
    most ``limit`` of them; ``None`` when there are more (then their bm25 order decides which are
    :func:`similar_fact_candidates`). Scored by nothing, so it never reads a term's document frequency,
    which on either backend counts every row of the table holding the term: cost that grows with the
    store, for an order that does not matter while all of the matches fit."""
    if not match:
        return []
    return _statements().fact_matches(match, person_id=person_id, limit=limit)


def cue_candidates(match: str, *, stream_id: int | None, limit: int) -> list[CueHit]:
    """Cue hits ordered by bm25 (:class:`CueHit`: ``episode_id, cue_id, bm25``); placeholders have no cues.

    The user terms are confined to the ``tokens`` column; a stream is selected with
    ``stream : "s<id>"`` so FTS5 ranks only that stream's cues. The ``stream``
    column has weight 0 in bm25. ``stream_id=None`` ranks every stream's cues (the
    resident index when it can answer, else the backend's statements: pruned FTS5 on SQLite).
    """
    if not match:
        return []
    if stream_id is None:
        hits = _whole_table_top("cues_fts", match, limit)
        rows = None if hits is None else cue_rows(hits)
    else:
        rows = _resident_stream_cues(match, stream_id, limit)
    if rows is None:
        rows = _statements().cue_candidates(match, stream_id=stream_id, limit=limit)
    return [CueHit(*h) for h in rows]


def _resident_stream_cues(match: str, stream_id: int, limit: int) -> list[tuple[int, int, float]] | None:
    """The resident-index form of a stream-scoped :func:`cue_candidates` (``None``: ask FTS5):
    the stream's cues (summarised episodes) scored with the whole table's statistics. Ties:
    lower cue id first."""
    index = resident("cues_fts", wait=False)
    if index is None:
        return None
    episode_of = read(stream_cues_read(stream_id))
    scored = index.scores_for(terms_of(match), list(episode_of))
    if scored is None:
        return None
    ids, bm25 = scored
    order = np.lexsort((ids, bm25))[:limit]
    return [(episode_of[int(ids[k])], int(ids[k]), float(bm25[k])) for k in order]


def stream_cues_read(stream_id: int) -> Read:
    """The cues of a stream's summarised episodes, ``{cue id: episode id}`` (what a stream-scoped
    :func:`cue_candidates` scores), as a read a turn sends with its others (:func:`~memory.search.read_ahead.one_state`)."""
    return Read(("stream_cues", stream_id),
                "SELECT c.id, c.episode_id FROM episode_cues c JOIN episodes e ON e.id = c.episode_id"
                " WHERE e.stream_id = %s AND e.kind <> 'unsummarized'", [stream_id], dict)


def knowledge_candidates(match: str, *, limit: int) -> list[tuple[int, float]]:
    """Knowledge hits ordered by bm25: ``(id, bm25)`` (resident index, else the backend's: pruned FTS5 on SQLite)."""
    if not match:
        return []
    hits = _whole_table_top("knowledge_fts", match, limit)
    if hits is not None:
        return hits
    return _statements().knowledge_candidates(match, limit=limit)


def knowledge_bm25(match: str, ids: Sequence[int]) -> dict[int, float]:
    """Real (unpruned) bm25 of specific knowledge rows; rows that do not match are absent."""
    if not match or not ids:
        return {}
    index = resident("knowledge_fts")
    scores = index.bm25_for(terms_of(match), ids) if index is not None else None
    if scores is not None:
        return scores
    return _statements().knowledge_bm25(match, ids)


def rows_containing(table: str, match: str, *, limit: int) -> list[int]:
    """Up to ``limit`` rowids matching ``match`` in rowid order (no ranking: FTS5 stops early)."""
    if not match:
        return []
    return _statements().rows_containing(_check(table), match, limit=limit)


def unpruned_top(table: str, match: str, *, limit: int) -> list[tuple[int, float]]:
    """FTS5's own ranking of a whole table, every term kept: ``(rowid, bm25)`` best first.

    The reference the resident index and pruning are measured against (tests, ``bench/``);
    it ranks every matching row, so it is slow on large tables.
    """
    if not match:
        return []
    return _statements().unpruned_top(_check(table), match, limit=limit)
