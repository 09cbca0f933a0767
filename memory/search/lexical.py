"""The lexical index: every FTS5-specific statement of the project lives here.

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
``bench/`` reports the top-10 agreement of both with unpruned bm25.

On PostgreSQL (``DATABASE_URL``) every function here answers from postings tables
with the very same bm25 (:mod:`memory.backends.postgresql`): callers never see which
backend ranked.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np
from django.conf import settings
from django.db import connection

from memory import backends
from memory.backends import is_postgresql, postgresql
from memory.engine.bm25 import fts_tokens, scope_bm25
from memory.engine.tokenize import index_tokens, match_expression, query_terms
from memory.search.lexical_index import SOURCES, resident, resident_messages
from memory.search.read_ahead import Read, has, once, read

TABLES = ("facts_fts", "cues_fts", "knowledge_fts", "messages_fts")
#: where each FTS table's rows keep their indexed tokens: (table, column)
_TOKEN_COLUMNS = {name: (src.table, src.tokens) for name, src in SOURCES.items()} | {"messages_fts": ("messages", "tokens")}

PRUNE_MIN_DOCS = 2000      # below this many rows every term is kept
# terms found in more than settings.FTS_PRUNE_DF_RATIO of the rows are dropped …
PRUNE_KEEP_AT_LEAST = 3    # … but always keep the rarest few matching terms
_DOC_COUNT_TTL = 5.0       # seconds a cached row count is trusted

_doc_counts: dict[str, tuple[float, int]] = {}
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
_SCOPE_TOKEN = re.compile(r"[ps]\d+")  # the person / stream columns' tokens


def _check(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"unknown FTS table {table!r}")
    return table


def index_row(table: str, rowid: int, text: str) -> str:
    """Write the FTS row of ``rowid`` and return the tokens written (cues: :func:`index_cue`)."""
    return index_rows(table, [(rowid, text)])[0]


def index_rows(table: str, rows: Sequence[tuple[int, str]]) -> list[str]:
    """Bulk form of :func:`index_row` (``rows`` = ``(rowid, text)``)."""
    if _check(table) in ("cues_fts", "facts_fts", "messages_fts"):
        raise ValueError("cue, fact and message rows carry their scope: use index_cue(s) / index_fact(s) / index_messages")
    if is_postgresql():
        return postgresql.index_rows(table, rows)
    payload = [(rowid, index_tokens(text)) for rowid, text in rows]
    with connection.cursor() as cur:
        cur.executemany(f"INSERT INTO {table}(rowid, tokens) VALUES (%s, %s)", payload)
        _store_tokens(cur, table, payload)
    _doc_counts.pop(table, None)
    return [tokens for _, tokens in payload]


def _store_tokens(cur, table: str, payload: Sequence[tuple]) -> None:
    """Keep the tokens beside the row too (the resident index loads them from there)."""
    rows, column = _TOKEN_COLUMNS[table]
    cur.executemany(f"UPDATE {rows} SET {column} = %s WHERE id = %s", [(p[1], p[0]) for p in payload])


def _person_token(person_id: int) -> str:
    return f"p{int(person_id)}"


def index_fact(rowid: int, text: str, person_id: int) -> str:
    """Write the FTS row of a fact, with its person in the (unweighted) ``person`` column."""
    return index_facts([(rowid, text, person_id)])[0]


def _index_scoped(table: str, column: str, rows: Sequence[tuple[int, str, str]]) -> list[str]:
    """Insert ``(rowid, text, scope token)`` rows into a table with an unweighted scope column."""
    if is_postgresql():
        return postgresql.index_scoped(table, [(r, text, int(scope[1:])) for r, text, scope in rows])
    payload = [(rowid, index_tokens(text), scope) for rowid, text, scope in rows]
    with connection.cursor() as cur:
        cur.executemany(f"INSERT INTO {table}(rowid, tokens, {column}) VALUES (%s, %s, %s)", payload)
        _store_tokens(cur, table, payload)
    _doc_counts.pop(table, None)
    return [tokens for _, tokens, _ in payload]


def index_facts(rows: Sequence[tuple[int, str, int]]) -> list[str]:
    """Bulk form of :func:`index_fact` (``rows`` = ``(rowid, text, person_id)``)."""
    return _index_scoped("facts_fts", "person", [(r, text, _person_token(p)) for r, text, p in rows])


def _fact_expression(match: str, person_ids: Sequence[int] | None) -> str:
    """User terms confined to ``tokens``; persons selected through the ``person`` column."""
    expression = f"tokens : ({match})"
    if person_ids is not None:
        persons = " OR ".join(f'"{_person_token(p)}"' for p in dict.fromkeys(person_ids))
        expression += f" AND person : ({persons})"
    return expression


def _stream_token(stream_id: int) -> str:
    return f"s{int(stream_id)}"


def index_cue(rowid: int, text: str, stream_id: int) -> str:
    """Write the FTS row of an episode cue, with its stream in the (unweighted) ``stream`` column."""
    return index_cues([(rowid, text, stream_id)])[0]


def index_cues(rows: Sequence[tuple[int, str, int]]) -> list[str]:
    """Bulk form of :func:`index_cue` (``rows`` = ``(rowid, text, stream_id)``)."""
    return _index_scoped("cues_fts", "stream", [(r, text, _stream_token(s)) for r, text, s in rows])


def index_messages(rows: Sequence[tuple[int, str, int]]) -> list[str]:
    """Write the FTS rows of messages ``(rowid, text, stream_id)`` and keep their tokens on the rows.

    A message without a searchable term gets no FTS row (its stored tokens stay ``''``),
    so ``messages.tokens <> ''`` is exactly "has an FTS row" (the delete trigger relies on it).
    """
    if is_postgresql():
        return postgresql.index_messages(rows)
    payload = [(rowid, index_tokens(text or ""), _stream_token(s)) for rowid, text, s in rows]
    indexed = [p for p in payload if p[1]]
    if indexed:
        with connection.cursor() as cur:
            cur.executemany("INSERT INTO messages_fts(rowid, tokens, stream) VALUES (%s, %s, %s)", indexed)
            _store_tokens(cur, "messages_fts", indexed)
    return [tokens for _, tokens, _ in payload]


def reindex_message(rowid: int, text: str, stream_id: int, old_tokens: str) -> str:
    """Replace a message's FTS row after its content changed (same transaction as the UPDATE)."""
    if is_postgresql():
        return postgresql.reindex_message(rowid, text, stream_id, old_tokens)
    if old_tokens:
        with connection.cursor() as cur:
            cur.execute(
                "INSERT INTO messages_fts(messages_fts, rowid, tokens, stream) VALUES ('delete', %s, %s, %s)",
                [rowid, old_tokens, _stream_token(stream_id)],
            )
            cur.execute("UPDATE messages SET tokens = '' WHERE id = %s", [rowid])
    return index_messages([(rowid, text, stream_id)])[0]


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
    if is_postgresql():
        return postgresql.message_candidates(terms_of(match), stream_id=stream_id, before_id=before_id, limit=limit)
    params: list = [f'tokens : ({match}) AND stream : "{_stream_token(stream_id)}"']
    where = "messages_fts MATCH %s"
    if before_id is not None:
        where += " AND messages_fts.rowid < %s"
        params.append(before_id)
    params.append(limit)
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT rowid, bm25(messages_fts, 1.0, 0.0) AS b FROM messages_fts WHERE {where}"
            " ORDER BY b, rowid DESC LIMIT %s",
            params,
        )
        return [(int(r), float(b)) for r, b in cur.fetchall()]


def message_bm25(match: str, *, stream_id: int, message_ids: Sequence[int]) -> dict[int, float]:
    """bm25 of specific messages of one stream (messages that do not match are absent).

    One MATCH over the ids' rowid range, filtered here: ``rowid IN (…)`` would make
    FTS5 run the whole query once per id.
    """
    if not match or not message_ids:
        return {}
    index = resident_messages()
    scored = index.scores(stream_id, terms_of(match), rowids=message_ids) if index is not None else None
    if scored is not None:
        return {int(i): float(b) for i, b in zip(*scored, strict=True)}
    if is_postgresql():
        return postgresql.message_bm25(terms_of(match), stream_id=stream_id, message_ids=message_ids)
    wanted = {int(i) for i in message_ids}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT rowid, bm25(messages_fts, 1.0, 0.0) FROM messages_fts"
            " WHERE messages_fts MATCH %s AND rowid BETWEEN %s AND %s",
            [f'tokens : ({match}) AND stream : "{_stream_token(stream_id)}"', min(wanted), max(wanted)],
        )
        return {int(r): float(b) for r, b in cur.fetchall() if int(r) in wanted}


def delete_row(table: str, rowid: int, tokens: str) -> None:
    """Remove a contentless FTS row: FTS5 needs the exact tokens that were indexed."""
    name = _check(table)
    if is_postgresql():
        return postgresql.delete_rows(name, [rowid])
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO {name}({name}, rowid, tokens) VALUES ('delete', %s, %s)", [rowid, tokens])
    _doc_counts.pop(table, None)


def delete_fact_rows(rows: Sequence[tuple[int, str, int]]) -> None:
    """Remove facts' FTS rows ``(rowid, tokens, person_id)`` (the exact indexed values)."""
    _delete_scoped("facts_fts", "person", [(r, t, _person_token(p)) for r, t, p in rows])


def delete_cue_rows(rows: Sequence[tuple[int, str, int]]) -> None:
    """Remove episode cues' FTS rows ``(rowid, tokens, stream_id)``."""
    _delete_scoped("cues_fts", "stream", [(r, t, _stream_token(s)) for r, t, s in rows])


def _delete_scoped(table: str, column: str, rows: Sequence[tuple[int, str, str]]) -> None:
    payload = [row for row in rows if row[1]]
    if is_postgresql():
        return postgresql.delete_rows(table, [row[0] for row in rows])
    if payload:
        with connection.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table}({table}, rowid, tokens, {column}) VALUES ('delete', %s, %s, %s)", payload
            )
    _doc_counts.pop(table, None)


def clear(table: str) -> None:
    """Empty one lexical index (tests: FTS5 tables are not flushed with the rows)."""
    name = _check(table)
    if is_postgresql():
        return postgresql.clear(name)
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO {name}({name}) VALUES ('delete-all')")
    _doc_counts.pop(name, None)


def purge_deleted(tables: Sequence[str]) -> None:
    """Rewrite the tables' segments so deleted rows' terms leave the file, not only the index.

    A contentless FTS5 ``'delete'`` writes a tombstone; the old segment keeps the
    terms until a merge. ``'optimize'`` merges every segment into one now (forgetting
    is rare; with ``secure_delete`` the freed pages are zeroed). PostgreSQL: deleted
    postings are dead tuples until (auto)vacuum; nothing to do here.
    """
    if is_postgresql():
        return
    with connection.cursor() as cur:
        for table in dict.fromkeys(tables):
            name = _check(table)
            cur.execute(f"INSERT INTO {name}({name}) VALUES ('optimize')")


def document_count(table: str) -> int:
    """Rows in the index: the resident index's (the count its BM25 and document frequencies
    use, so no query); else cached for a few seconds on SQLite, read once per :func:`~memory.search.read_ahead.one_state`
    on PostgreSQL, where each query line of a turn would otherwise ask again."""
    index = resident(table) if table in SOURCES else None
    if index is not None:
        return len(index)
    if is_postgresql():
        name = _check(table)
        return once(("document_count", name), lambda: postgresql.document_count(name))
    hit = _doc_counts.get(table)
    now = time.monotonic()
    if hit and now - hit[0] < _DOC_COUNT_TTL:
        return hit[1]
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {_check(table)}_docsize")
        count = int(cur.fetchone()[0])
    _doc_counts[table] = (now, count)
    return count


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
    if is_postgresql():
        return postgresql.document_frequencies(_check(table), terms)
    placeholders = backends.in_placeholders(terms)
    with connection.cursor() as cur:
        cur.execute(f"SELECT term, doc FROM {_check(table)}_vocab WHERE term IN ({placeholders})", list(terms))
        return {term: int(doc) for term, doc in cur.fetchall()}


def _is_single_token(term: str) -> bool:
    return all(ch.isalnum() for ch in term)


def prune_terms(table: str, terms: list[str]) -> list[str]:
    """Drop query terms too common to change the ranking (see the module docstring)."""
    total = document_count(table)
    if total < PRUNE_MIN_DOCS or len(terms) <= PRUNE_KEEP_AT_LEAST:
        return terms
    df = document_frequencies(table, [t for t in terms if _is_single_token(t)])
    limit = settings.FTS_PRUNE_DF_RATIO * total
    kept = [t for t in terms if not _is_single_token(t) or 0 < df.get(t, 0) <= limit]
    if len(kept) >= PRUNE_KEEP_AT_LEAST:
        return kept
    matching = sorted((df[t], i, t) for i, t in enumerate(terms) if df.get(t, 0) > 0)
    rarest = {t for _, _, t in matching[:PRUNE_KEEP_AT_LEAST]}
    return [t for t in terms if t in rarest or (not _is_single_token(t))]


def terms_of(match: str) -> list[str]:
    """The terms of a MATCH expression built by :func:`match_for` (quotes undone)."""
    return [t.replace('""', '"') for t in _QUOTED.findall(match)]


def match_for(table: str, text: str) -> str:
    """The MATCH expression for a user text ('' when it has no searchable term)."""
    _check(table)
    return match_expression(query_terms(text))


def _pruned(table: str, match: str) -> str:
    """``match`` without the terms :func:`prune_terms` drops (the FTS5 path of a whole-table query)."""
    return match_expression(prune_terms(table, terms_of(match)))


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


class CueHit(NamedTuple):
    """An episode cue matching a query: its episode, the cue, the cue's bm25."""

    episode_id: int
    cue_id: int
    bm25: float


def _fact_rows(rows) -> list[FactRow]:
    return [FactRow(*r) for r in rows]


_FACT_COLUMNS = (
    "f.id, {bm25}, f.person_id, f.kind, f.content, f.slot, f.origin_kind,"
    " f.strength, f.half_life_hours, f.updated_at, f.active, f.embedding_q8 IS NOT NULL"
)


def fact_candidates(
    match: str, *, person_ids: Sequence[int] | None, limit: int, include_invalid: bool = False
) -> list[FactRow]:
    """Facts matching ``match`` ordered by bm25, as :class:`FactRow` (``id, bm25, person_id, kind,
    content, slot, origin_kind, strength, half_life_hours, updated_at, active, has_vector``).

    Superseded/invalidated facts are excluded unless ``include_invalid``; frozen facts are
    kept (they stay lexically recallable). ``person_ids=None`` ranks every person's facts
    (the resident index when it can answer, else pruned FTS5).
    """
    if not match:
        return []
    if person_ids is not None and not person_ids:
        return []
    if person_ids is None:
        rows = _resident_fact_candidates(match, limit, include_invalid)
    else:
        rows = _resident_scoped_facts(match, person_ids, limit, include_invalid)
    if rows is not None:
        return _fact_rows(rows)
    if is_postgresql():
        ranked = postgresql.fact_scores(terms_of(match), person_ids)
        return _fact_rows(_ranked_fact_rows(_chunks(ranked, limit), include_invalid=include_invalid, limit=limit))
    if person_ids is None:
        match = _pruned("facts_fts", match) or match
    where = ["facts_fts MATCH %s"]
    params: list = [_fact_expression(match, person_ids)]
    if not include_invalid:
        where.append("f.superseded_by IS NULL")
    params.append(limit)
    sql = (
        f"SELECT {_FACT_COLUMNS.format(bm25='bm25(facts_fts, 1.0, 0.0) AS b')}"
        " FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid"
        f" WHERE {' AND '.join(where)} ORDER BY b LIMIT %s"
    )
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return _fact_rows(cur.fetchall())


def _ranked_fact_rows(
    batches: Iterable[Sequence[tuple[int, float]]], *, include_invalid: bool, limit: int, columns: str = _FACT_COLUMNS
) -> list[tuple]:
    """Rows of ranked facts, in rank order, until ``limit``: ``columns`` (``f.id, {bm25}, …``) with the ranking's bm25.

    ``batches`` yields the ranking ``(id, bm25)`` batch by batch, best first; each batch is
    read with one ``id IN (…)`` query (superseded facts dropped unless ``include_invalid``)
    and no batch is asked for once ``limit`` rows are found. The one place fact rows are
    fetched for ranked ids (resident index, PostgreSQL postings).
    """
    rows: list[tuple] = []
    valid = "" if include_invalid else " AND f.superseded_by IS NULL"
    for batch in batches:
        if not batch:
            break
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT {columns.format(bm25='0')} FROM facts f WHERE f.id IN ({backends.in_placeholders(batch)}){valid}",
                [fid for fid, _ in batch],
            )
            found = {r[0]: r for r in cur.fetchall()}
        rows += [(fid, b, *found[fid][2:]) for fid, b in batch if fid in found]
        if len(rows) >= limit:
            break
    return rows[:limit]


def _chunks(ranked: Sequence[tuple[int, float]], limit: int) -> Iterator[Sequence[tuple[int, float]]]:
    """A whole ranking in batches for :func:`_ranked_fact_rows` and PostgreSQL's cues (a batch covers ``limit``
    when few rows drop out)."""
    step = max(limit, 64)
    for start in range(0, len(ranked), step):
        yield ranked[start:start + step]


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
    index = resident("facts_fts")
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
        index = resident("facts_fts")
        scored = index.scope_scores(terms, list(self.tokens)) if index is not None else None
        if scored is not None:
            return {int(i): float(b) for i, b in zip(*scored, strict=True)}
        phrases = [toks for toks in (fts_tokens(t) for t in terms) if toks]
        return scope_bm25(phrases, self.docs(), extra_tokens=SOURCES["facts_fts"].extra_tokens)

    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """Facts of the scope holding each single-token term (absent: none)."""
        if not terms or not self.tokens:
            return {}
        index = resident("facts_fts")
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
        return FactScope({fid: row[-1] for fid, row in rows.items()}, rows)

    return once(("fact_scope", _scope_key(person_ids, False)), build)


def scoped_fact_candidates(match: str, *, scope: FactScope, limit: int) -> list[FactRow]:
    """The facts of ``scope`` (:func:`fact_scope`) matching ``match`` ordered by bm25 over the scope's
    own statistics (ties: lower id first), as :class:`FactRow` with their stored tokens."""
    if not match or scope.rows is None:
        return []
    ranked = sorted(scope.bm25(match).items(), key=lambda kv: (kv[1], kv[0]))[:limit]
    return [FactRow(fid, b, *scope.rows[fid][2:]) for fid, b in ranked]


_SCOPE_SQL = f"SELECT {_FACT_COLUMNS.format(bm25='0')}, f.tokens_v2 FROM facts f WHERE {{persons}}{{valid}}"


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

    return _ranked_fact_rows(batches(), include_invalid=include_invalid, limit=limit)


def fact_bm25(match: str, fact_ids: Sequence[int]) -> dict[int, float]:
    """Real bm25 of specific facts for ``match`` (facts that do not match are absent).

    The resident index scores just these rows; FTS5 (inside a transaction) runs the whole
    query once per id of ``rowid IN (…)``.
    """
    if not match or not fact_ids:
        return {}
    index = resident("facts_fts")
    scored = index.scores_for(terms_of(match), fact_ids) if index is not None else None
    if scored is not None:
        return {int(i): float(b) for i, b in zip(*scored, strict=True)}
    if is_postgresql():
        return postgresql.fact_bm25(terms_of(match), fact_ids)
    placeholders = backends.in_placeholders(fact_ids)
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT rowid, bm25(facts_fts, 1.0, 0.0) FROM facts_fts WHERE facts_fts MATCH %s AND rowid IN ({placeholders})",
            [_fact_expression(match, None), *fact_ids],
        )
        return {int(r): float(b) for r, b in cur.fetchall()}


def similar_fact_candidates(match: str, *, person_id: int, limit: int = 8) -> list[tuple[int, str]]:
    """Valid facts (active or frozen) of one person for duplicate detection: ``(id, content)``."""
    if not match:
        return []
    if is_postgresql():
        ranked = postgresql.fact_scores(terms_of(match), [person_id])
        rows = _ranked_fact_rows(_chunks(ranked, limit), include_invalid=False, limit=limit, columns="f.id, {bm25}, f.content")
        return [(fid, content) for fid, _, content in rows]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT f.id, f.content FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid"
            " WHERE facts_fts MATCH %s AND f.superseded_by IS NULL"
            " ORDER BY bm25(facts_fts, 1.0, 0.0) LIMIT %s",
            [_fact_expression(match, [person_id]), limit],
        )
        return cur.fetchall()


def cue_candidates(match: str, *, stream_id: int | None, limit: int) -> list[CueHit]:
    """Cue hits ordered by bm25 (:class:`CueHit`: ``episode_id, cue_id, bm25``); placeholders have no cues.

    The user terms are confined to the ``tokens`` column; a stream is selected with
    ``stream : "s<id>"`` so FTS5 ranks only that stream's cues. The ``stream``
    column has weight 0 in bm25. ``stream_id=None`` ranks every stream's cues (the
    resident index when it can answer, else pruned FTS5).
    """
    if not match:
        return []
    if stream_id is None:
        hits = _whole_table_top("cues_fts", match, limit)
        rows = None if hits is None else _cue_rows(hits)
    else:
        rows = _resident_stream_cues(match, stream_id, limit)
    if rows is not None:
        return [CueHit(*h) for h in rows]
    if is_postgresql():
        found: list[tuple[int, int, float]] = []
        for batch in _chunks(postgresql.cue_scores(terms_of(match), stream_id), limit):
            found += _cue_rows(list(batch))
            if len(found) >= limit:
                break
        return [CueHit(*h) for h in found[:limit]]
    if stream_id is None:
        match = _pruned("cues_fts", match) or match
    expression = f"tokens : ({match})"
    if stream_id is not None:
        expression += f' AND stream : "{_stream_token(stream_id)}"'
    params: list = [expression]
    where = "cues_fts MATCH %s AND e.kind <> 'unsummarized'"
    if stream_id is not None:
        where += " AND e.stream_id = %s"
        params.append(stream_id)
    params.append(limit)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.episode_id, c.id, bm25(cues_fts, 1.0, 0.0) AS b FROM cues_fts"
            " JOIN episode_cues c ON c.id = cues_fts.rowid JOIN episodes e ON e.id = c.episode_id"
            f" WHERE {where} ORDER BY b LIMIT %s",
            params,
        )
        return [CueHit(*h) for h in cur.fetchall()]


def _resident_stream_cues(match: str, stream_id: int, limit: int) -> list[tuple[int, int, float]] | None:
    """The resident-index form of a stream-scoped :func:`cue_candidates` (``None``: ask FTS5):
    the stream's cues (summarised episodes) scored with the whole table's statistics. Ties:
    lower cue id first."""
    index = resident("cues_fts")
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


def _cue_rows(hits: list[tuple[int, float]]) -> list[tuple[int, int, float]]:
    if not hits:
        return []
    placeholders = backends.in_placeholders(hits)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.id, c.episode_id FROM episode_cues c JOIN episodes e ON e.id = c.episode_id"
            f" WHERE c.id IN ({placeholders}) AND e.kind <> 'unsummarized'",
            [cid for cid, _ in hits],
        )
        episode_of = dict(cur.fetchall())
    return [(episode_of[cid], cid, b) for cid, b in hits if cid in episode_of]


def knowledge_candidates(match: str, *, limit: int) -> list[tuple[int, float]]:
    """Knowledge hits ordered by bm25: ``(id, bm25)`` (resident index, else pruned FTS5)."""
    if not match:
        return []
    hits = _whole_table_top("knowledge_fts", match, limit)
    if hits is not None:
        return hits
    if is_postgresql():
        return postgresql.top("knowledge_fts", terms_of(match), limit)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT rowid, bm25(knowledge_fts) AS b FROM knowledge_fts WHERE knowledge_fts MATCH %s"
            " ORDER BY b LIMIT %s",
            [_pruned("knowledge_fts", match) or match, limit],
        )
        return cur.fetchall()


def knowledge_bm25(match: str, ids: Sequence[int]) -> dict[int, float]:
    """Real (unpruned) bm25 of specific knowledge rows; rows that do not match are absent."""
    if not match or not ids:
        return {}
    index = resident("knowledge_fts")
    scores = index.bm25_for(terms_of(match), ids) if index is not None else None
    if scores is not None:
        return scores
    if is_postgresql():
        return postgresql.bm25_for("knowledge_fts", terms_of(match), ids)
    placeholders = backends.in_placeholders(ids)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT rowid, bm25(knowledge_fts) FROM knowledge_fts"
            f" WHERE knowledge_fts MATCH %s AND rowid IN ({placeholders})",
            [match, *ids],
        )
        return {int(r): float(b) for r, b in cur.fetchall()}


def rows_containing(table: str, match: str, *, limit: int) -> list[int]:
    """Up to ``limit`` rowids matching ``match`` in rowid order (no ranking: FTS5 stops early)."""
    if not match:
        return []
    name = _check(table)
    if is_postgresql():
        return postgresql.rows_containing(name, terms_of(match), limit=limit)
    if name == "facts_fts":
        match = _fact_expression(match, None)
    with connection.cursor() as cur:
        cur.execute(f"SELECT rowid FROM {name} WHERE {name} MATCH %s LIMIT %s", [match, limit])
        return [int(r[0]) for r in cur.fetchall()]


def unpruned_top(table: str, match: str, *, limit: int) -> list[tuple[int, float]]:
    """FTS5's own ranking of a whole table, every term kept: ``(rowid, bm25)`` best first.

    The reference the resident index and pruning are measured against (tests, ``bench/``);
    it ranks every matching row, so it is slow on large tables.
    """
    if not match:
        return []
    name = _check(table)
    if is_postgresql():
        return postgresql.top(name, terms_of(match), limit)
    expression, weights = (match, "") if name == "knowledge_fts" else (f"tokens : ({match})", ", 1.0, 0.0")
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT rowid, bm25({name}{weights}) AS b FROM {name} WHERE {name} MATCH %s ORDER BY b, rowid LIMIT %s",
            [expression, limit],
        )
        return [(int(r), float(b)) for r, b in cur.fetchall()]
