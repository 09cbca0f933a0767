"""SQLite-only SQL: the FTS5 lexical index's statements, revision counters, the change log.

The lexical index (:mod:`memory.search.lexical` is its API) is a set of contentless FTS5 tables
(``facts_fts``, ``cues_fts``, ``knowledge_fts``, ``messages_fts``) whose ``rowid`` is the row's
primary key and whose ``tokens`` column holds the row's ``index_tokens``; facts, cues and
messages also carry an unweighted scope column (``person`` / ``stream``: ``p<id>`` / ``s<id>``)
so person- and stream-scoped queries rank only their own rows. Whole-table queries that reach
FTS5 (the resident index could not answer) first drop the terms whose document frequency is
above ``FTS_PRUNE_DF_RATIO`` of the rows (:func:`prune_terms`, read from the ``*_vocab``
fts5vocab tables; tables under ``PRUNE_MIN_DOCS`` rows are never pruned).
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection

from memory.backends.portable import FACT_COLUMNS, TOKEN_COLUMNS, in_placeholders
from memory.engine.tokenize import index_tokens, match_expression, terms_of

BUMP_REVISION_SQL = (
    "INSERT INTO meta(key, value) VALUES (%s, '1-' || hex(randomblob(6))) ON CONFLICT(key) DO UPDATE"
    " SET value = (CAST(value AS INTEGER) + 1) || '-' || hex(randomblob(6))"
)
LOG2_SQL = "log2({})"
IN_SUBQUERY_SQL = "{} IN ({})"
JSON_IDS_SQL = "SELECT CAST(j.value AS INTEGER) FROM {table}, json_each({table}.{column}) AS j WHERE {table}.id = %s"


def fetch_binary(sql: str, params: Sequence[Any]) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def json_list_has(column: str, value: int) -> tuple[str, list[Any]]:
    return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE json_each.value = %s)", [int(value)]


def resample_statistics(logger: logging.Logger) -> None:
    """Nothing to do: SQLite keeps no samples of column values (no ``sqlite_stat4``)."""


def lock_key(cur: Any, space: int, key: int) -> None:
    """Nothing to do: an IMMEDIATE transaction already holds the database's one write lock."""


def secure_delete(cur: Any) -> None:
    cur.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed, not left in the file


def commit_without_flush(cur: Any) -> None:
    """Nothing to do: WAL with ``synchronous=NORMAL`` (config/settings.py) never flushes at commit."""


def checkpoint() -> tuple[int, int, int]:
    with connection.cursor() as cur:
        cur.execute("PRAGMA wal_checkpoint(PASSIVE)")
        busy, log, done = cur.fetchone()
    return int(busy), int(log), int(done)


def set_autocheckpoint(conn: Any, pages: int) -> None:
    with conn.cursor() as cur:
        cur.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")


def checkpoint_on_commit(pages: int) -> None:
    from django.db.backends.signals import connection_created  # only a worker process listens (config/celery.py)

    def on_connect(sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.vendor == "sqlite":
            set_autocheckpoint(connection, pages)

    connection_created.connect(on_connect, weak=False, dispatch_uid="memory.backends.sqlite.checkpoint_on_commit")
    if connection.connection is not None:  # already open in this process
        set_autocheckpoint(connection, pages)


# --- the change log (memory/search/changes.py) -------------------------------------------------------------
# One writer at a time: a change row's id is its commit order, so the position of a change
# is its id and the horizon is one past the highest id a reader has seen.

CHANGE_LOG_TABLES = ("facts", "episode_cues", "knowledge")
CHANGE_LOG_TRIGGERS = [
    f"CREATE TRIGGER {table}_change_log AFTER INSERT ON {table} BEGIN"
    f" INSERT INTO memory_changes(source, row_id, xid) VALUES ('{table}', NEW.id, NULL); END"
    for table in CHANGE_LOG_TABLES
]
DROP_CHANGE_LOG_TRIGGERS = [f"DROP TRIGGER IF EXISTS {table}_change_log" for table in CHANGE_LOG_TABLES]


def read_changes(source: str, revision_key: str, horizon: int | None) -> tuple[str, int, list[tuple[int, int, int]], int]:
    """One read: ``(revision, new horizon, changes (id, row id, id) at or above horizon, pruned)``."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT (SELECT value FROM meta WHERE key = %s), (SELECT coalesce(max(id), 0) + 1 FROM memory_changes),"
            " (SELECT json_group_array(json_array(id, row_id, id)) FROM memory_changes"
            "  WHERE source = %s AND id >= coalesce(%s, (SELECT coalesce(max(id), 0) + 1 FROM memory_changes))),"
            " (SELECT value FROM meta WHERE key = 'changes_pruned_through')",
            [revision_key, source, horizon],
        )
        revision, top, changes, pruned = cur.fetchone()
    return revision or "0", int(top), [tuple(map(int, c)) for c in json.loads(changes or "[]")], int(pruned or 0)


def prune_changes(keep: int) -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT id FROM memory_changes ORDER BY id DESC LIMIT 1 OFFSET %s", [keep])
        row = cur.fetchone()
        if row is None:
            return 0
        through = int(row[0])
        cur.execute("DELETE FROM memory_changes WHERE id <= %s", [through])
        dropped = cur.rowcount
        cur.execute(
            "INSERT INTO meta(key, value) VALUES ('changes_pruned_through', %s) ON CONFLICT (key) DO UPDATE"
            " SET value = max(CAST(meta.value AS INTEGER), CAST(excluded.value AS INTEGER))",
            [str(through)],
        )
    return dropped


# --- the lexical index (memory/search/lexical.py) --------------------------------------------------------------

PRUNE_MIN_DOCS = 2000      # below this many rows every term is kept
# terms found in more than settings.FTS_PRUNE_DF_RATIO of the rows are dropped …
PRUNE_KEEP_AT_LEAST = 3    # … but always keep the rarest few matching terms
_DOC_COUNT_TTL = 5.0       # seconds a cached row count is trusted
#: the unweighted scope column of a scoped table and its tokens' letter
_SCOPES = {"facts_fts": ("person", "p"), "cues_fts": ("stream", "s"), "messages_fts": ("stream", "s")}

_doc_counts: dict[str, tuple[float, int]] = {}


def _scope_token(table: str, scope_id: int) -> str:
    return f"{_SCOPES[table][1]}{int(scope_id)}"


def _store_tokens(cur: Any, table: str, payload: Sequence[tuple]) -> None:
    """Keep the tokens beside the row too (the resident index loads them from there)."""
    rows, column = TOKEN_COLUMNS[table]
    cur.executemany(f"UPDATE {rows} SET {column} = %s WHERE id = %s", [(p[1], p[0]) for p in payload])


def index_rows(table: str, rows: Sequence[tuple[int, str]]) -> list[str]:
    payload = [(rowid, index_tokens(text)) for rowid, text in rows]
    with connection.cursor() as cur:
        cur.executemany(f"INSERT INTO {table}(rowid, tokens) VALUES (%s, %s)", payload)
        _store_tokens(cur, table, payload)
    _doc_counts.pop(table, None)
    return [tokens for _, tokens in payload]


def index_scoped(table: str, rows: Sequence[tuple[int, str, int]]) -> list[str]:
    """``(rowid, text, scope id)`` rows of facts (person) or cues (stream)."""
    column = _SCOPES[table][0]
    payload = [(rowid, index_tokens(text), _scope_token(table, scope)) for rowid, text, scope in rows]
    with connection.cursor() as cur:
        cur.executemany(f"INSERT INTO {table}(rowid, tokens, {column}) VALUES (%s, %s, %s)", payload)
        _store_tokens(cur, table, payload)
    _doc_counts.pop(table, None)
    return [tokens for _, tokens, _ in payload]


def index_messages(rows: Sequence[tuple[int, str, int]]) -> list[str]:
    payload = [(rowid, index_tokens(text or ""), _scope_token("messages_fts", s)) for rowid, text, s in rows]
    indexed = [p for p in payload if p[1]]
    if indexed:
        with connection.cursor() as cur:
            cur.executemany("INSERT INTO messages_fts(rowid, tokens, stream) VALUES (%s, %s, %s)", indexed)
            _store_tokens(cur, "messages_fts", indexed)
    return [tokens for _, tokens, _ in payload]


def reindex_message(rowid: int, text: str, stream_id: int, old_tokens: str) -> str:
    if old_tokens:
        with connection.cursor() as cur:
            cur.execute(
                "INSERT INTO messages_fts(messages_fts, rowid, tokens, stream) VALUES ('delete', %s, %s, %s)",
                [rowid, old_tokens, _scope_token("messages_fts", stream_id)],
            )
            cur.execute("UPDATE messages SET tokens = '' WHERE id = %s", [rowid])
    return index_messages([(rowid, text, stream_id)])[0]


def delete_rows(table: str, rows: Sequence[tuple]) -> None:
    """Contentless FTS5 rows go with a ``'delete'`` naming the exact indexed values: ``(rowid,
    tokens)``, and the scope id for a scoped table (rows without tokens were never indexed)."""
    if table in _SCOPES:
        column = _SCOPES[table][0]
        payload = [(r, t, _scope_token(table, s)) for r, t, s in rows if t]
        sql = f"INSERT INTO {table}({table}, rowid, tokens, {column}) VALUES ('delete', %s, %s, %s)"
    else:
        payload = [(r, t) for r, t, *_ in rows]
        sql = f"INSERT INTO {table}({table}, rowid, tokens) VALUES ('delete', %s, %s)"
    if payload:
        with connection.cursor() as cur:
            cur.executemany(sql, payload)
    _doc_counts.pop(table, None)


def clear(table: str) -> None:
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO {table}({table}) VALUES ('delete-all')")
    _doc_counts.pop(table, None)


def purge_deleted(tables: Sequence[str]) -> None:
    """A contentless FTS5 ``'delete'`` writes a tombstone; the old segment keeps the terms until a
    merge. ``'optimize'`` merges every segment into one now (forgetting is rare; with
    ``secure_delete`` the freed pages are zeroed)."""
    with connection.cursor() as cur:
        for table in dict.fromkeys(tables):
            cur.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")


def document_count(table: str) -> int:
    """Rows of an FTS5 table, cached for a few seconds."""
    hit = _doc_counts.get(table)
    now = time.monotonic()
    if hit and now - hit[0] < _DOC_COUNT_TTL:
        return hit[1]
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}_docsize")
        count = int(cur.fetchone()[0])
    _doc_counts[table] = (now, count)
    return count


def fold_statistics() -> None:
    """Nothing to do: FTS5 keeps its own statistics."""


def document_frequencies(table: str, terms: Sequence[str]) -> dict[str, int]:
    with connection.cursor() as cur:
        cur.execute(f"SELECT term, doc FROM {table}_vocab WHERE term IN ({in_placeholders(terms)})", list(terms))
        return {term: int(doc) for term, doc in cur.fetchall()}


def _is_single_token(term: str) -> bool:
    return all(ch.isalnum() for ch in term)


def prune_terms(table: str, terms: list[str]) -> list[str]:
    """Drop query terms too common to change the ranking (the module docstring)."""
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


def _pruned(table: str, match: str) -> str:
    """``match`` without the terms :func:`prune_terms` drops (whole-table queries)."""
    return match_expression(prune_terms(table, terms_of(match))) or match


def _fact_expression(match: str, person_ids: Sequence[int] | None) -> str:
    """User terms confined to ``tokens``; persons selected through the ``person`` column."""
    expression = f"tokens : ({match})"
    if person_ids is not None:
        persons = " OR ".join(f'"{_scope_token("facts_fts", p)}"' for p in dict.fromkeys(person_ids))
        expression += f" AND person : ({persons})"
    return expression


def _in_stream(match: str, stream_id: int) -> str:
    return f'tokens : ({match}) AND stream : "{_scope_token("messages_fts", stream_id)}"'


def message_candidates(match: str, *, stream_id: int, before_id: int | None, limit: int) -> list[tuple[int, float]]:
    """``before_id`` is a rowid bound FTS5 applies itself."""
    params: list = [_in_stream(match, stream_id)]
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
    """One MATCH over the ids' rowid range, filtered here: ``rowid IN (…)`` would make FTS5 run the
    whole query once per id."""
    wanted = {int(i) for i in message_ids}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT rowid, bm25(messages_fts, 1.0, 0.0) FROM messages_fts"
            " WHERE messages_fts MATCH %s AND rowid BETWEEN %s AND %s",
            [_in_stream(match, stream_id), min(wanted), max(wanted)],
        )
        return {int(r): float(b) for r, b in cur.fetchall() if int(r) in wanted}


def fact_candidates(match: str, *, person_ids: Sequence[int] | None, limit: int, include_invalid: bool) -> list[tuple]:
    if person_ids is None:
        match = _pruned("facts_fts", match)
    where = ["facts_fts MATCH %s"]
    params: list = [_fact_expression(match, person_ids)]
    if not include_invalid:
        where.append("f.superseded_by IS NULL")
    params.append(limit)
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {FACT_COLUMNS.format(bm25='bm25(facts_fts, 1.0, 0.0) AS b')}"
            " FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid"
            f" WHERE {' AND '.join(where)} ORDER BY b, f.id LIMIT %s",  # ties: lower id first, as the resident index
            params,
        )
        return cur.fetchall()


def fact_bm25(match: str, fact_ids: Sequence[int]) -> dict[int, float]:
    """FTS5 runs the whole query once per id of ``rowid IN (…)``."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT rowid, bm25(facts_fts, 1.0, 0.0) FROM facts_fts"
            f" WHERE facts_fts MATCH %s AND rowid IN ({in_placeholders(fact_ids)})",
            [_fact_expression(match, None), *fact_ids],
        )
        return {int(r): float(b) for r, b in cur.fetchall()}


def similar_facts(match: str, *, person_id: int, limit: int) -> list[tuple[int, str]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT f.id, f.content FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid"
            " WHERE facts_fts MATCH %s AND f.superseded_by IS NULL"
            " ORDER BY bm25(facts_fts, 1.0, 0.0) LIMIT %s",
            [_fact_expression(match, [person_id]), limit],
        )
        return cur.fetchall()


def fact_matches(match: str, *, person_id: int, limit: int) -> list[tuple[int, str]] | None:
    """Without ``bm25()``, whose document frequencies read each term's whole doclist."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT f.id, f.content FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid"
            " WHERE facts_fts MATCH %s AND f.superseded_by IS NULL LIMIT %s",
            [_fact_expression(match, [person_id]), limit + 1],
        )
        rows = cur.fetchall()
    return None if len(rows) > limit else sorted(rows)


def cue_candidates(match: str, *, stream_id: int | None, limit: int) -> list[tuple[int, int, float]]:
    if stream_id is None:
        match = _pruned("cues_fts", match)
    expression = f"tokens : ({match})"
    params: list = []
    where = "cues_fts MATCH %s AND e.kind <> 'unsummarized'"
    if stream_id is not None:
        expression += f' AND stream : "{_scope_token("cues_fts", stream_id)}"'
        where += " AND e.stream_id = %s"
        params.append(stream_id)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.episode_id, c.id, bm25(cues_fts, 1.0, 0.0) AS b FROM cues_fts"
            " JOIN episode_cues c ON c.id = cues_fts.rowid JOIN episodes e ON e.id = c.episode_id"
            f" WHERE {where} ORDER BY b, c.id LIMIT %s",  # ties: lower id first, as the resident index
            [expression, *params, limit],
        )
        return cur.fetchall()


def knowledge_candidates(match: str, *, limit: int) -> list[tuple[int, float]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT rowid, bm25(knowledge_fts) AS b FROM knowledge_fts WHERE knowledge_fts MATCH %s"
            " ORDER BY b LIMIT %s",
            [_pruned("knowledge_fts", match), limit],
        )
        return cur.fetchall()


def knowledge_bm25(match: str, ids: Sequence[int]) -> dict[int, float]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT rowid, bm25(knowledge_fts) FROM knowledge_fts"
            f" WHERE knowledge_fts MATCH %s AND rowid IN ({in_placeholders(ids)})",
            [match, *ids],
        )
        return {int(r): float(b) for r, b in cur.fetchall()}


def rows_containing(table: str, match: str, *, limit: int) -> list[int]:
    """No ranking: FTS5 stops early."""
    if table == "facts_fts":
        match = _fact_expression(match, None)
    with connection.cursor() as cur:
        cur.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH %s LIMIT %s", [match, limit])
        return [int(r[0]) for r in cur.fetchall()]


def unpruned_top(table: str, match: str, *, limit: int) -> list[tuple[int, float]]:
    expression, weights = (match, "") if table == "knowledge_fts" else (f"tokens : ({match})", ", 1.0, 0.0")
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT rowid, bm25({table}{weights}) AS b FROM {table} WHERE {table} MATCH %s ORDER BY b, rowid LIMIT %s",
            [expression, limit],
        )
        return [(int(r), float(b)) for r, b in cur.fetchall()]
