"""The built-in profile ``seed`` becomes ``reference``, its knob ``seed_blend`` ``reference_blend``.

"Seed" named both the reference ranking (docs/REFERENCE.md) and the starting nodes of spreading
activation; it now means only the latter. Everything stored that names the profile or its knob is
rewritten, so an old turn replays under the profile it was recorded with:

* ``turns.profile`` (``{"name", "params"}``, the profile in force when the turn ran);
* stored profiles' params, the active profile (``meta``), the tuning journal (its profile and
  the params / previous profile of its detail);
* jobs' params and results (a queued evaluation or fit names its target's params).

The code still reads the old names as the new ones (``memory.engine.tuning.RENAMED_PROFILES``,
``RENAMED_PARAMS``); reversing the migration writes the old names back.
"""
from __future__ import annotations

import json

from django.db import migrations
from django.db.models import Q, TextField
from django.db.models.functions import Cast

NAMES = {"seed": "reference"}
KNOBS = {"seed_blend": "reference_blend"}
#: keys whose value is a profile name (a turn's ``profile.name``, a job target's ``profile``, a journal's ``prev``)
NAME_KEYS = ("name", "profile", "prev", "active")
ACTIVE_PROFILE_META_KEY = "retrieval_tuning_active_profile"


def _renamed(value, names, knobs):
    """``value`` with knob keys and profile-name values renamed, at any depth."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            item = _renamed(item, names, knobs)
            if key in NAME_KEYS and isinstance(item, str):
                item = names.get(item, item)
            out[knobs.get(key, key)] = item
        return out
    if isinstance(value, list):
        return [_renamed(item, names, knobs) for item in value]
    return value


def _rename(apps, names, knobs):
    old = [*names, *knobs]

    def mentions(qs, *fields):
        """Rows whose JSON ``fields``, as text, hold an old name (a cheap pre-filter; the rewrite is exact)."""
        q = Q()
        for field in fields:
            qs = qs.annotate(**{f"{field}_text": Cast(field, TextField())})
            for word in old:
                q |= Q(**{f"{field}_text__contains": word})
        return qs.filter(q)

    turns = apps.get_model("memory", "Turn")
    for turn in mentions(turns.objects.all(), "profile").only("pk", "profile").iterator():
        new = _renamed(turn.profile, names, knobs)
        if new != turn.profile:
            turns.objects.filter(pk=turn.pk).update(profile=new)

    profiles = apps.get_model("tuning", "RetrievalProfile")
    for profile in profiles.objects.all():
        new = _renamed(profile.params or {}, names, knobs)
        if new != profile.params:
            profiles.objects.filter(pk=profile.pk).update(params=new)

    operations = apps.get_model("tuning", "TuningOperation")
    for name, to in names.items():
        operations.objects.filter(profile=name).update(profile=to)
    for op in mentions(operations.objects.all(), "detail").only("pk", "detail").iterator():
        new = _renamed(op.detail, names, knobs)
        if new != op.detail:
            operations.objects.filter(pk=op.pk).update(detail=new)

    jobs = apps.get_model("memory", "Job")
    for job in mentions(jobs.objects.all(), "params", "result").only("pk", "params", "result").iterator():
        params, result = _renamed(job.params, names, knobs), _renamed(job.result, names, knobs)
        if (params, result) != (job.params, job.result):
            jobs.objects.filter(pk=job.pk).update(params=params, result=result)

    meta = apps.get_model("memory", "Meta")
    row = meta.objects.filter(key=ACTIVE_PROFILE_META_KEY).first()
    if row is not None:
        try:
            active = json.loads(row.value)
        except ValueError:
            active = None
        if isinstance(active, str) and active in names:
            meta.objects.filter(key=ACTIVE_PROFILE_META_KEY).update(value=json.dumps(names[active]))


def forward(apps, schema_editor):
    _rename(apps, NAMES, KNOBS)


def backward(apps, schema_editor):
    _rename(apps, {v: k for k, v in NAMES.items()}, {v: k for k, v in KNOBS.items()})


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0029_turn_inspection"),
        ("tuning", "0003_relevance_labels"),
    ]

    operations = [migrations.RunPython(forward, backward)]
