"""The storage seam: every statement only one database backend understands.

SQLite (the embedded default) and PostgreSQL (``DATABASE_URL``) run the same schema
and the same portable SQL everywhere else in the project. What differs lives here,
chosen by ``connection.vendor``:

- the lexical index's statements (:class:`LexicalStatements`, :func:`lexical`): FTS5 tables on
  SQLite (:mod:`memory.backends.sqlite`); postings tables scored with FTS5's own BM25 on
  PostgreSQL (:mod:`memory.backends.postgresql`); :mod:`memory.search.lexical` is their API;
- revision counters (``meta`` values ``<counter>-<random>``) and the triggers that
  bump them (:mod:`memory.backends.sqlite`, :mod:`memory.backends.postgresql`);
- the change log's position (:mod:`memory.search.changes`): the log's id on SQLite (one
  writer at a time, commit order = id order), the writing transaction's id and the
  snapshot horizon on PostgreSQL;
- small pieces of arithmetic (``log2``) and the secure-delete switch of forgetting.

Migrations call :func:`run_for` / :func:`sql_for` so that SQLite-only DDL (FTS5,
fts5vocab, SQLite triggers) never reaches PostgreSQL and vice versa.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from django.db import connection, migrations

from memory.backends import postgresql, sqlite
from memory.backends.portable import in_placeholders  # noqa: F401 — the IN lists' placeholders, for every caller

SQLITE = "sqlite"
POSTGRESQL = "postgresql"

#: Lock spaces of :func:`lock_key`.
LOCK_PERSON_FACTS = 1      # key: person id — add_fact's look for a similar fact, then insert
LOCK_EXTRACT_CURSORS = 2   # key: 0 — the one meta row holding every stream's extraction cursor


def vendor(conn: Any = None) -> str:
    return (conn or connection).vendor


def is_postgresql(conn: Any = None) -> bool:
    return vendor(conn) == POSTGRESQL


def module(conn: Any = None):
    """The backend module of ``conn`` (default: the default connection)."""
    return postgresql if is_postgresql(conn) else sqlite


class LexicalStatements(Protocol):
    """What each backend's module does for :mod:`memory.search.lexical` (which checks the table names,
    asks the resident indexes first, and documents each function). ``match`` is an FTS5 ``MATCH``
    expression of quoted terms (:func:`memory.engine.tokenize.match_expression`), never empty; a
    scope id is a person's (facts) or a stream's (cues, messages). Both give the same rows and the
    same bm25 doubles for the same data (tests/memory/test_lexical_statements.py)."""

    def index_rows(self, table: str, rows: Sequence[tuple[int, str]]) -> list[str]: ...
    def index_scoped(self, table: str, rows: Sequence[tuple[int, str, int]]) -> list[str]: ...
    def index_messages(self, rows: Sequence[tuple[int, str, int]]) -> list[str]: ...
    def reindex_message(self, rowid: int, text: str, stream_id: int, old_tokens: str) -> str: ...
    def delete_rows(self, table: str, rows: Sequence[tuple]) -> None: ...
    def clear(self, table: str) -> None: ...
    def purge_deleted(self, tables: Sequence[str]) -> None: ...
    def document_count(self, table: str) -> int: ...
    def document_frequencies(self, table: str, terms: Sequence[str]) -> dict[str, int]: ...
    def message_candidates(self, match: str, *, stream_id: int, before_id: int | None,
                           limit: int) -> list[tuple[int, float]]: ...
    def message_bm25(self, match: str, *, stream_id: int, message_ids: Sequence[int]) -> dict[int, float]: ...
    def fact_candidates(self, match: str, *, person_ids: Sequence[int] | None, limit: int,
                        include_invalid: bool) -> list[tuple]: ...
    def fact_bm25(self, match: str, fact_ids: Sequence[int]) -> dict[int, float]: ...
    def similar_facts(self, match: str, *, person_id: int, limit: int) -> list[tuple[int, str]]: ...
    def fact_matches(self, match: str, *, person_id: int, limit: int) -> list[tuple[int, str]] | None: ...
    def cue_candidates(self, match: str, *, stream_id: int | None, limit: int) -> list[tuple[int, int, float]]: ...
    def knowledge_candidates(self, match: str, *, limit: int) -> list[tuple[int, float]]: ...
    def knowledge_bm25(self, match: str, ids: Sequence[int]) -> dict[int, float]: ...
    def rows_containing(self, table: str, match: str, *, limit: int) -> list[int]: ...
    def unpruned_top(self, table: str, match: str, *, limit: int) -> list[tuple[int, float]]: ...
    def fold_statistics(self) -> None: ...


@functools.cache
def lexical() -> LexicalStatements:
    """The lexical statements of the default connection's backend, chosen once per process (a
    process talks to one database: ``DATABASE_URL``)."""
    return module()


def fetch_binary(sql: str, params: Sequence[Any]) -> list[tuple]:
    """All rows of a read whose result carries large ``bytea`` columns (vectors).

    PostgreSQL: a server-side-binding cursor with binary results (Django's client-side cursors
    get ``bytea`` as hex text, which costs the client twice the CPU to decode); plain SQL
    placeholders (``%s``) either way. Elsewhere the connection's own cursor.
    """
    return module().fetch_binary(sql, params)


def json_list_has(column: str, value: int) -> tuple[str, list[Any]]:
    """A condition (SQL, params) that the JSON list in ``column`` (a quoted ``table.column``) holds
    the integer ``value``: ``json_each`` on SQLite, jsonb containment on PostgreSQL."""
    return module().json_list_has(column, value)


def bump_revision(cur: Any, key: str) -> None:
    """Set a ``meta`` revision to ``<counter + 1>-<random>`` (never equal to an earlier value)."""
    cur.execute(module().BUMP_REVISION_SQL, [key])


def lock_key(cur: Any, space: int, key: int) -> None:
    """Hold a lock on ``(space, key)`` until the current transaction ends (serialises check-then-insert).

    SQLite's IMMEDIATE transactions already exclude every other writer; PostgreSQL takes a
    transaction-level advisory lock (``pg_advisory_xact_lock``), so two transactions that
    each look for a similar row before inserting one cannot both miss the other's.
    """
    module().lock_key(cur, space, key)


def commit_without_flush(cur: Any) -> None:
    """Let the current transaction's commit return before its log is flushed to disk.

    For writes that are cheap to lose in a crash of the database server and needed fast: a
    turn's trace and a confirm's reinforcement (PostgreSQL ``SET LOCAL synchronous_commit TO
    OFF``: the commit is still atomic and never corrupts, but the last ~0.6 s of such commits
    may roll back if PostgreSQL or the machine crashes; a flush costs ~3 ms on common disks).
    SQLite's WAL with ``synchronous=NORMAL`` already commits so for every transaction.
    """
    module().commit_without_flush(cur)


def checkpoint() -> tuple[int, int, int] | None:
    """Copy what the write-ahead log holds back into the database file now, without waiting for
    or blocking anyone (SQLite ``PRAGMA wal_checkpoint(PASSIVE)``: ``(busy, log frames,
    checkpointed frames)``). PostgreSQL checkpoints by itself: ``None``.

    Web processes leave most checkpoints to the workers and the beat
    (``SQLITE_WEB_WAL_AUTOCHECKPOINT``, :func:`checkpoint_on_commit`), so a turn's commit does
    not pay for copying the log back.
    """
    return module().checkpoint()


def checkpoint_on_commit(pages: int = 1000) -> None:
    """This process's new SQLite connections checkpoint the log at their commits once it holds
    ``pages`` pages (SQLite's own default; a Celery worker, config/celery.py). No-op on PostgreSQL."""
    module().checkpoint_on_commit(pages)


def log2_sql(expression: str) -> str:
    """``log2(expression)`` in the backend's SQL."""
    return module().LOG2_SQL.format(expression)


def in_subquery_sql(expression: str, subquery: str) -> str:
    """``expression IN (subquery)`` in the backend's SQL. PostgreSQL: ``= ANY(ARRAY(subquery))``, the
    subquery run once ahead, so a small set is looked up by index (its ``IN`` guesses 200 rows for
    a ``GROUP BY`` subquery and hashes a whole table)."""
    return module().IN_SUBQUERY_SQL.format(expression, subquery)


def json_ids_sql(table: str, column: str) -> str:
    """A subquery of the ids in the JSON array ``column`` of the ``table`` row whose id is the
    statement's parameter (``%s``), as integers."""
    return module().JSON_IDS_SQL.format(table=table, column=column)


def secure_delete(cur: Any) -> None:
    """Make the deletes of this connection overwrite freed space (SQLite ``secure_delete``).

    PostgreSQL has no equivalent switch: dead tuples are reclaimed by (auto)vacuum;
    docs/DEPLOY.md says how to vacuum after forgetting.
    """
    module().secure_delete(cur)


# --- migrations -----------------------------------------------------------------------------


def sql_for(
    *, sqlite: Sequence[str] = (), postgresql: Sequence[str] = (),
    reverse_sqlite: Sequence[str] = (), reverse_postgresql: Sequence[str] = (),
) -> migrations.RunPython:
    """A migration operation running the statements of the migrating connection's backend."""

    def run(statements: dict[str, Sequence[str]]) -> Callable:
        def apply(apps, schema_editor) -> None:
            for sql in statements.get(schema_editor.connection.vendor, ()):
                schema_editor.execute(sql, params=None)

        return apply

    return migrations.RunPython(
        run({SQLITE: list(sqlite), POSTGRESQL: list(postgresql)}),
        run({SQLITE: list(reverse_sqlite), POSTGRESQL: list(reverse_postgresql)}),
    )


def run_for(
    *, sqlite: Callable | None = None, postgresql: Callable | None = None,
    reverse_sqlite: Callable | None = None, reverse_postgresql: Callable | None = None,
) -> migrations.RunPython:
    """A RunPython operation whose function is chosen by the migrating connection's backend."""

    def pick(functions: dict[str, Callable | None]) -> Callable:
        def apply(apps, schema_editor) -> None:
            function = functions.get(schema_editor.connection.vendor)
            if function is not None:
                function(apps, schema_editor)

        return apply

    return migrations.RunPython(
        pick({SQLITE: sqlite, POSTGRESQL: postgresql}),
        pick({SQLITE: reverse_sqlite, POSTGRESQL: reverse_postgresql}),
    )
