"""Re-tokenise every indexed row with the English analyser.

``memory.engine.tokenize.words`` now stems Latin-script words (Snowball, PyStemmer) and drops
English stop words; Chinese words and bigrams are unchanged. Every stored token string (facts,
knowledge, episode cues, messages) is recomputed from its row's text; only the rows whose tokens
change are touched (text without Latin letters keeps its tokens):

* SQLite: the row's FTS5 row is deleted with its old tokens and written with the new ones (a
  message left without a searchable term loses its FTS row, one that gains a term gets one), and
  the stored tokens are updated — the update triggers move the lexical revisions, so every
  process's resident index rebuilds;
* PostgreSQL: the stored tokens are updated and the postings rebuilt from them.

Going back re-tokenises with the analyser the code then has: run the reverse with the code of
before this migration.
"""
from __future__ import annotations

from django.db import migrations

from memory.backends import run_for

CHUNK = 5_000
#: the tokens columns of facts and knowledge as they were named until 0032_tokens_column
TOKENS = {"facts_fts": "tokens_v2", "knowledge_fts": "tokens_v2"}
#: (FTS table, SELECT of ``id, text, scope, stored tokens`` with ``r`` = the row, tokens column's table and name,
#: FTS scope column and its token prefix)
SOURCES = (
    ("facts_fts", f"SELECT r.id, r.content, r.person_id, r.{TOKENS['facts_fts']} FROM facts r", "facts",
     TOKENS["facts_fts"], "person", "p"),
    ("knowledge_fts", f"SELECT r.id, r.content, 0, r.{TOKENS['knowledge_fts']} FROM knowledge r", "knowledge",
     TOKENS["knowledge_fts"], "", ""),
    ("cues_fts", "SELECT r.id, r.cue, e.stream_id, r.tokens FROM episode_cues r JOIN episodes e ON e.id = r.episode_id",
     "episode_cues", "tokens", "stream", "s"),
    ("messages_fts", "SELECT r.id, r.content, r.stream_id, r.tokens FROM messages r", "messages", "tokens", "stream", "s"),
)


def _changed(cur, select: str):
    """Chunks of ``(id, new tokens, scope, old tokens)`` for the rows whose tokens change."""
    from memory.engine.tokenize import index_tokens

    last = 0
    where = " WHERE r.id > %s ORDER BY r.id LIMIT %s"
    while True:
        cur.execute(select + where, [last, CHUNK])
        rows = cur.fetchall()
        if not rows:
            return
        last = rows[-1][0]
        out = []
        for rowid, text, scope, old in rows:
            new = index_tokens(text or "")
            if new != (old or ""):
                out.append((rowid, new, scope, old or ""))
        if out:
            yield out


def sqlite_forward(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cur:
        for fts, select, table, column, scope_column, prefix in SOURCES:
            messages = fts == "messages_fts"
            cols = f"{fts}, rowid, tokens" + (f", {scope_column}" if scope_column else "")
            marks = "'delete', %s, %s" + (", %s" if scope_column else "")
            insert_cols = "rowid, tokens" + (f", {scope_column}" if scope_column else "")
            insert_marks = "%s, %s" + (", %s" if scope_column else "")
            for chunk in _changed(cur, select):
                def row(rowid, tokens, scope, prefix=prefix, scoped=bool(scope_column)):
                    return (rowid, tokens, f"{prefix}{scope}") if scoped else (rowid, tokens)

                # a message without a searchable term has no FTS row (memory.lexical.index_messages)
                deletes = [row(r, old, s) for r, _new, s, old in chunk if old or not messages]
                inserts = [row(r, new, s) for r, new, s, _old in chunk if new or not messages]
                cur.executemany(f"INSERT INTO {fts}({cols}) VALUES ({marks})", deletes)
                cur.executemany(f"INSERT INTO {fts}({insert_cols}) VALUES ({insert_marks})", inserts)
                cur.executemany(f"UPDATE {table} SET {column} = %s WHERE id = %s", [(new, r) for r, new, _s, _o in chunk])


def postgresql_forward(apps, schema_editor) -> None:
    from memory.backends import postgresql

    with schema_editor.connection.cursor() as cur:
        changed = 0
        for _fts, select, table, column, _scope, _prefix in SOURCES:
            for chunk in _changed(cur, select):
                cur.executemany(f"UPDATE {table} SET {column} = %s WHERE id = %s", [(new, r) for r, new, _s, _o in chunk])
                changed += len(chunk)
        if changed:
            postgresql.reindex_all(cur, TOKENS)


class Migration(migrations.Migration):
    dependencies = [("memory", "0027_messages_stream_sender_index")]

    operations = [
        run_for(sqlite=sqlite_forward, postgresql=postgresql_forward,
                reverse_sqlite=sqlite_forward, reverse_postgresql=postgresql_forward),
    ]
