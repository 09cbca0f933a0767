"""Store every message's tokens as the terms FTS5's ``unicode61`` makes of them.

``index_tokens`` now writes the terms themselves (``li _ ming`` → ``li ming``); this
rewrites the rows stored before, so a stream's postings are built with one ``str.split``
(``memory/lexical_index.py``). The FTS rows are left alone: FTS5 indexed these very terms
(a later delete with the rewritten string removes the same ones). Rows already in that
form are not touched, nor rows with no term at all (``tokens <> ''`` means "has an FTS
row"); on SQLite a rewritten row bumps the message lexical revision.
"""
from __future__ import annotations

from django.db import migrations

CHUNK = 5_000


def rewrite(apps, schema_editor):
    from memory.engine.bm25 import fts_tokens  # the engine's tokenizer as of today; pure Python

    with schema_editor.connection.cursor() as cur:
        last = 0
        while True:
            cur.execute(
                "SELECT id, tokens FROM messages WHERE id > %s AND tokens <> '' ORDER BY id LIMIT %s", [last, CHUNK]
            )
            rows = cur.fetchall()
            if not rows:
                return
            last = rows[-1][0]
            changed = [(terms, mid) for mid, tokens in rows if (terms := " ".join(fts_tokens(tokens))) not in (tokens, "")]
            if changed:
                cur.executemany("UPDATE messages SET tokens = %s WHERE id = %s", changed)


class Migration(migrations.Migration):
    dependencies = [("memory", "0021_sequences_after_seed_rows")]

    operations = [migrations.RunPython(rewrite, migrations.RunPython.noop)]
