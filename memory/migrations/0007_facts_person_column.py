"""Give the fact index a ``person`` column so person-scoped recall ranks only those persons.

FTS5 computes bm25 for every row matching any OR term; filtering by person after
that ranked the facts of every person (which is why common query terms had to be
pruned, and pruning then dropped the very terms a person's facts match). With
``person : ("p1" OR "p2")`` ANDed to the query FTS5 intersects the doclists first.
The column has weight 0 in ``bm25()``. Existing facts are re-indexed.
"""
from __future__ import annotations

from django.db import migrations

from memory.backends import run_for


def _reindex(schema_editor, with_person: bool) -> None:
    from memory.engine.tokenize import index_tokens

    with schema_editor.connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS facts_fts_vocab")
        cur.execute("DROP TABLE IF EXISTS facts_fts")
        columns = "tokens, person" if with_person else "tokens"
        cur.execute(f"CREATE VIRTUAL TABLE facts_fts USING fts5({columns}, content='', tokenize='unicode61')")
        cur.execute("CREATE VIRTUAL TABLE facts_fts_vocab USING fts5vocab(facts_fts, 'row')")
        cur.execute("SELECT id, content, person_id FROM facts")
        rows = cur.fetchall()
        if with_person:
            cur.executemany(
                "INSERT INTO facts_fts(rowid, tokens, person) VALUES (%s, %s, %s)",
                [(fid, index_tokens(text), f"p{person}") for fid, text, person in rows],
            )
        else:
            cur.executemany(
                "INSERT INTO facts_fts(rowid, tokens) VALUES (%s, %s)", [(fid, index_tokens(text)) for fid, text, _ in rows]
            )


def forward(apps, schema_editor) -> None:
    _reindex(schema_editor, with_person=True)


def backward(apps, schema_editor) -> None:
    _reindex(schema_editor, with_person=False)


class Migration(migrations.Migration):
    dependencies = [("memory", "0006_console_indexes")]

    # FTS5: SQLite only (PostgreSQL: 0019_postgresql).
    operations = [run_for(sqlite=forward, reverse_sqlite=backward)]
