"""Make the knowledge-vector revision a counter plus a random token.

A plain counter can come back to a value a process already built its index
from (a transaction bumps it, the process rebuilds inside it, the transaction
rolls back, the next write bumps it to the same number again). The value is now
``<counter>-<random hex>``: still increasing in its integer prefix, never equal
to an earlier value.
"""
from __future__ import annotations

from django.db import migrations

from memory.backends import sql_for

NEW_BUMP = (
    "INSERT INTO meta(key, value) VALUES ('knowledge_vector_revision', '1-' || hex(randomblob(6))) "
    "ON CONFLICT(key) DO UPDATE SET value = (CAST(value AS INTEGER) + 1) || '-' || hex(randomblob(6));"
)
OLD_BUMP = (
    "INSERT INTO meta(key, value) VALUES ('knowledge_vector_revision', '1') "
    "ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT);"
)


def triggers(bump: str) -> list[str]:
    return [
        "DROP TRIGGER IF EXISTS knowledge_q8_insert",
        "DROP TRIGGER IF EXISTS knowledge_q8_update",
        "DROP TRIGGER IF EXISTS knowledge_q8_delete",
        f"CREATE TRIGGER knowledge_q8_insert AFTER INSERT ON knowledge WHEN NEW.embedding_q8 IS NOT NULL BEGIN {bump} END",
        f"CREATE TRIGGER knowledge_q8_update AFTER UPDATE OF embedding_q8 ON knowledge "
        f"WHEN NEW.embedding_q8 IS NOT OLD.embedding_q8 BEGIN {bump} END",
        f"CREATE TRIGGER knowledge_q8_delete AFTER DELETE ON knowledge WHEN OLD.embedding_q8 IS NOT NULL BEGIN {bump} END",
    ]


class Migration(migrations.Migration):
    dependencies = [("memory", "0002_fts_and_triggers")]

    # SQLite only (PostgreSQL: 0019_postgresql).
    operations = [sql_for(sqlite=triggers(NEW_BUMP), reverse_sqlite=triggers(OLD_BUMP))]
