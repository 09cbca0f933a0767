"""PostgreSQL as a second backend; a change log for the resident indexes on both.

``memory_changes`` logs every inserted fact, episode cue and knowledge row (database
triggers), with the inserting transaction's id on PostgreSQL, so that a resident index
never misses a row committed late with a smaller id (memory/changes.py).

PostgreSQL only: the lexical postings tables, their triggers (deleted rows leave the
index; TRUNCATE empties it), the revision triggers SQLite got in 0002/0003/0008, and
the postings of rows already stored (memory/backends/postgresql.py). SQLite keeps FTS5.
"""
from __future__ import annotations

from django.db import migrations, models

from memory.backends import run_for, sql_for
from memory.backends import postgresql as pg
from memory.backends import sqlite

#: the tokens columns of facts and knowledge as they were named until 0032_tokens_column
TOKENS = {"facts_fts": "tokens_v2", "knowledge_fts": "tokens_v2"}


def index_existing(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cur:
        pg.reindex_all(cur, TOKENS)


class Migration(migrations.Migration):
    dependencies = [("memory", "0019_message_lexical_revision")]

    operations = [
        migrations.CreateModel(
            name="Change",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("source", models.CharField(max_length=32)),
                ("row_id", models.BigIntegerField()),
                ("xid", models.BigIntegerField(blank=True, null=True)),
            ],
            options={
                "db_table": "memory_changes",
                "indexes": [models.Index(fields=["source", "xid"], name="idx_changes_source_xid")],
            },
        ),
        sql_for(
            sqlite=sqlite.CHANGE_LOG_TRIGGERS, reverse_sqlite=sqlite.DROP_CHANGE_LOG_TRIGGERS,
            postgresql=pg.schema(TOKENS), reverse_postgresql=pg.DROP_SCHEMA,
        ),
        run_for(postgresql=index_existing),
    ]
