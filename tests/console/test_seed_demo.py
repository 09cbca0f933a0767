"""The demo data set: roles, users, and memories from the real pipeline in every layer."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db.models import F
from django.urls import reverse

from console.management.commands._demo_data import TURNS
from memory import selectors, services
from memory.models import (
    Episode,
    Fact,
    FactOperation,
    ImportBatch,
    Job,
    Knowledge,
    MemoryEdge,
    Message,
    PipelineEvent,
    Turn,
)

pytestmark = pytest.mark.django_db


def test_seed_demo_fills_every_page_and_runs_once(client):
    out = io.StringIO()
    call_command("seed_demo", "--if-empty", stdout=out, stderr=io.StringIO())
    assert Message.objects.count() > 200
    assert Episode.objects.filter(kind="conversation").count() >= 5
    assert Episode.objects.filter(kind="unsummarized").count() == 1
    assert Fact.objects.count() > 35
    assert Fact.objects.filter(superseded_by__isnull=False).exclude(superseded_by=F("id")).exists()
    assert Fact.objects.filter(active=False, superseded_by__isnull=True).exists()  # a frozen fact
    assert len(selectors.conflict_groups(now=services.now_ms())) >= 2
    assert MemoryEdge.objects.filter(active=True).exists() and MemoryEdge.objects.filter(active=False).exists()
    assert Knowledge.objects.filter(import_batch__isnull=False).count() >= 10
    assert ImportBatch.objects.get().status == "done" and Job.objects.get(kind="import").status == "done"
    assert Turn.objects.filter(confirmed_at__isnull=False).count() == len(TURNS)
    assert {"pin", "invalidate", "replace", "undo", "supersede"} <= set(FactOperation.objects.values_list("op", flat=True))
    assert PipelineEvent.objects.filter(kind="edges_decayed").exists()
    assert PipelineEvent.objects.filter(kind="memory_spread").exists()
    for name in ("operator", "reviewer", "staff"):
        assert User.objects.get(username=name).groups.filter(name=name).exists()
    assert User.objects.get(username="demo").is_superuser
    # The demo superuser sees meaningful content on every page.
    assert client.login(username="demo", password="demo-password")
    for url in (reverse("console:dashboard"), reverse("console:facts"), reverse("curation:conflicts"),
                reverse("curation:operations"), reverse("console:graph"), reverse("console:episodes")):
        assert client.get(url).status_code == 200
    assert "阿杰住在重庆" in client.get(reverse("curation:conflicts")).content.decode()

    count = Message.objects.count()
    call_command("seed_demo", "--if-empty", stdout=out)
    assert Message.objects.count() == count and "nothing to do" in out.getvalue()

