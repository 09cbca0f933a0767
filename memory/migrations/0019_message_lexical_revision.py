"""Tell readers of the message index when its rows change other than by appending.

The resident message statistics (``memory/lexical_index.py``, ``ResidentMessages``)
append messages above the last id they loaded and reload when
``meta['lexical_revision:messages']`` moves. These triggers move it when a message
with an FTS row is deleted, when a message's stored tokens change (re-indexing), and
when its content is edited (a placeholder body filled in later gets its first FTS row
at an old id). Appending a message moves nothing: its tokens are written in the
insert's own transaction.

The partial index ``idx_messages_stream_tokens`` covers a stream's indexed tokens, so
loading one stream's postings reads the index, not the rows (a message row also holds
its vectors, several kilobytes); ``idx_messages_stream_q8`` covers a stream's SQ8 vectors
for inspect's dense channel (about seven to a page instead of one row a page: measured
3× less time to read a 1,000-message stream's vectors at the bench scale).
"""
from __future__ import annotations

from django.db import migrations, models

from memory.backends import sql_for

KEY = "lexical_revision:messages"
BUMP = (
    f"INSERT INTO meta(key, value) VALUES ('{KEY}', '1-' || hex(randomblob(6))) "
    "ON CONFLICT(key) DO UPDATE SET value = (CAST(value AS INTEGER) + 1) || '-' || hex(randomblob(6));"
)
CREATE = [
    f"CREATE TRIGGER messages_lexical_delete AFTER DELETE ON messages WHEN OLD.tokens <> '' BEGIN {BUMP} END",
    "CREATE TRIGGER messages_lexical_update AFTER UPDATE OF tokens ON messages "
    f"WHEN OLD.tokens <> '' AND NEW.tokens IS NOT OLD.tokens BEGIN {BUMP} END",
    "CREATE TRIGGER messages_lexical_content AFTER UPDATE OF content ON messages "
    f"WHEN NEW.content IS NOT OLD.content BEGIN {BUMP} END",
]
DROP = [f"DROP TRIGGER IF EXISTS messages_lexical_{op}" for op in ("delete", "update", "content")]


class Migration(migrations.Migration):
    dependencies = [("memory", "0018_choices")]

    operations = [
        # SQLite only: on PostgreSQL inspect reads the postings tables (memory/backends/postgresql.py)
        sql_for(sqlite=CREATE, reverse_sqlite=DROP),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("tokens", ""), _negated=True),
                fields=["stream", "id", "tokens"],
                name="idx_messages_stream_tokens",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("embedding_q8__isnull", False)),
                fields=["stream", "id", "embedding_q8"],
                name="idx_messages_stream_q8",
            ),
        ),
    ]
