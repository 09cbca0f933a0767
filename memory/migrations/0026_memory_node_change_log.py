"""Memory nodes join the change log: the resident node texts learn of new nodes in any commit order.

Concept spreading keeps the casefolded texts of every memory node resident
(``memory/selectors/graph.py``). It used to tell new and deleted nodes by the table's
highest id and row count; on PostgreSQL that count is a scan of the whole table, paid by
every spread that maps concepts (3–10 ms at the bench scale). Inserted nodes now go to
the change log with their transaction's id, as facts, cues and knowledge do (0020), and a
deletion bumps ``meta['lexical_revision:memory_nodes']``.
"""
from __future__ import annotations

from django.db import migrations

from memory.backends import sql_for

KEY = "lexical_revision:memory_nodes"
SQLITE = [
    "CREATE TRIGGER memory_nodes_change_log AFTER INSERT ON memory_nodes BEGIN"
    " INSERT INTO memory_changes(source, row_id, xid) VALUES ('memory_nodes', NEW.id, NULL); END",
    "CREATE TRIGGER memory_nodes_deleted AFTER DELETE ON memory_nodes BEGIN"
    f" INSERT INTO meta(key, value) VALUES ('{KEY}', '1-' || hex(randomblob(6))) ON CONFLICT(key) DO UPDATE"
    " SET value = (CAST(value AS INTEGER) + 1) || '-' || hex(randomblob(6)); END",
]
SQLITE_DROP = ["DROP TRIGGER IF EXISTS memory_nodes_change_log", "DROP TRIGGER IF EXISTS memory_nodes_deleted"]
POSTGRESQL = [
    "CREATE TRIGGER memory_nodes_change_log AFTER INSERT ON memory_nodes REFERENCING NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION memory_log_inserts('memory_nodes')",
    "CREATE FUNCTION memory_bump_if_deleted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF EXISTS (SELECT 1 FROM old_rows) THEN PERFORM memory_bump_revision(TG_ARGV[0]); END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER memory_nodes_deleted AFTER DELETE ON memory_nodes REFERENCING OLD TABLE AS old_rows"
    f" FOR EACH STATEMENT EXECUTE FUNCTION memory_bump_if_deleted('{KEY}')",
]
POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS memory_nodes_change_log ON memory_nodes",
    "DROP TRIGGER IF EXISTS memory_nodes_deleted ON memory_nodes",
    "DROP FUNCTION IF EXISTS memory_bump_if_deleted()",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0025_message_edits_in_change_log")]

    operations = [sql_for(sqlite=SQLITE, reverse_sqlite=SQLITE_DROP, postgresql=POSTGRESQL, reverse_postgresql=POSTGRESQL_DROP)]
