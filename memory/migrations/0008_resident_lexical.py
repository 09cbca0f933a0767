"""Store every FTS row's tokens beside its row, and tell readers when rows go away.

The resident BM25 index (``memory/lexical_index.py``) loads the tokens of facts,
episode cues and knowledge from their rows: cues get a ``tokens`` column, and
facts written before this migration get their ``tokens_v2`` filled in (the
same ``index_tokens`` their FTS rows were written from). Triggers bump
``meta['lexical_revision:<table>']`` when a row is deleted or its stored tokens
change (inserts need no trigger: readers append rows above the last id they
loaded; the writer fills in the tokens of a new row in the insert's own
transaction, so that first write is no change).
"""
from __future__ import annotations

from django.db import migrations, models

from memory.backends import sql_for

TABLES = (("facts", "tokens_v2"), ("episode_cues", "tokens"), ("knowledge", "tokens_v2"))


def _bump(table: str) -> str:
    key = f"lexical_revision:{table}"
    return (
        f"INSERT INTO meta(key, value) VALUES ('{key}', '1-' || hex(randomblob(6))) "
        "ON CONFLICT(key) DO UPDATE SET value = (CAST(value AS INTEGER) + 1) || '-' || hex(randomblob(6));"
    )


def _triggers() -> list[str]:
    sql = []
    for table, column in TABLES:
        sql += [
            f"CREATE TRIGGER {table}_lexical_delete AFTER DELETE ON {table} BEGIN {_bump(table)} END",
            f"CREATE TRIGGER {table}_lexical_update AFTER UPDATE OF {column} ON {table} "
            f"WHEN OLD.{column} <> '' AND NEW.{column} IS NOT OLD.{column} BEGIN {_bump(table)} END",
        ]
    return sql


def _drop_triggers() -> list[str]:
    return [f"DROP TRIGGER IF EXISTS {table}_lexical_{op}" for table, _ in TABLES for op in ("delete", "update")]


def backfill(apps, schema_editor) -> None:
    from memory.engine.tokenize import index_tokens

    with schema_editor.connection.cursor() as cur:
        cur.execute("SELECT id, content FROM facts WHERE tokens_v2 = ''")
        facts = cur.fetchall()
        cur.executemany("UPDATE facts SET tokens_v2 = %s WHERE id = %s", [(index_tokens(t), i) for i, t in facts])
        cur.execute("SELECT id, cue FROM episode_cues")
        cues = cur.fetchall()
        cur.executemany("UPDATE episode_cues SET tokens = %s WHERE id = %s", [(index_tokens(t), i) for i, t in cues])


class Migration(migrations.Migration):
    dependencies = [("memory", "0007_facts_person_column")]

    operations = [
        migrations.AddField(
            model_name="episodecue", name="tokens", field=models.TextField(blank=True, default="", db_default=""),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        sql_for(sqlite=_triggers(), reverse_sqlite=_drop_triggers()),  # PostgreSQL: 0019_postgresql
    ]
