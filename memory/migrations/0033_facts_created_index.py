"""Facts by ``created_at``: the dashboard's "learnt today" counts them without reading every row."""
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memory", "0032_tokens_column")]

    operations = [
        migrations.AddIndex(model_name="fact", index=models.Index(fields=["created_at"], name="idx_facts_created")),
    ]
