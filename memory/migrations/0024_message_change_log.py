"""PostgreSQL: the resident message statistics learn of new and changed messages.

On SQLite the resident message index (``memory/lexical_index.py``, ``ResidentMessages``)
appends messages above the last id it loaded (one writer at a time) and reloads when
``meta['lexical_revision:messages']`` moves (migration 0019). PostgreSQL commits in any
order, so inserted messages go to the change log with their transaction's id, as facts,
cues and knowledge do (0020), and the revision moves on the same events as on SQLite:
a message with postings deleted, a message's stored tokens changed, its content edited.

Also on PostgreSQL only: an index on ``messages (stream_id, id)``. A stream's newest
message (``ORDER BY id DESC LIMIT 1``, every turn) was planned as a backward scan of the
primary key filtered by stream — 196,000 rows read, 0.64 s at the bench scale for a
stream whose messages are old. SQLite's ``stream_id`` index already ends with the rowid.
"""
from __future__ import annotations

from django.db import migrations

from memory.backends import sql_for

KEY = "lexical_revision:messages"
CREATE = [
    "CREATE INDEX idx_messages_stream_id_id ON messages (stream_id, id)",
    "CREATE TRIGGER messages_change_log AFTER INSERT ON messages REFERENCING NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION memory_log_inserts('messages')",
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
DROP = [
    *[f"DROP TRIGGER IF EXISTS messages_{name} ON messages"
      for name in ("change_log", "lexical_delete", "lexical_update", "lexical_content")],
    "DROP FUNCTION IF EXISTS memory_bump_if_indexed_deleted()",
    "DROP INDEX IF EXISTS idx_messages_stream_id_id",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0023_tolerant_revision_bump")]

    operations = [sql_for(postgresql=CREATE, reverse_postgresql=DROP)]
