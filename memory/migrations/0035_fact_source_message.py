"""Facts remember the message they were heard in (``facts.source_message_id``, nullable).

The extractor records the message of its batch a fact came from, and ``POST /facts`` takes the
bot's ``source_message_id``; the ranking lifts a fact by how much of a turn the conversation
around that message holds (memory/selectors/told.py), and forgetting a message forgets the facts
heard in it. No foreign-key constraint (a message deleted by raw SQL leaves an id the join does
not find), an index for forget's look-up. Plain ``ALTER TABLE`` both ways: adding a nullable
column rewrites no row on either backend, and on SQLite Django's own reverse of a foreign key
would rebuild the table — losing the triggers that keep the lexical indexes (0008, 0025) in step.
"""
from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models

INDEX = "facts_source_message_id_1baea1b2"  # the name Django gives the field's index


class Migration(migrations.Migration):
    dependencies = [("memory", "0034_spread_reads_from_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="fact",
                    name="source_message",
                    field=models.ForeignKey(
                        blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+", to="memory.message",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    ["ALTER TABLE facts ADD COLUMN source_message_id bigint NULL",
                     f"CREATE INDEX {INDEX} ON facts (source_message_id)"],
                    [f"DROP INDEX {INDEX}", "ALTER TABLE facts DROP COLUMN source_message_id"],
                ),
            ],
        ),
    ]
