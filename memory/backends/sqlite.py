"""SQLite-only SQL outside the FTS5 lexical index (which is ``memory/search/lexical.py``)."""
from __future__ import annotations

import json
from typing import Any

from django.db import connection

BUMP_REVISION_SQL = (
    "INSERT INTO meta(key, value) VALUES (%s, '1-' || hex(randomblob(6))) ON CONFLICT(key) DO UPDATE"
    " SET value = (CAST(value AS INTEGER) + 1) || '-' || hex(randomblob(6))"
)
LOG2_SQL = "log2({})"
IN_SUBQUERY_SQL = "{} IN ({})"
JSON_IDS_SQL = "SELECT CAST(j.value AS INTEGER) FROM {table}, json_each({table}.{column}) AS j WHERE {table}.id = %s"


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
