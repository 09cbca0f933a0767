"""Give the cue index a ``stream`` column so episode recall ranks only its stream.

FTS5 computes bm25 for every row matching any OR term; filtering by stream
after that ranked the cues of every stream. With ``stream : "s<id>"`` ANDed to
the query FTS5 intersects the doclists first. The column gets weight 0 in
``bm25()``, so it never adds to a score. Existing cues are re-indexed.
"""
from __future__ import annotations

from django.db import migrations

from memory.backends import run_for


def _reindex(schema_editor, with_stream: bool) -> None:
    from memory.engine.tokenize import index_tokens

    with schema_editor.connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS cues_fts_vocab")
        cur.execute("DROP TABLE IF EXISTS cues_fts")
        columns = "tokens, stream" if with_stream else "tokens"
        cur.execute(f"CREATE VIRTUAL TABLE cues_fts USING fts5({columns}, content='', tokenize='unicode61')")
        cur.execute("CREATE VIRTUAL TABLE cues_fts_vocab USING fts5vocab(cues_fts, 'row')")
        cur.execute("SELECT c.id, c.cue, e.stream_id FROM episode_cues c JOIN episodes e ON e.id = c.episode_id")
        rows = cur.fetchall()
        if with_stream:
            cur.executemany(
                "INSERT INTO cues_fts(rowid, tokens, stream) VALUES (%s, %s, %s)",
                [(cid, index_tokens(text), f"s{stream}") for cid, text, stream in rows],
            )
        else:
            cur.executemany(
                "INSERT INTO cues_fts(rowid, tokens) VALUES (%s, %s)", [(cid, index_tokens(text)) for cid, text, _ in rows]
            )


def forward(apps, schema_editor) -> None:
    _reindex(schema_editor, with_stream=True)


def backward(apps, schema_editor) -> None:
    _reindex(schema_editor, with_stream=False)


class Migration(migrations.Migration):
    dependencies = [("memory", "0004_console_permissions")]

    # FTS5: SQLite only (PostgreSQL: 0019_postgresql).
    operations = [run_for(sqlite=forward, reverse_sqlite=backward)]
