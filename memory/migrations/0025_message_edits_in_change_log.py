"""Message edits and deletes go to the change log instead of forcing a reload.

Until now a message delete, a change of a message's stored tokens or of its content
bumped ``meta['lexical_revision:messages']`` (0019, 0024), and every process's resident message
statistics (``memory/lexical_index.py``, ``ResidentMessages``) then reloaded the whole
table's document frequencies: 4.4 s at 200,000 messages, after every edit or delete.

Now the triggers log such a change in ``memory_changes`` with the row's tokens and stream
*before* it (``old_tokens``, ``scope``; both NULL for an insert): a reader takes the old
row's share out of its statistics and adds the row as its snapshot shows it. A content
edit without a token change does not touch the statistics, so it logs nothing. The
revision stays for what really needs a reload (a pruned log).

SQLite (0019's triggers replaced the same way, 0.3 s of reload at 200,000 messages) logs
a delete, a change of non-empty tokens and a content edit (the one way a placeholder body
gets its first FTS row at an old id); its inserts are still read by id.
"""
from __future__ import annotations

from django.db import migrations, models

from memory.backends import sql_for

KEY = "lexical_revision:messages"
OLD_TRIGGERS = [f"DROP TRIGGER IF EXISTS messages_lexical_{name} ON messages" for name in ("delete", "update", "content")]
CREATE = [
    *OLD_TRIGGERS,
    "DROP FUNCTION IF EXISTS memory_bump_if_indexed_deleted()",
    "CREATE FUNCTION memory_log_message_deletes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO memory_changes(source, row_id, scope, old_tokens)"
    " SELECT 'messages', id, stream_id, tokens FROM old_rows WHERE tokens <> ''; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER messages_lexical_delete AFTER DELETE ON messages REFERENCING OLD TABLE AS old_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION memory_log_message_deletes()",
    "CREATE FUNCTION memory_log_message_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO memory_changes(source, row_id, scope, old_tokens) VALUES ('messages', OLD.id, OLD.stream_id, OLD.tokens); "
    "RETURN NULL; END $$",
    # '' -> tokens too: a placeholder body filled in later gets its first postings at an old id
    "CREATE TRIGGER messages_lexical_update AFTER UPDATE OF tokens, stream_id ON messages FOR EACH ROW"
    " WHEN (NEW.tokens IS DISTINCT FROM OLD.tokens OR NEW.stream_id IS DISTINCT FROM OLD.stream_id)"
    " EXECUTE FUNCTION memory_log_message_update()",
]
DROP = [  # back to 0024's revision bumps
    *OLD_TRIGGERS,
    "DROP FUNCTION IF EXISTS memory_log_message_deletes()",
    "DROP FUNCTION IF EXISTS memory_log_message_update()",
    "CREATE FUNCTION memory_bump_if_indexed_deleted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF EXISTS (SELECT 1 FROM old_rows WHERE tokens <> '') THEN PERFORM memory_bump_revision(TG_ARGV[0]); END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER messages_lexical_delete AFTER DELETE ON messages REFERENCING OLD TABLE AS old_rows"
    f" FOR EACH STATEMENT EXECUTE FUNCTION memory_bump_if_indexed_deleted('{KEY}')",
    "CREATE TRIGGER messages_lexical_update AFTER UPDATE OF tokens ON messages FOR EACH ROW"
    " WHEN (OLD.tokens <> '' AND NEW.tokens IS DISTINCT FROM OLD.tokens)"
    f" EXECUTE FUNCTION memory_bump_revision_trigger('{KEY}')",
    "CREATE TRIGGER messages_lexical_content AFTER UPDATE OF content ON messages FOR EACH ROW"
    f" WHEN (NEW.content IS DISTINCT FROM OLD.content) EXECUTE FUNCTION memory_bump_revision_trigger('{KEY}')",
]


# SQLite: inserts are still read by id (one writer at a time); an append stores its tokens with an
# UPDATE from '' (not logged), so a placeholder body filled in is told by its content changing
LOG_SQLITE = ("INSERT INTO memory_changes(source, row_id, xid, scope, old_tokens)"
              " VALUES ('messages', OLD.id, NULL, OLD.stream_id, OLD.tokens);")
CREATE_SQLITE = [
    *[f"DROP TRIGGER IF EXISTS messages_lexical_{name}" for name in ("delete", "update", "content")],
    f"CREATE TRIGGER messages_lexical_delete AFTER DELETE ON messages WHEN OLD.tokens <> '' BEGIN {LOG_SQLITE} END",
    "CREATE TRIGGER messages_lexical_update AFTER UPDATE OF tokens, stream_id ON messages"
    f" WHEN OLD.tokens <> '' AND (NEW.tokens IS NOT OLD.tokens OR NEW.stream_id IS NOT OLD.stream_id) BEGIN {LOG_SQLITE} END",
    "CREATE TRIGGER messages_lexical_content AFTER UPDATE OF content ON messages"
    f" WHEN NEW.content IS NOT OLD.content BEGIN {LOG_SQLITE} END",
]
BUMP_SQLITE = (
    f"INSERT INTO meta(key, value) VALUES ('{KEY}', '1-' || hex(randomblob(6))) "
    "ON CONFLICT(key) DO UPDATE SET value = (CAST(value AS INTEGER) + 1) || '-' || hex(randomblob(6));"
)
DROP_SQLITE = [  # back to 0019's revision bumps
    *[f"DROP TRIGGER IF EXISTS messages_lexical_{name}" for name in ("delete", "update", "content")],
    f"CREATE TRIGGER messages_lexical_delete AFTER DELETE ON messages WHEN OLD.tokens <> '' BEGIN {BUMP_SQLITE} END",
    "CREATE TRIGGER messages_lexical_update AFTER UPDATE OF tokens ON messages "
    f"WHEN OLD.tokens <> '' AND NEW.tokens IS NOT OLD.tokens BEGIN {BUMP_SQLITE} END",
    "CREATE TRIGGER messages_lexical_content AFTER UPDATE OF content ON messages "
    f"WHEN NEW.content IS NOT OLD.content BEGIN {BUMP_SQLITE} END",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0024_message_change_log")]

    operations = [
        migrations.AddField(model_name="change", name="scope", field=models.BigIntegerField(blank=True, null=True)),
        migrations.AddField(model_name="change", name="old_tokens", field=models.TextField(blank=True, null=True)),
        sql_for(postgresql=CREATE, reverse_postgresql=DROP, sqlite=CREATE_SQLITE, reverse_sqlite=DROP_SQLITE),
    ]
