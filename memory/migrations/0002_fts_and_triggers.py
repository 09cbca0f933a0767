"""FTS5 indexes, their vocabularies, the knowledge-vector revision triggers and seed rows.

The FTS tables are contentless (``content=''``): the writer of a row writes its
FTS row with ``rowid`` = the row's primary key in the same transaction. The
``*_vocab`` tables expose document frequencies for query-term pruning.
"""
from __future__ import annotations

from django.core.management.color import no_style
from django.db import migrations

from memory.backends import sql_for

FTS_TABLES = ("facts_fts", "cues_fts", "knowledge_fts")

BUMP = (
    "INSERT INTO meta(key, value) VALUES ('knowledge_vector_revision', '1') "
    "ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT);"
)

TRIGGERS = [
    (
        "knowledge_q8_insert",
        f"CREATE TRIGGER knowledge_q8_insert AFTER INSERT ON knowledge "
        f"WHEN NEW.embedding_q8 IS NOT NULL BEGIN {BUMP} END",
    ),
    (
        "knowledge_q8_update",
        f"CREATE TRIGGER knowledge_q8_update AFTER UPDATE OF embedding_q8 ON knowledge "
        f"WHEN NEW.embedding_q8 IS NOT OLD.embedding_q8 BEGIN {BUMP} END",
    ),
    (
        "knowledge_q8_delete",
        f"CREATE TRIGGER knowledge_q8_delete AFTER DELETE ON knowledge "
        f"WHEN OLD.embedding_q8 IS NOT NULL BEGIN {BUMP} END",
    ),
]


def seed(apps, schema_editor) -> None:
    Person = apps.get_model("memory", "Person")
    Stream = apps.get_model("memory", "Stream")
    if not Person.objects.filter(pk=1).exists():
        Person.objects.create(pk=1, kind="owner", display_name="主人", first_seen_at=0)
    if not Stream.objects.filter(pk=1).exists():
        Stream.objects.create(pk=1, platform="desktop", kind="desktop", external_id="desktop", display_name="桌面")
    # rows inserted with explicit ids leave a PostgreSQL sequence behind: move it past them
    connection = schema_editor.connection
    with connection.cursor() as cur:
        for sql in connection.ops.sequence_reset_sql(no_style(), [Person, Stream]):
            cur.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    # SQLite only: PostgreSQL gets its lexical tables and triggers in 0019_postgresql.
    operations = [
        sql_for(
            sqlite=[
                *[f"CREATE VIRTUAL TABLE {name} USING fts5(tokens, content='', tokenize='unicode61')" for name in FTS_TABLES],
                *[f"CREATE VIRTUAL TABLE {name}_vocab USING fts5vocab({name}, 'row')" for name in FTS_TABLES],
                *[sql for _, sql in TRIGGERS],
            ],
            reverse_sqlite=[
                *[f"DROP TRIGGER IF EXISTS {name}" for name, _ in TRIGGERS],
                *[f"DROP TABLE IF EXISTS {name}_vocab" for name in FTS_TABLES],
                *[f"DROP TABLE IF EXISTS {name}" for name in FTS_TABLES],
            ],
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
    ]
