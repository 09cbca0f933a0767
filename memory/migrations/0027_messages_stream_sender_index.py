"""One covering index on ``messages (stream_id, id, sender_person_id)`` instead of three.

Every turn reads its stream's recent speakers (the newest 200 messages' senders) and its
newest message. Through ``(stream_id)`` / ``(stream_id, id)`` each of those 200 rows was a
read of the row itself, scattered over the table (a page each when streams interleave):
about 1 ms a turn on SQLite, 1.5–3 ms on PostgreSQL. The index holds the sender, so the
read never leaves it.

It also serves every other ``stream_id`` look-up, so the foreign key's own index on
``stream_id`` goes, as does migration 0024's PostgreSQL-only ``(stream_id, id)``; the one
on ``episode_id`` goes too (``idx_messages_pending`` leads with it). Fewer indexes on the
table every message is inserted into.

The foreign keys change in the state only: on SQLite an altered field remakes the table,
which would drop the FTS and change-log triggers on it; dropping the two indexes by name
(Django's names, the same on both backends) is all the database needs.
"""
import django.db.models.deletion
from django.db import migrations, models

from memory.backends import sql_for

FK_INDEXES = {"stream_id": "messages_stream_id_04f9bb75", "episode_id": "messages_episode_id_c3b14c44"}
DROP = [f"DROP INDEX IF EXISTS {name}" for name in FK_INDEXES.values()]
CREATE = [f"CREATE INDEX IF NOT EXISTS {name} ON messages ({column})" for column, name in FK_INDEXES.items()]


class Migration(migrations.Migration):
    dependencies = [("memory", "0026_memory_node_change_log")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="message",
                    name="episode",
                    field=models.ForeignKey(
                        blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL,
                        related_name="messages", to="memory.episode",
                    ),
                ),
                migrations.AlterField(
                    model_name="message",
                    name="stream",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="messages",
                        to="memory.stream",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(fields=["stream", "id", "sender_person"], name="idx_messages_stream_sender"),
        ),
        sql_for(
            sqlite=DROP,
            postgresql=[*DROP, "DROP INDEX IF EXISTS idx_messages_stream_id_id"],
            reverse_sqlite=CREATE,
            reverse_postgresql=[*CREATE, "CREATE INDEX IF NOT EXISTS idx_messages_stream_id_id ON messages (stream_id, id)"],
        ),
    ]
