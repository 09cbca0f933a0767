"""Message vectors: float32 + SQ8, computed at most once (backfill or ``selectors.message_vectors``)."""
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memory", "0009_message_index")]

    operations = [
        migrations.AddField(model_name="message", name="embedding", field=models.BinaryField(blank=True, null=True)),
        migrations.AddField(model_name="message", name="embedding_q8", field=models.BinaryField(blank=True, null=True)),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("embedding__isnull", True)), fields=["id"], name="idx_messages_no_vector"
            ),
        ),
    ]
