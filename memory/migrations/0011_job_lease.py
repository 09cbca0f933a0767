"""The lease of a running job: which worker runs it, its last heartbeat, how many attempts."""
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0010_message_vectors"),
    ]

    operations = [
        migrations.AddField(model_name="job", name="attempts", field=models.IntegerField(default=0)),
        migrations.AddField(model_name="job", name="heartbeat_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.AddField(
            model_name="job", name="worker", field=models.CharField(blank=True, default="", max_length=200)
        ),
    ]
