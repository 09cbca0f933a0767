"""PostgreSQL: the lexical index as postings tables, scored with FTS5's own BM25.

SQLite ranks with FTS5 (``memory/search/lexical.py``). PostgreSQL has no FTS5 and its
``ts_rank`` is not BM25, so this module keeps the same index by hand and computes the
score FTS5's ``bm25()`` would give, bit for bit:

- ``lexical_docs(source, doc_id, scope, length)``: one row per indexed row (what FTS5
  counts as a document); ``length`` = tokens of every column, the unweighted scope
  column (``person`` / ``stream``) included, as FTS5 counts it.
- ``lexical_postings(source, term, doc_id, scope, tf, length, positions)``: one row per
  (token, document); tokens are the row's stored ``index_tokens`` split and folded the
  way ``unicode61`` does (:func:`memory.search.lexical_index.fts_tokens`), positions let a
  multi-token term ("3.14") match as the phrase FTS5 would make of it.
- ``lexical_stats(source, docs, tokens)``: the table's row and token counts as delta
  rows (each writer inserts its own; no row every writer updates), folded into one row
  by readers now and then (:func:`_stats`; rows locked by another transaction are skipped).

Scoring (:func:`_score`): the postings of the query's tokens (restricted to a scope, an
id range or a list of ids when the query is), FTS5's statistics of the whole table
(rows, average length, rows per phrase), then per document, phrase by phrase in query
order, ``idf · (f·(k1+1)) / (f + k1·(1 − b + b·D/avgdl))`` with k1 = 1.2, b = 0.75 and
FTS5's IDF ``log((N − n + 0.5)/(n + 0.5))`` (1e-6 when not positive) — the same
operations in the same order as ``fts5_bm25``, so scores (and ties) are the same doubles.
Whole-table queries outside a transaction still go to the resident index first, exactly
as on SQLite.

Rows leave the index by triggers (deletes of facts, cues, knowledge, messages; TRUNCATE),
which also bump the lexical revisions the resident index watches; inserts are logged in
``memory_changes`` with the writing transaction's id (:mod:`memory.search.changes`), and so are
message deletes and token changes, with the old tokens (migration 0025,
:func:`read_message_changes`).
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from django.db import DatabaseError, connection, transaction

from memory.backends.portable import chunks, cue_rows, ranked_fact_rows
from memory.engine.bm25 import K1, B, fts_idf, fts_tokens
from memory.engine.tokenize import index_tokens, terms_of

# The counter is the value's leading integer, 0 when there is none ('', 'x', a hand-edited row):
# SQLite's CAST(value AS INTEGER). Up to 18 digits, so the cast never overflows a bigint.
BUMP_REVISION_SQL = (
    "INSERT INTO meta(key, value) VALUES (%s, '1-' || substr(md5(random()::text), 1, 12))"
    " ON CONFLICT (key) DO UPDATE"
    " SET value = (coalesce(substring(meta.value from '^[[:space:]]*([+-]?[0-9]{1,18})')::bigint, 0) + 1)"
    " || '-' || substr(md5(random()::text), 1, 12)"
)
#: the revision bump the triggers call (0020 creates it; 0023 replaces the one that failed on a non-numeric value)
BUMP_REVISION_FUNCTION = (
    "CREATE OR REPLACE FUNCTION memory_bump_revision(rev_key text) RETURNS void LANGUAGE sql AS $$ "
    + BUMP_REVISION_SQL.replace("%s", "$1") + " $$"
)
LOG2_SQL = "(ln({}) / ln(2.0))"
IN_SUBQUERY_SQL = "{} = ANY(ARRAY({}))"
JSON_IDS_SQL = "SELECT jsonb_array_elements_text({column})::bigint FROM {table} WHERE id = %s"
STATS_FOLD_ROWS = 64   # delta rows of a table's statistics before a reader folds them into one


def fetch_binary(sql: str, params: Sequence[Any]) -> list[tuple]:
    """Rows of ``sql`` in PostgreSQL's binary format (see :func:`memory.backends.fetch_binary`)."""
    connection.ensure_connection()
    with _binary_cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _binary_cursor() -> Any:
    """A cursor whose results come in binary, wrapped as Django wraps its own (query logging and
    execute wrappers see its reads)."""
    binary = psycopg.Cursor(connection.connection)  # server-side binding, whatever the settings say
    binary.format = psycopg.pq.Format.BINARY
    return connection._prepare_cursor(binary)


def lock_key(cur: Any, space: int, key: int) -> None:
    cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [int(space), int(key)])


def secure_delete(cur: Any) -> None:
    """No such switch: vacuum reclaims dead tuples (docs/DEPLOY.md)."""


def commit_without_flush(cur: Any) -> None:
    cur.execute("SET LOCAL synchronous_commit TO OFF")


#: The first CTE of a :func:`run_unflushed` statement: ``SET LOCAL synchronous_commit TO OFF`` as
#: a value. A statement sent alone is a transaction of its own, so the setting holds until its
#: commit. PostgreSQL evaluates a plain CTE only where it is read: the statement's result reads it
#: (``… FROM t, unflushed``), so it is set whenever the statement returns a row — each of ours
#: returns one whenever it writes.
UNFLUSHED = "unflushed AS (SELECT set_config('synchronous_commit', 'off', true) AS off)"


def run_unflushed(sql: str, params: Sequence[Any]) -> list[tuple]:
    """Run ``sql`` — ``WITH`` :data:`UNFLUSHED`, …, its result reading ``unflushed`` — and return its
    rows. Outside a transaction the statement is one, whose commit does not wait for the log flush
    (:func:`commit_without_flush`), all or nothing, in one round trip and one statement (no BEGIN, SET
    or COMMIT beside it); inside one (an atomic block) it joins it, and that transaction commits so.
    """
    if not sql.startswith(f"WITH {UNFLUSHED}"):
        raise ValueError("a run_unflushed statement starts WITH unflushed (UNFLUSHED)")
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def record_turn(
    turn: dict[str, Any], event: dict[str, Any], others: Sequence[dict[str, Any]] = (),
    reads: Sequence[tuple[str, Sequence[Any], bool]] = (),
) -> tuple[int, list[list[tuple]]]:
    """INSERT a turn (``turn``: its columns, adapted), its trace event (``event``: ``at``,
    ``stream_id``, ``stage``, ``kind``, ``payload`` — a dict, given the new turn's id as
    ``turnId``) and ``others`` (events of the same shape, no turn id) in one statement
    (:func:`run_unflushed`), sent with ``reads`` (:func:`read_together`: one round trip, one
    transaction). Returns the turn's id and the rows of each read."""
    columns = list(turn)
    also = ""
    params: list[Any] = [*turn.values()]
    if others:
        also = (", e AS (INSERT INTO pipeline_events (at, stream_id, turn_id, stage, kind, payload) VALUES "
                + ", ".join(["(%s, %s, NULL, %s, %s, %s::jsonb)"] * len(others)) + ")")
        for other in others:
            params += [other["at"], other["stream_id"], other["stage"], other["kind"],
                       json.dumps(other["payload"], ensure_ascii=False)]
    sql = (
        f"WITH {UNFLUSHED}, t AS (INSERT INTO turns ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
        " RETURNING id)"
        f"{also} INSERT INTO pipeline_events (at, stream_id, turn_id, stage, kind, payload)"
        " SELECT %s, %s, t.id, %s, %s, jsonb_set(%s::jsonb, '{turnId}', to_jsonb(t.id)) FROM t, unflushed RETURNING turn_id"
    )
    params += [event["at"], event["stream_id"], event["stage"], event["kind"],
               json.dumps(event["payload"], ensure_ascii=False)]
    if not reads:
        return int(run_unflushed(sql, params)[0][0]), []
    written, *rows = read_together([(sql, params, False), *reads])
    return int(written[0][0]), rows


def confirm_turn(
    turn_id: int, *, at: int, prompt_ids: Sequence[int], held_back_ids: Sequence[int],
    reinforce: Sequence[tuple[int, int, float, int]], event: dict[str, Any],
    line: tuple[int, str, bytes, bytes] | None = None, reads: Sequence[tuple[str, Sequence[Any], bool]] = (),
) -> tuple[list[int] | None, list[list[tuple]]]:
    """Claim an unconfirmed turn, reinforce its prompt facts and record both, in one statement
    (:func:`run_unflushed`).

    ``reinforce``: ``(fact id, person id, new strength, new due_at)`` in prompt order, as
    :func:`memory.services.reinforcement` gives them; a fact is reinforced only while it still
    belongs to that person. The turn row is locked first: a second confirm waits for the
    first, then finds the turn confirmed and writes nothing. The turn records the facts
    actually reinforced; ``event`` (``stream_id``, ``stage``, ``kind``, ``payload``) is the
    confirmation's event. Returns the ids reinforced in prompt order, or ``None`` when the
    turn was not there to claim (missing or already confirmed). ``line`` (``(message id, text, raw,
    q8)``): the turn's vector, stored on that message with the claim while it has none and says
    ``text``. ``reads`` are sent with it (:func:`read_together`: one round trip); their rows come back
    beside the ids.
    """
    keep_line = ""
    if line is not None:
        keep_line = (", m AS (UPDATE messages SET embedding = %s, embedding_q8 = %s FROM claim"
                     "  WHERE messages.id = %s AND messages.embedding IS NULL AND messages.content = %s)")
    sql = (
        f"WITH {UNFLUSHED}, claim AS (SELECT id FROM turns WHERE id = %s AND confirmed_at IS NULL FOR UPDATE),"
        " v AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::float8[], %s::bigint[])"
        "  WITH ORDINALITY AS v(fact_id, person_id, strength, due_at, ord)),"
        " f AS (UPDATE facts SET strength = v.strength, updated_at = %s, due_at = v.due_at, active = TRUE,"
        "  hit_count = hit_count + 1, last_hit_at = %s FROM v"
        "  WHERE facts.id = v.fact_id AND facts.person_id = v.person_id AND EXISTS (SELECT 1 FROM claim)"
        "  RETURNING facts.id),"
        " t AS (UPDATE turns SET confirmed_at = %s, prompt_fact_ids = %s::jsonb, held_back_fact_ids = %s::jsonb,"
        "  reinforced_fact_ids = (SELECT coalesce(jsonb_agg(v.fact_id ORDER BY v.ord), '[]'::jsonb) FROM v"
        "   WHERE v.fact_id IN (SELECT id FROM f))"
        "  FROM claim WHERE turns.id = claim.id RETURNING turns.reinforced_fact_ids),"
        " e AS (INSERT INTO pipeline_events (at, stream_id, turn_id, stage, kind, payload)"
        "  SELECT %s, %s, claim.id, %s, %s, %s::jsonb FROM claim)"
        f"{keep_line}"
        " SELECT reinforced_fact_ids FROM t, unflushed"
    )
    params = [
        turn_id, [r[0] for r in reinforce], [r[1] for r in reinforce], [r[2] for r in reinforce],
        [r[3] for r in reinforce], at, at, at, json.dumps(list(prompt_ids)), json.dumps(list(held_back_ids)),
        at, event["stream_id"], event["stage"], event["kind"], json.dumps(event["payload"], ensure_ascii=False),
    ]
    if line is not None:
        message_id, text, raw, q8 = line
        params += [raw, q8, message_id, text]
    if reads:
        rows, *others = read_together([(sql, params, False), *reads])
    else:
        rows, others = run_unflushed(sql, params), []
    if not rows:
        return None, others
    reinforced = rows[0][0]
    return [int(i) for i in (json.loads(reinforced) if isinstance(reinforced, str) else reinforced)], others


def checkpoint() -> None:
    """Nothing to do: the server checkpoints by itself."""


def checkpoint_on_commit(pages: int) -> None:
    """Nothing to do: the server checkpoints by itself."""


def json_list_has(column: str, value: int) -> tuple[str, list[Any]]:
    return f"{column} @> %s::jsonb", [f"[{int(value)}]"]


@dataclass(frozen=True)
class Source:
    code: int          # lexical_* .source
    table: str         # the rows' table
    tokens: str        # column with the row's index_tokens
    extra_tokens: int  # tokens of the unweighted scope column FTS5 counts in a row's length


SOURCES = {
    "facts_fts": Source(1, "facts", "tokens", 1),
    "cues_fts": Source(2, "episode_cues", "tokens", 1),
    "knowledge_fts": Source(3, "knowledge", "tokens", 0),
    "messages_fts": Source(4, "messages", "tokens", 1),
}
#: lexical revision bumped when rows of a table go away or change their tokens (resident index)
REVISION_KEYS = {"facts": "lexical_revision:facts", "episode_cues": "lexical_revision:episode_cues",
                 "knowledge": "lexical_revision:knowledge"}

def resample_statistics(logger: logging.Logger) -> None:
    """Sample every table of the schema again (``ANALYZE``), once a forgetting's deletions are committed.

    The planner's statistics (``pg_statistic``, read through ``pg_stats``) keep values sampled
    from each column at the last analyse — the most common ones and histogram bounds: a
    message's text, a token of ``lexical_postings`` — until autovacuum analyses the table
    again, which a forgetting of a few rows does not trigger. A new sample reads live rows only.
    An analyse of a table left with no rows keeps the old sample: those tables' statistics are
    deleted (a superuser's privilege; without it a warning to ``logger`` names them —
    docs/OPERATIONS.md).
    """
    with connection.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")
        tables = [row[0] for row in cur.fetchall()]
        if not tables:
            return
        cur.execute("ANALYZE " + ", ".join(connection.ops.quote_name(t) for t in tables))
        cur.execute("SELECT DISTINCT tablename FROM pg_stats WHERE schemaname = current_schema()")
        sampled = sorted(row[0] for row in cur.fetchall())
        empty = []
        for table in sampled:
            cur.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {connection.ops.quote_name(table)})")
            if cur.fetchone()[0]:
                empty.append(table)
        if not empty:
            return
        try:
            with transaction.atomic():
                cur.execute("DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])", [empty])
        except DatabaseError as exc:
            logger.warning("forget_statistics_kept tables=%s reason=%s", ",".join(empty), str(exc).strip()[:200])


# --- schema (migration 0020_postgresql) -----------------------------------------------------------

_TABLES_AND_FUNCTIONS = [
    "CREATE TABLE lexical_docs (source smallint NOT NULL, doc_id bigint NOT NULL, scope bigint NOT NULL,"
    " length integer NOT NULL, PRIMARY KEY (source, doc_id))",
    "CREATE TABLE lexical_postings (source smallint NOT NULL, term text NOT NULL, doc_id bigint NOT NULL,"
    " scope bigint NOT NULL, tf integer NOT NULL, length integer NOT NULL, positions integer[] NOT NULL,"
    " PRIMARY KEY (source, term, doc_id))",
    "CREATE INDEX lexical_postings_scope ON lexical_postings (source, scope, term)",
    "CREATE INDEX lexical_postings_doc ON lexical_postings (source, doc_id)",
    "CREATE TABLE lexical_stats (id bigserial PRIMARY KEY, source smallint NOT NULL, docs bigint NOT NULL,"
    " tokens bigint NOT NULL)",
    "CREATE INDEX lexical_stats_source ON lexical_stats (source)",
    # meta revisions: <counter>-<random>, as on SQLite
    BUMP_REVISION_FUNCTION,
    "CREATE FUNCTION memory_bump_revision_trigger() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "PERFORM memory_bump_revision(TG_ARGV[0]); RETURN NULL; END $$",
    # rows deleted by any path (cascades, forgetting, batch deletion) leave the index
    "CREATE FUNCTION lexical_rows_deleted() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "DECLARE src smallint := TG_ARGV[0]::smallint; BEGIN "
    "IF NOT EXISTS (SELECT 1 FROM old_rows) THEN RETURN NULL; END IF; "
    "WITH gone AS (DELETE FROM lexical_docs d USING old_rows o WHERE d.source = src AND d.doc_id = o.id"
    " RETURNING d.length) INSERT INTO lexical_stats(source, docs, tokens)"
    " SELECT src, -count(*), -coalesce(sum(length), 0) FROM gone HAVING count(*) > 0; "
    "DELETE FROM lexical_postings p USING old_rows o WHERE p.source = src AND p.doc_id = o.id; "
    "IF TG_NARGS > 1 THEN PERFORM memory_bump_revision(TG_ARGV[1]); END IF; "
    "RETURN NULL; END $$",
    "CREATE FUNCTION lexical_rows_truncated() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "DECLARE src smallint := TG_ARGV[0]::smallint; BEGIN "
    "DELETE FROM lexical_docs WHERE source = src; DELETE FROM lexical_postings WHERE source = src; "
    "DELETE FROM lexical_stats WHERE source = src; RETURN NULL; END $$",
    # the change log: inserted rows with the inserting transaction's id (memory/search/changes.py)
    "ALTER TABLE memory_changes ALTER COLUMN xid SET DEFAULT (pg_current_xact_id()::text::bigint)",
    "CREATE FUNCTION memory_log_inserts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO memory_changes(source, row_id) SELECT TG_ARGV[0], id FROM new_rows; RETURN NULL; END $$",
]

#: the knowledge vector index's revision (SQLite: migrations 0002/0003)
_KNOWLEDGE_VECTOR_TRIGGERS = [
    "CREATE TRIGGER knowledge_q8_insert AFTER INSERT ON knowledge FOR EACH ROW WHEN (NEW.embedding_q8 IS NOT NULL)"
    " EXECUTE FUNCTION memory_bump_revision_trigger('knowledge_vector_revision')",
    "CREATE TRIGGER knowledge_q8_update AFTER UPDATE OF embedding_q8 ON knowledge FOR EACH ROW"
    " WHEN (NEW.embedding_q8 IS DISTINCT FROM OLD.embedding_q8)"
    " EXECUTE FUNCTION memory_bump_revision_trigger('knowledge_vector_revision')",
    "CREATE TRIGGER knowledge_q8_delete AFTER DELETE ON knowledge FOR EACH ROW WHEN (OLD.embedding_q8 IS NOT NULL)"
    " EXECUTE FUNCTION memory_bump_revision_trigger('knowledge_vector_revision')",
]


def schema(tokens: Mapping[str, str] | None = None) -> list[str]:
    """The postings tables, their functions and triggers. ``tokens``: a tokens column by FTS table
    other than today's (a migration that ran before a column was renamed passes the name it had)."""
    statements = list(_TABLES_AND_FUNCTIONS)
    for name, src in SOURCES.items():
        table, column = src.table, (tokens or {}).get(name, src.tokens)
        rev = REVISION_KEYS.get(table)
        args = f"'{src.code}'" + (f", '{rev}'" if rev else "")
        statements += [
            f"CREATE TRIGGER {table}_lexical_deleted AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows"
            f" FOR EACH STATEMENT EXECUTE FUNCTION lexical_rows_deleted({args})",
            f"CREATE TRIGGER {table}_lexical_truncated AFTER TRUNCATE ON {table}"
            f" FOR EACH STATEMENT EXECUTE FUNCTION lexical_rows_truncated('{src.code}')",
        ]
        if rev:
            statements += [
                f"CREATE TRIGGER {table}_lexical_update AFTER UPDATE OF {column} ON {table} FOR EACH ROW"
                f" WHEN (OLD.{column} <> '' AND NEW.{column} IS DISTINCT FROM OLD.{column})"
                f" EXECUTE FUNCTION memory_bump_revision_trigger('{rev}')",
                f"CREATE TRIGGER {table}_change_log AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows"
                f" FOR EACH STATEMENT EXECUTE FUNCTION memory_log_inserts('{table}')",
            ]
    return statements + _KNOWLEDGE_VECTOR_TRIGGERS


SCHEMA = schema()

DROP_SCHEMA = [
    *[f"DROP TRIGGER IF EXISTS {t}_{s} ON {t}" for t in ("facts", "episode_cues", "knowledge", "messages")
      for s in ("lexical_deleted", "lexical_truncated", "lexical_update", "change_log")],
    *[f"DROP TRIGGER IF EXISTS knowledge_q8_{op} ON knowledge" for op in ("insert", "update", "delete")],
    "DROP FUNCTION IF EXISTS memory_log_inserts()", "DROP FUNCTION IF EXISTS lexical_rows_truncated()",
    "DROP FUNCTION IF EXISTS lexical_rows_deleted()", "DROP FUNCTION IF EXISTS memory_bump_revision_trigger()",
    "DROP FUNCTION IF EXISTS memory_bump_revision(text)",
    "DROP TABLE IF EXISTS lexical_stats", "DROP TABLE IF EXISTS lexical_postings", "DROP TABLE IF EXISTS lexical_docs",
]


def reindex_all(cur: Any, tokens: Mapping[str, str] | None = None) -> int:
    """(Re)build every postings row from the rows' stored tokens (migration; a copied store).
    ``tokens``: as :func:`schema`'s."""
    column = {name: (tokens or {}).get(name, src.tokens) for name, src in SOURCES.items()}
    cur.execute("DELETE FROM lexical_docs")
    cur.execute("DELETE FROM lexical_postings")
    cur.execute("DELETE FROM lexical_stats")
    count = 0
    queries = {
        "facts_fts": f"SELECT id, {column['facts_fts']}, person_id FROM facts ORDER BY id",
        "cues_fts": f"SELECT c.id, c.{column['cues_fts']}, e.stream_id FROM episode_cues c"
                    " JOIN episodes e ON e.id = c.episode_id ORDER BY c.id",
        "knowledge_fts": f"SELECT id, {column['knowledge_fts']}, 0 FROM knowledge ORDER BY id",
        "messages_fts": f"SELECT id, {column['messages_fts']}, stream_id FROM messages"
                        f" WHERE {column['messages_fts']} <> '' ORDER BY id",
    }
    for table, sql in queries.items():
        cur.execute(sql)
        rows = cur.fetchall()
        for start in range(0, len(rows), 5000):
            _write_docs(cur, table, [(int(i), t or "", int(s)) for i, t, s in rows[start:start + 5000]])
        count += len(rows)
    return count


# --- writing --------------------------------------------------------------------------------------


def _store_tokens(cur: Any, table: str, payload: Sequence[tuple]) -> None:
    src = SOURCES[table]
    cur.executemany(f"UPDATE {src.table} SET {src.tokens} = %s WHERE id = %s", [(p[1], p[0]) for p in payload])


def _doc_postings(tokens: str, extra_tokens: int) -> tuple[int, list[tuple[str, int, str]]]:
    """A document's length (as FTS5 counts it) and its ``(term, tf, positions literal)`` postings."""
    toks = fts_tokens(tokens or "")
    positions: dict[str, list[int]] = defaultdict(list)
    for position, token in enumerate(toks):
        positions[token].append(position)
    postings = [(term, len(where), "{" + ",".join(map(str, where)) + "}") for term, where in positions.items()]
    return len(toks) + extra_tokens, postings


def _write_docs(cur: Any, table: str, docs: Sequence[tuple[int, str, int]]) -> None:
    """Index ``(doc_id, index_tokens, scope)`` rows: docs, postings and a statistics delta, in one statement."""
    if not docs:
        return
    src = SOURCES[table]
    doc_rows: list[tuple] = []
    post: dict[str, list] = {k: [] for k in ("term", "doc", "scope", "tf", "length", "positions")}
    total = 0
    for doc_id, tokens, scope in docs:
        length, postings = _doc_postings(tokens, src.extra_tokens)
        total += length
        doc_rows.append((doc_id, scope, length))
        for term, tf, positions in postings:
            post["term"].append(term)
            post["doc"].append(doc_id)
            post["scope"].append(scope)
            post["tf"].append(tf)
            post["length"].append(length)
            post["positions"].append(positions)
    cur.execute(
        "WITH d AS (INSERT INTO lexical_docs(source, doc_id, scope, length)"
        " SELECT %s, * FROM unnest(%s::bigint[], %s::bigint[], %s::int[])),"
        " p AS (INSERT INTO lexical_postings(source, term, doc_id, scope, tf, length, positions)"
        " SELECT %s, t, d, s, f, l, p::int[] FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::int[],"
        " %s::int[], %s::text[]) AS u(t, d, s, f, l, p))"
        " INSERT INTO lexical_stats(source, docs, tokens) VALUES (%s, %s, %s)",
        [src.code, [d[0] for d in doc_rows], [d[1] for d in doc_rows], [d[2] for d in doc_rows],
         src.code, post["term"], post["doc"], post["scope"], post["tf"], post["length"], post["positions"],
         src.code, len(docs), total],
    )


def _delete_docs(cur: Any, table: str, doc_ids: Iterable[int]) -> None:
    ids = sorted({int(i) for i in doc_ids})
    if not ids:
        return
    code = SOURCES[table].code
    cur.execute(
        "WITH gone AS (DELETE FROM lexical_docs WHERE source = %s AND doc_id = ANY(%s) RETURNING length)"
        " INSERT INTO lexical_stats(source, docs, tokens)"
        " SELECT %s, -count(*), -coalesce(sum(length), 0) FROM gone HAVING count(*) > 0",
        [code, ids, code],
    )
    cur.execute("DELETE FROM lexical_postings WHERE source = %s AND doc_id = ANY(%s)", [code, ids])


def index_rows(table: str, rows: Sequence[tuple[int, str]]) -> list[str]:
    payload = [(int(rowid), index_tokens(text)) for rowid, text in rows]
    with connection.cursor() as cur:
        _write_docs(cur, table, [(rowid, tokens, 0) for rowid, tokens in payload])
        _store_tokens(cur, table, payload)
    return [tokens for _, tokens in payload]


def index_scoped(table: str, rows: Sequence[tuple[int, str, int]]) -> list[str]:
    """``(rowid, text, scope id)`` rows of facts (person) or cues (stream)."""
    payload = [(int(rowid), index_tokens(text), int(scope)) for rowid, text, scope in rows]
    with connection.cursor() as cur:
        _write_docs(cur, table, payload)
        _store_tokens(cur, table, payload)
    return [tokens for _, tokens, _ in payload]


def index_messages(rows: Sequence[tuple[int, str, int]]) -> list[str]:
    payload = [(int(rowid), index_tokens(text or ""), int(s)) for rowid, text, s in rows]
    indexed = [p for p in payload if p[1]]
    if indexed:
        with connection.cursor() as cur:
            _write_docs(cur, "messages_fts", indexed)
            _store_tokens(cur, "messages_fts", indexed)
    return [tokens for _, tokens, _ in payload]


def _message_postings(tokens: str, scope: int | None) -> tuple[str, list[Any]]:
    """The CTEs that index the message ``m`` inserted before them: its doc row, postings and statistics delta.

    ``scope``: the stream id, or ``None`` for the stream id ``m`` returns.
    """
    if not tokens:
        return "", []
    src = SOURCES["messages_fts"]
    length, postings = _doc_postings(tokens, src.extra_tokens)
    scope_sql, scope_params = ("m.stream_id", []) if scope is None else ("%s", [int(scope)])
    sql = (
        f", d AS (INSERT INTO lexical_docs(source, doc_id, scope, length) SELECT %s, m.id, {scope_sql}, %s FROM m),"
        f" p AS (INSERT INTO lexical_postings(source, term, doc_id, scope, tf, length, positions)"
        f" SELECT %s, u.t, m.id, {scope_sql}, u.f, %s, u.p::int[] FROM m, unnest(%s::text[], %s::int[], %s::text[])"
        " AS u(t, f, p)),"
        " s AS (INSERT INTO lexical_stats(source, docs, tokens) SELECT %s, 1, %s FROM m)"
    )
    params = [src.code, *scope_params, length, src.code, *scope_params, length, [p[0] for p in postings],
              [p[1] for p in postings], [p[2] for p in postings], src.code, length]
    return sql, params


def insert_message(row: dict[str, Any]) -> tuple[int, str] | None:
    """INSERT one message (``row``: its columns) and its postings, doc row and statistics delta in one statement.

    Returns ``(id, tokens)``, or ``None`` when the stream already holds the row's
    ``external_message_id`` (nothing is written). One statement is atomic on its own, so
    outside a transaction the message costs one round trip (no BEGIN, no COMMIT).
    """
    tokens = index_tokens(row.get("content") or "")
    columns = [*row, "tokens"]
    sql = (f"WITH m AS (INSERT INTO messages({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
           " ON CONFLICT (stream_id, external_message_id) WHERE external_message_id IS NOT NULL DO NOTHING"
           " RETURNING id)")
    index_sql, index_params = _message_postings(tokens, int(row["stream_id"]))
    with connection.cursor() as cur:
        cur.execute(sql + index_sql + " SELECT id FROM m", [*row.values(), tokens, *index_params])
        found = cur.fetchone()
    return None if found is None else (int(found[0]), tokens)


def store_message(
    stream: tuple[str, str, str, str], sender: tuple[str, str, str] | None, row: dict[str, Any]
) -> tuple[int | None, int | None, tuple[int, str] | None]:
    """Look up a message's stream and sender by their platform refs and INSERT it, in one statement.

    ``stream``: ``(platform, kind, external_id, name)``; ``sender``: ``(platform, external_id,
    name)`` or ``None`` (no sender); ``row``: the message's other columns. A ref is found only
    when it exists and its display name needs no change (``name`` empty or equal to the stored
    one); then the message is inserted and indexed as :func:`insert_message` does.

    Returns ``(stream id, sender's person id, (message id, tokens))``: an id is ``None`` when
    that ref was not found (nothing is written), the message ``None`` when nothing was inserted
    (a ref not found, or the stream already holds the row's ``external_message_id``).
    """
    tokens = index_tokens(row.get("content") or "")
    platform, kind, external_id, name = stream
    sql = ("WITH st AS (SELECT id FROM streams WHERE platform = %s AND kind = %s AND external_id = %s"
           " AND (%s = '' OR display_name = %s))")
    params: list[Any] = [platform, kind, external_id, name, name]
    if sender is not None:
        sql += (", pe AS (SELECT person_id AS id FROM identities WHERE platform = %s AND external_id = %s"
                " AND (%s = '' OR display_name = %s))")
        params += [sender[0], sender[1], sender[2], sender[2]]
    columns = [*row, "tokens"]
    sql += (f", m AS (INSERT INTO messages({', '.join(columns)}, stream_id, sender_person_id)"
            f" SELECT {', '.join(['%s'] * len(columns))}, st.id, {'pe.id' if sender is not None else 'NULL'}"
            f" FROM st{', pe' if sender is not None else ''}"
            " ON CONFLICT (stream_id, external_message_id) WHERE external_message_id IS NOT NULL DO NOTHING"
            " RETURNING id, stream_id)")
    params += [*row.values(), tokens]
    index_sql, index_params = _message_postings(tokens, None)
    sql += index_sql + " SELECT (SELECT id FROM st), " + ("(SELECT id FROM pe)" if sender is not None else "NULL")
    sql += ", (SELECT id FROM m)"
    with connection.cursor() as cur:
        cur.execute(sql, params + index_params)
        stream_id, person_id, message_id = cur.fetchone()
    return stream_id, person_id, None if message_id is None else (int(message_id), tokens)


def reindex_message(rowid: int, text: str, stream_id: int, old_tokens: str) -> str:
    if old_tokens:
        with connection.cursor() as cur:
            _delete_docs(cur, "messages_fts", [rowid])
            cur.execute("UPDATE messages SET tokens = '' WHERE id = %s", [rowid])
    return index_messages([(rowid, text, stream_id)])[0]


def clear(table: str) -> None:
    code = SOURCES[table].code
    with connection.cursor() as cur:
        for name in ("lexical_docs", "lexical_postings", "lexical_stats"):
            cur.execute(f"DELETE FROM {name} WHERE source = %s", [code])


def delete_rows(table: str, rows: Sequence[tuple]) -> None:
    """``(rowid, tokens[, scope id])`` rows: the postings go by rowid."""
    with connection.cursor() as cur:
        _delete_docs(cur, table, [row[0] for row in rows])


def purge_deleted(tables: Sequence[str]) -> None:
    """Nothing to do: deleted postings are dead tuples until (auto)vacuum (docs/DEPLOY.md)."""


# --- statistics -----------------------------------------------------------------------------------


def _stats(code: int) -> tuple[int, int]:
    """``(rows, tokens)`` of a table; folds the delta rows when there are many (outside transactions)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*), coalesce(sum(docs), 0), coalesce(sum(tokens), 0) FROM lexical_stats WHERE source = %s",
            [code],
        )
        deltas, docs, tokens = cur.fetchone()
        if deltas > STATS_FOLD_ROWS:
            # rows another transaction is folding (or wrote and has not committed) are skipped, never waited for
            cur.execute(
                "WITH gone AS (DELETE FROM lexical_stats WHERE id IN (SELECT id FROM lexical_stats WHERE source = %s"
                " FOR UPDATE SKIP LOCKED) RETURNING docs, tokens)"
                " INSERT INTO lexical_stats(source, docs, tokens)"
                " SELECT %s, coalesce(sum(docs), 0), coalesce(sum(tokens), 0) FROM gone",
                [code, code],
            )
    return int(docs), int(tokens)


def document_count(table: str) -> int:
    return _stats(SOURCES[table].code)[0]


def fold_statistics() -> None:
    """Fold every table's statistics delta rows into one (each message adds one; readers fold only
    the tables they read, and the resident indexes read none: the retention sweep folds them all)."""
    for source in SOURCES.values():
        _stats(source.code)


def document_frequencies(table: str, terms: Sequence[str]) -> dict[str, int]:
    if not terms:
        return {}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT term, count(*) FROM lexical_postings WHERE source = %s AND term = ANY(%s) GROUP BY term",
            [SOURCES[table].code, list(dict.fromkeys(terms))],
        )
        return {term: int(n) for term, n in cur.fetchall()}


def message_statistics() -> tuple[list[tuple[str, int]], np.ndarray, int]:
    """The message index's statistics for the resident message index: ``(term, document frequency)``
    pairs, the indexed message ids (ascending) and their token total (FTS5's row count and
    ``messages_fts_vocab`` numbers; call inside one snapshot)."""
    code = SOURCES["messages_fts"].code
    with connection.cursor() as cur:
        cur.execute("SELECT term, count(*) FROM lexical_postings WHERE source = %s GROUP BY term", [code])
        frequencies = cur.fetchall()
        cur.execute("SELECT doc_id, length FROM lexical_docs WHERE source = %s ORDER BY doc_id", [code])
        docs = cur.fetchall()
    ids = np.fromiter((d for d, _ in docs), dtype=np.int64, count=len(docs))
    return frequencies, ids, sum(length for _, length in docs)


# --- scoring --------------------------------------------------------------------------------------


def _phrase_hits(phrase: Sequence[str], positions: dict[str, Sequence[int]]) -> int:
    """Occurrences of ``phrase`` (consecutive tokens) in one document (FTS5's phrase frequency)."""
    if len(phrase) == 1:
        return len(positions.get(phrase[0], ()))
    lists = [positions.get(t) for t in phrase]
    if any(not p for p in lists):
        return 0
    later = [set(p) for p in lists[1:]]
    return sum(1 for start in lists[0] if all(start + k + 1 in s for k, s in enumerate(later)))


def _postings(code: int, tokens: Sequence[str], where: str = "", params: Sequence[Any] = ()) -> dict[int, tuple]:
    """``doc → (length, {token: positions})`` for the documents holding any of ``tokens``."""
    docs: dict[int, tuple[int, dict[str, list[int]]]] = {}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT doc_id, term, length, positions FROM lexical_postings"
            f" WHERE source = %s AND term = ANY(%s){where}",
            [code, list(tokens), *params],
        )
        for doc_id, term, length, positions in cur.fetchall():
            entry = docs.get(doc_id)
            if entry is None:
                entry = docs[doc_id] = (int(length), {})
            entry[1][term] = positions
    return docs


def _phrases(terms: Sequence[str]) -> list[list[str]]:
    """A query's phrases as FTS5 reads them: one per term (its tokens), duplicates kept, empty ones dropped."""
    return [toks for toks in (fts_tokens(t) for t in terms) if toks]


def _score(
    table: str, terms: Sequence[str], *, scopes: Sequence[int] | None = None, before_id: int | None = None,
    ids: Sequence[int] | None = None, id_range: tuple[int, int] | None = None,
) -> dict[int, float]:
    """FTS5's bm25 (negative, lower is better) of the matching documents; see the module docstring."""
    phrases = _phrases(terms)
    if not phrases:
        return {}
    code = SOURCES[table].code
    n_rows, n_tokens = _stats(code)
    if n_rows <= 0:
        return {}
    tokens = sorted({t for p in phrases for t in p})
    where, params = "", []
    if scopes is not None:
        where += " AND scope = ANY(%s)"
        params.append(sorted({int(s) for s in scopes}))
    if before_id is not None:
        where += " AND doc_id < %s"
        params.append(int(before_id))
    if ids is not None:
        where += " AND doc_id = ANY(%s)"
        params.append(sorted({int(i) for i in ids}))
    if id_range is not None:
        where += " AND doc_id BETWEEN %s AND %s"
        params += [int(id_range[0]), int(id_range[1])]
    docs = _postings(code, tokens, where, params)
    if not docs:
        return {}
    everyone = docs if not where else None
    hits_per_phrase: dict[tuple[str, ...], int] = {}
    single = [p[0] for p in phrases if len(p) == 1]
    if everyone is None and single:
        frequencies = document_frequencies(table, single)
        hits_per_phrase.update({(t,): frequencies.get(t, 0) for t in single})
    for phrase in phrases:
        key = tuple(phrase)
        if key in hits_per_phrase:
            continue
        pool = everyone if everyone is not None else _postings(code, phrase)
        hits_per_phrase[key] = sum(1 for _, positions in pool.values() if _phrase_hits(phrase, positions))
    idfs = []
    for phrase in phrases:
        # Read committed: the statistics and the postings are read by different statements, and rows
        # another transaction commits in between can make more documents hit than the statistics count.
        n_hit = min(hits_per_phrase[tuple(phrase)], n_rows)
        idfs.append(fts_idf(n_rows, n_hit))
    avgdl = float(n_tokens) / float(n_rows)
    out: dict[int, float] = {}
    for doc_id, (length, positions) in docs.items():
        score, matched = 0.0, False
        norm = K1 * ((1.0 - B) + B * float(length) / avgdl)  # fts5_bm25's order of operations
        for phrase, idf in zip(phrases, idfs, strict=True):
            freq = float(_phrase_hits(phrase, positions))
            if freq:
                matched = True
                score += idf * ((freq * (K1 + 1.0)) / (freq + norm))
        if matched:
            out[int(doc_id)] = -1.0 * score
    return out


def _best(scores: dict[int, float], *, newest_first: bool = False) -> list[tuple[int, float]]:
    """Best bm25 first; ties by rowid (ascending, or descending when ``newest_first``)."""
    if newest_first:
        return sorted(scores.items(), key=lambda kv: (kv[1], -kv[0]))
    return sorted(scores.items(), key=lambda kv: (kv[1], kv[0]))


# --- the queries of memory/search/lexical.py ---------------------------------------------------------------
# The same functions, arguments and results as memory/backends/sqlite.py's; a query is an FTS5 MATCH
# expression of quoted terms (memory.engine.tokenize.match_expression), scored here term by term.


def message_candidates(match: str, *, stream_id: int, before_id: int | None, limit: int) -> list[tuple[int, float]]:
    scores = _score("messages_fts", terms_of(match), scopes=[stream_id], before_id=before_id)
    return _best(scores, newest_first=True)[:limit]


def message_bm25(match: str, *, stream_id: int, message_ids: Sequence[int]) -> dict[int, float]:
    return _score("messages_fts", terms_of(match), scopes=[stream_id], ids=message_ids)


def fact_scores(terms: Sequence[str], person_ids: Sequence[int] | None) -> list[tuple[int, float]]:
    """Every matching fact ``(id, bm25)`` of the persons (``None``: everyone's), best first (ties: lower id)."""
    return _best(_score("facts_fts", terms, scopes=person_ids))


def fact_candidates(match: str, *, person_ids: Sequence[int] | None, limit: int, include_invalid: bool) -> list[tuple]:
    ranked = fact_scores(terms_of(match), person_ids)
    return ranked_fact_rows(chunks(ranked, limit), include_invalid=include_invalid, limit=limit)


def fact_bm25(match: str, fact_ids: Sequence[int]) -> dict[int, float]:
    return _score("facts_fts", terms_of(match), ids=fact_ids)


def similar_facts(match: str, *, person_id: int, limit: int) -> list[tuple[int, str]]:
    ranked = fact_scores(terms_of(match), [person_id])
    rows = ranked_fact_rows(chunks(ranked, limit), include_invalid=False, limit=limit, columns="f.id, {bm25}, f.content")
    return [(fid, content) for fid, _, content in rows]


def fact_matches(match: str, *, person_id: int, limit: int) -> list[tuple[int, str]] | None:
    """The person's postings only: no document frequencies, no statistics (see :func:`_score`)."""
    phrases = _phrases(terms_of(match))
    if not phrases:
        return []
    docs = _postings(SOURCES["facts_fts"].code, sorted({t for p in phrases for t in p}), " AND scope = ANY(%s)",
                     [[int(person_id)]])
    ids = sorted(d for d, (_, positions) in docs.items() if any(_phrase_hits(p, positions) for p in phrases))
    if len(ids) > limit:
        return None
    rows = ranked_fact_rows([[(i, 0.0) for i in ids]], include_invalid=False, limit=limit, columns="f.id, {bm25}, f.content")
    return [(fid, content) for fid, _, content in rows]


def cue_candidates(match: str, *, stream_id: int | None, limit: int) -> list[tuple[int, int, float]]:
    """Every matching cue of one stream (``None``: all streams), best first (ties: lower id), until
    ``limit`` of summarised episodes are found."""
    ranked = _best(_score("cues_fts", terms_of(match), scopes=None if stream_id is None else [stream_id]))
    found: list[tuple[int, int, float]] = []
    for batch in chunks(ranked, limit):
        found += cue_rows(batch)
        if len(found) >= limit:
            break
    return found[:limit]


def unpruned_top(table: str, match: str, *, limit: int) -> list[tuple[int, float]]:
    return _best(_score(table, terms_of(match)))[:limit]


def knowledge_candidates(match: str, *, limit: int) -> list[tuple[int, float]]:
    return unpruned_top("knowledge_fts", match, limit=limit)


def knowledge_bm25(match: str, ids: Sequence[int]) -> dict[int, float]:
    return _score("knowledge_fts", terms_of(match), ids=ids)


def rows_containing(table: str, match: str, *, limit: int) -> list[int]:
    return sorted(_score(table, terms_of(match)))[:limit]


# --- the change log (memory/search/changes.py) -------------------------------------------------------------


def read_changes(source: str, revision_key: str, horizon: int | None) -> tuple[str, int, list[tuple[int, int, int]], int]:
    """One snapshot: ``(revision, new horizon, changes, pruned)``.

    ``changes`` = ``(change id, row id, xid)`` of ``source`` written by transactions with
    an id ≥ ``horizon`` (``None``: ≥ this snapshot's xmin); the new horizon is this
    snapshot's xmin — every transaction below it has ended, so nothing a later
    snapshot shows can come from below it. ``pruned`` = the highest xid the log was
    pruned through.
    """
    sql, params = changes_statement([(source, revision_key, horizon)])
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return parse_changes(cur.fetchone())[0]


def changes_statement(feeds: Sequence[tuple[str, str, int | None]]) -> tuple[str, list[Any]]:
    """:func:`read_changes` of several ``(source, revision key, horizon)`` as one statement (one
    snapshot), to be sent with other reads (:func:`read_together`); its row: :func:`parse_changes`."""
    parts, params = [], []
    for source, revision_key, horizon in feeds:
        parts.append(
            "(SELECT value FROM meta WHERE key = %s),"
            " (SELECT coalesce(json_agg(json_build_array(c.id, c.row_id, c.xid)), '[]') FROM memory_changes c"
            "  WHERE c.source = %s AND c.xid >= coalesce(%s, h.xmin))"
        )
        params += [revision_key, source, horizon]
    sql = ("WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin)"
           " SELECT h.xmin, (SELECT value FROM meta WHERE key = 'changes_pruned_through'), "
           + ", ".join(parts) + " FROM h")
    return sql, params


def parse_changes(row: Sequence[Any]) -> list[tuple[str, int, list[tuple[int, int, int]], int]]:
    xmin, pruned, *found = row
    out = []
    for revision, changes in zip(found[::2], found[1::2], strict=True):
        if isinstance(changes, str):
            changes = json.loads(changes)
        out.append((revision or "0", int(xmin), [(int(a), int(b), int(c)) for a, b, c in changes], int(pruned or 0)))
    return out


def read_together(statements: Sequence[tuple[str, Sequence[Any], bool]]) -> list[list[tuple]]:
    """The rows of several reads ``(sql, params, binary results)`` sent together, one round trip
    (psycopg's pipeline mode); each is its own statement (outside a transaction, its own
    snapshot), as if sent one after another."""
    connection.ensure_connection()
    cursors = [_binary_cursor() if binary else connection.cursor() for _, _, binary in statements]
    try:
        with connection.wrap_database_errors, connection.connection.pipeline():
            for cur, (sql, params, _) in zip(cursors, statements, strict=True):
                cur.execute(sql, params)
        return [cur.fetchall() for cur in cursors]
    finally:
        for cur in cursors:
            cur.close()


def read_message_changes(revision_key: str, horizon: int | None, seen: set[int]) -> tuple[str, int, list[tuple], int]:
    """:func:`read_changes` of ``messages``, each change with what the resident statistics need,
    all in one statement (one snapshot): ``(change id, row id, xid, old stream, old tokens, stream,
    tokens)`` — the row's stream and tokens before the change (``None``: an insert; migration
    0025) and as this snapshot shows it (``None``: deleted). The last four are ``None`` for the
    changes in ``seen`` (already handed out: only their ids and xids matter)."""
    with connection.cursor() as cur:
        cur.execute(
            "WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin)"
            " SELECT (SELECT value FROM meta WHERE key = %s), h.xmin,"
            " (SELECT coalesce(json_agg(json_build_array(c.id, c.row_id, c.xid, c.scope,"
            "   CASE WHEN s.id IS NULL THEN c.old_tokens END, m.stream_id, m.tokens) ORDER BY c.id), '[]')"
            "  FROM memory_changes c LEFT JOIN unnest(%s::bigint[]) AS s(id) ON s.id = c.id"
            "  LEFT JOIN messages m ON s.id IS NULL AND m.id = c.row_id"
            "  WHERE c.source = 'messages' AND c.xid >= coalesce(%s, h.xmin)),"
            " (SELECT value FROM meta WHERE key = 'changes_pruned_through')"
            " FROM h",
            [revision_key, sorted(seen), horizon],
        )
        revision, xmin, changes, pruned = cur.fetchone()
    if isinstance(changes, str):
        changes = json.loads(changes)
    return revision or "0", int(xmin), [(int(c[0]), int(c[1]), int(c[2]), *c[3:]) for c in changes], int(pruned or 0)


def prune_changes(keep: int) -> int:
    """Drop change rows older than the newest ``keep`` that every snapshot has seen; returns rows dropped."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT max(xid) FROM (SELECT xid FROM memory_changes ORDER BY id DESC OFFSET %s LIMIT 1) t",
            [keep],
        )
        (through,) = cur.fetchone()
        if through is None:
            return 0
        cur.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        through = min(int(through), int(cur.fetchone()[0]) - 1)
        cur.execute("DELETE FROM memory_changes WHERE xid <= %s", [through])
        dropped = cur.rowcount
        if dropped:
            cur.execute(
                "INSERT INTO meta(key, value) VALUES ('changes_pruned_through', %s) ON CONFLICT (key) DO UPDATE"
                " SET value = GREATEST(meta.value::bigint, EXCLUDED.value::bigint)::text",
                [str(through)],
            )
    return dropped
