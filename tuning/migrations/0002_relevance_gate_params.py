"""Stored profiles lose the two absolute relevance floors the relevance gate replaced.

``lexical_coverage_floor`` and ``dense_cosine_floor`` are no longer tunable (issue 30: the gate
is calibrated per query, its knobs are ``dense_margin``, ``query_margin``, ``dense_spread``,
``lexical_share``, ``lead_gap`` and ``lead_ratio``); a profile that set them would no longer
validate. The other values of such a profile are kept.
"""
from __future__ import annotations

from django.db import migrations

GONE = ("lexical_coverage_floor", "dense_cosine_floor")


def forward(apps, schema_editor):
    profiles = apps.get_model("tuning", "RetrievalProfile")
    for profile in profiles.objects.all():
        params = dict(profile.params or {})
        if any(name in params for name in GONE):
            profile.params = {k: v for k, v in params.items() if k not in GONE}
            profile.save(update_fields=["params"])


class Migration(migrations.Migration):
    dependencies = [("tuning", "0001_initial")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
