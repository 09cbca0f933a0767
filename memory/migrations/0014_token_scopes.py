"""Scoped API tokens: ``scopes``, ``revoked_at``/``revoked_by`` and the token-page permission.

Tokens created before scopes existed could do everything; they keep working with
``["admin"]`` (every scope) and the console asks for them to be narrowed.
"""
from __future__ import annotations

from django.db import migrations, models


def give_existing_tokens_every_scope(apps, schema_editor):
    apps.get_model("memory", "ApiToken").objects.all().update(scopes=["admin"])


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0013_turn_context"),
    ]

    operations = [
        migrations.AddField(model_name="apitoken", name="scopes", field=models.JSONField(default=list)),
        migrations.AddField(model_name="apitoken", name="revoked_at", field=models.DateTimeField(blank=True, null=True)),
        migrations.AddField(
            model_name="apitoken", name="revoked_by", field=models.CharField(blank=True, default="", max_length=150)
        ),
        migrations.AlterModelOptions(
            name="apitoken",
            options={"permissions": [("manage_api_tokens", "Can list, create and revoke API tokens")]},
        ),
        migrations.RunPython(give_existing_tokens_every_scope, migrations.RunPython.noop),
    ]
