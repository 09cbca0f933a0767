"""A stream-scoped lexical index over messages, so ``inspect`` ranks by bm25.

``messages_fts`` is contentless like the other FTS tables: ``tokens`` holds
``index_tokens(content)`` (jieba words + CJK bigrams) and the unweighted
``stream`` column holds ``s<stream id>`` so a query ANDs its stream in and FTS5
ranks only that stream's messages. The writer (``append_message``,
``update_message_content``) writes the FTS row in the row's own transaction and
keeps the tokens on the row (``messages.tokens``; ``''`` = no FTS row: a message
without a searchable term has none). A trigger removes the FTS row when a
message row is deleted by any path (stream cascade, forgetting), from the
stored tokens. Inspect is always stream-scoped: no resident index, no revision
triggers. Existing messages are indexed here.
"""
from __future__ import annotations

from django.db import migrations, models

from memory.backends import run_for, sql_for

CREATE = [
    "CREATE VIRTUAL TABLE messages_fts USING fts5(tokens, stream, content='', tokenize='unicode61')",
    "CREATE VIRTUAL TABLE messages_fts_vocab USING fts5vocab(messages_fts, 'row')",
    "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN OLD.tokens <> '' BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, tokens, stream) VALUES ('delete', OLD.id, OLD.tokens, 's' || OLD.stream_id); "
    "END",
]
DROP = ["DROP TRIGGER IF EXISTS messages_fts_delete", "DROP TABLE IF EXISTS messages_fts_vocab",
        "DROP TABLE IF EXISTS messages_fts"]
BATCH = 5_000


def index_existing(apps, schema_editor) -> None:
    from memory.engine.tokenize import index_tokens

    with schema_editor.connection.cursor() as cur:
        last = 0
        while True:
            cur.execute(
                "SELECT id, content, stream_id FROM messages WHERE id > %s AND tokens = '' ORDER BY id LIMIT %s",
                [last, BATCH],
            )
            rows = cur.fetchall()
            if not rows:
                break
            last = rows[-1][0]
            payload = [(mid, index_tokens(text or ""), f"s{stream}") for mid, text, stream in rows]
            payload = [p for p in payload if p[1]]
            cur.executemany("INSERT INTO messages_fts(rowid, tokens, stream) VALUES (%s, %s, %s)", payload)
            cur.executemany("UPDATE messages SET tokens = %s WHERE id = %s", [(t, mid) for mid, t, _ in payload])


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_resident_lexical")]

    operations = [
        migrations.AddField(
            model_name="message", name="tokens", field=models.TextField(blank=True, default="", db_default=""),
        ),
        # FTS5: SQLite only (PostgreSQL indexes messages in its postings tables: 0019_postgresql).
        sql_for(sqlite=CREATE, reverse_sqlite=DROP),
        run_for(sqlite=index_existing),
    ]
