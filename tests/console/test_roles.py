"""Who may see and do what: groups from ensure_roles, 403 for everything else."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.urls import reverse

from tests.console.conftest import NOW

pytestmark = pytest.mark.django_db

EVERYONE = ["operator", "reviewer", "staff", "superuser"]
PAGES = {
    "console:dashboard": EVERYONE,
    "console:streams": EVERYONE,
    "console:episodes": EVERYONE,
    "console:facts": EVERYONE,
    "console:knowledge": EVERYONE,
    "console:jobs": EVERYONE,
    "console:turns": EVERYONE,
    "curation:conflicts": EVERYONE,
    "curation:operations": ["reviewer", "superuser"],
    "console:imports": ["staff", "superuser"],
    "console:graph": ["staff", "superuser"],
    "console:playground": ["staff", "superuser"],
}


def test_ensure_roles_is_idempotent(roles):
    before = {g.name: set(g.permissions.values_list("codename", flat=True)) for g in Group.objects.all()}
    call_command("ensure_roles", stdout=open("/dev/null", "w"))
    after = {g.name: set(g.permissions.values_list("codename", flat=True)) for g in Group.objects.all()}
    assert before == after
    assert set(after) == {"operator", "reviewer", "staff"}
    assert "curate_fact" in after["operator"] and "undo_operation" not in after["operator"]
    assert {"undo_operation", "view_factoperation"} <= after["reviewer"] and "curate_fact" not in after["reviewer"]
    assert {"preview_association", "preview_recall", "import_knowledge", "tune_retrieval"} <= after["staff"]
    assert "label_relevance" in after["reviewer"] and "label_relevance" in after["staff"]
    assert "label_relevance" not in after["operator"]
    assert "export_person" in after["operator"] and not {"export_person"} & (after["reviewer"] | after["staff"])


@pytest.mark.django_db
def test_ensure_roles_works_on_a_store_without_permissions_or_content_types():
    """A flushed or restored store (no post_migrate since): the roles still get every permission."""
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.get_for_model(Group)  # this process caches a content type …
    Permission.objects.all().delete()
    ContentType.objects.all().delete()  # … that no longer exists
    call_command("ensure_roles", stdout=open("/dev/null", "w"))
    operator = set(Group.objects.get(name="operator").permissions.values_list("codename", flat=True))
    assert {"view_person", "view_turn", "curate_fact", "forget_memory", "export_person"} <= operator


@pytest.mark.parametrize("name", list(PAGES))
def test_it_requires_login(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("role", ["nobody", "operator", "reviewer", "staff", "superuser"])
def test_each_role_sees_exactly_its_pages(make_client, memory_set, frozen_now, role):
    client = make_client(role)
    for name, allowed in PAGES.items():
        status = client.get(reverse(name)).status_code
        assert status == (200 if role in allowed else 403), (role, name, status)


def test_fact_detail_and_stream_pages_are_open_to_every_role(make_client, memory_set, frozen_now):
    for role in EVERYONE:
        client = make_client(role)
        assert client.get(reverse("console:fact", args=[memory_set["facts"][0]])).status_code == 200
        assert client.get(reverse("console:stream", args=[memory_set["direct"].pk])).status_code == 200
        client.logout()


def test_curation_actions_need_the_curate_permission(make_client, memory_set, frozen_now):
    from memory.models import Fact, FactOperation

    before, journal = list(Fact.objects.order_by("id").values()), FactOperation.objects.count()
    fact_id = memory_set["facts"][2]
    url = reverse("curation:fact_action", args=[fact_id, "pin"])
    for role in ["reviewer", "staff"]:
        assert make_client(role).post(url, {"confirmed": "1"}).status_code == 403
    keep = reverse("curation:keep", args=[memory_set["facts"][0]])
    assert make_client("nobody").post(keep, {"confirmed": "1"}).status_code == 403
    bulk = reverse("curation:bulk_action")
    assert make_client("staff").post(bulk, {"action": "pin", "ids": [fact_id], "confirmed": "1"}).status_code == 403
    assert list(Fact.objects.order_by("id").values()) == before  # nothing done, nothing journalled
    assert FactOperation.objects.count() == journal
    assert make_client("operator").post(url, {"confirmed": "1"}).status_code == 302  # the same post, allowed, does it
    assert Fact.objects.get(pk=fact_id).pinned


def test_undo_needs_the_undo_permission(make_client, memory_set, frozen_now):
    from curation import services
    from memory.models import FactOperation

    op = services.pin_fact(fact_id=memory_set["facts"][2], user="t", at=NOW)
    url = reverse("curation:undo", args=[op.pk])
    assert make_client("operator").post(url, {"confirmed": "1"}).status_code == 403
    assert make_client("staff").post(url, {"confirmed": "1"}).status_code == 403
    assert not FactOperation.objects.get(pk=op.pk).undone_by_id  # refused: nothing undone
    assert make_client("reviewer").post(url, {"confirmed": "1"}).status_code == 302
    assert FactOperation.objects.get(pk=op.pk).undone_by_id  # the reviewer's undo was carried out


def test_actions_are_post_only(operator, memory_set):
    url = reverse("curation:fact_action", args=[memory_set["facts"][2], "pin"])
    assert operator.get(url).status_code == 405


def test_actions_require_a_csrf_token(make_client, memory_set, frozen_now):
    from django.contrib.auth.models import User
    from django.test import Client

    make_client("operator")
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.get(username="operator"))
    url = reverse("curation:fact_action", args=[memory_set["facts"][2], "pin"])
    assert client.post(url, {"confirmed": "1"}).status_code == 403


def test_admin_lists_every_model_read_only(admin_client_, memory_set):
    from django.apps import apps
    from django.contrib import admin

    for app_label in ("memory", "curation"):
        for model in apps.get_app_config(app_label).get_models():
            assert admin.site.is_registered(model), model
    response = admin_client_.get("/admin/memory/fact/")
    assert response.status_code == 200
    assert admin_client_.get("/admin/memory/fact/add/").status_code == 403
    fact_id = memory_set["facts"][0]
    change = admin_client_.get(f"/admin/memory/fact/{fact_id}/change/")
    assert change.status_code == 200 and b'type="submit" value="Save"' not in change.content


def test_forbidden_pages_explain_the_roles(make_client):
    response = make_client("operator").get(reverse("console:graph"))
    assert response.status_code == 403 and "没有权限" in response.content.decode() and "staff" in response.content.decode()


@pytest.mark.parametrize("role", ["operator", "reviewer", "staff", "superuser"])
def test_the_nav_links_exactly_the_pages_a_role_may_open_and_marks_the_current_one(
    make_client, memory_set, frozen_now, role
):
    client = make_client(role)
    html = client.get(reverse("console:dashboard")).content.decode()
    nav = html[html.index('<nav aria-label='):html.index("</nav>")]
    linked = re.findall(r'<a href="([^"]+)"', nav)
    not_in_pages = {reverse("console:persons"), reverse("tuning:index")}  # checked by their own apps' tests
    assert {reverse(name) for name, allowed in PAGES.items() if role in allowed} == set(linked) - not_in_pages
    assert re.findall(r'<a href="([^"]+)" class="current"', nav) == [reverse("console:dashboard")]
    for url in linked:
        assert client.get(url).status_code == 200, (role, url)
