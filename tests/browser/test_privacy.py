"""Forgetting and API tokens in a real browser (htmx confirmations accepted by the login fixture)."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.browser.conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_an_operator_previews_and_forgets_a_fact_then_a_person(login, live_server, memory_set, frozen_now):
    from memory.models import Fact, ForgetRecord, Message, Person

    fact_id = memory_set["facts"][2]
    operator = login("operator")
    operator.goto(f"{live_server.url}{reverse('console:fact', args=[fact_id])}")
    operator.click('a[data-action="forget"]')
    operator.wait_for_selector("#forget-preview")
    assert "无法撤销" in operator.inner_text("#forget-preview")
    assert operator.inner_text('[data-count="facts"]') == "1"
    operator.click('button[data-action="forget"]')  # hx-confirm → accepted → htmx follows the redirect
    operator.wait_for_selector("#messages >> text=已遗忘")
    assert not Fact.objects.filter(pk=fact_id).exists()

    alice = Person.objects.get(identities__external_id="alice")
    operator.goto(f"{live_server.url}{reverse('console:persons')}?q=alice")
    operator.click(f'tr[data-person="{alice.pk}"] a.danger')
    operator.wait_for_selector("#forget-preview")
    counted = int(operator.inner_text('[data-count="messages"]'))
    assert counted == Message.objects.filter(sender_person=alice).count() > 0
    shot(operator, "forget-person-preview")
    operator.click('button[data-action="forget"]')
    operator.wait_for_selector("#messages >> text=已遗忘")
    assert operator.url.endswith(reverse("console:persons"))
    assert not Person.objects.filter(pk=alice.pk).exists()
    assert ForgetRecord.objects.count() == 2


def test_an_admin_creates_a_token_sees_it_once_and_revokes_it(login, live_server, memory_set, frozen_now):
    from memory.models import ApiToken

    admin = login("demo")
    admin.click("header .who >> text=API 令牌")
    admin.fill("input[name=name]", "读书群机器人")
    admin.check('input[name=scopes][value="curation"]')
    admin.click("form button.primary >> text=创建")
    secret = admin.inner_text("[data-secret]")
    assert secret.startswith("mc_")
    row = ApiToken.objects.get(name="读书群机器人")
    assert row.scopes == ["bot", "curation"]
    admin.goto(f"{live_server.url}{reverse('console:tokens')}")
    assert secret not in admin.content()
    admin.click('tr[data-token="读书群机器人"] button[data-action="revoke"]')
    admin.wait_for_selector('tr[data-token="读书群机器人"] >> text=已吊销')
    assert ApiToken.objects.get(pk=row.pk).revoked_at is not None
