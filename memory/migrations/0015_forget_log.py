"""The forgetting journal (``forget_log``): who forgot what kind of target when, with counts, never text."""
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0014_token_scopes"),
    ]

    operations = [
        migrations.CreateModel(
            name="ForgetRecord",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("at", models.BigIntegerField()),
                ("user", models.CharField(blank=True, default="", max_length=150)),
                ("target", models.CharField(max_length=16)),
                ("target_id", models.BigIntegerField()),
                ("counts", models.JSONField(default=dict)),
            ],
            options={
                "db_table": "forget_log",
                "ordering": ["-id"],
                "permissions": [("forget_memory", "Can preview and carry out forgetting")],
            },
        ),
    ]
