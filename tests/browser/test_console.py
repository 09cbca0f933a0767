"""The console in a real browser: roles, curation with undo, conflicts, spreading, jobs.

Screenshots of the main pages land in ``test-artifacts/`` (ignored by git).
"""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.browser.conftest import shot

# serialized_rollback: the live server needs committed data, so every test flushes the
# database; restoring the migrated rows (content types, the seed person and stream)
# instead of re-running post_migrate keeps later serialized-rollback tests working.
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

NAV = {
    "operator": {"总览", "事实", "冲突组"},
    "reviewer": {"总览", "事实", "操作流水"},
    "staff": {"总览", "导入中心", "联想网络", "召回演练", "检索调优"},
    "demo": {"总览", "事实", "冲突组", "操作流水", "导入中心", "联想网络", "召回演练", "检索调优"},
}
#: account-level links beside the user name (not in the nav): the admin site and API tokens
ACCOUNT = {"operator": set(), "reviewer": set(), "staff": set(), "demo": {"管理后台", "API 令牌", "帮助"}}
HIDDEN = {"operator": {"操作流水", "联想网络"}, "reviewer": {"导入中心", "召回演练"}, "staff": {"操作流水"}, "demo": set()}


def test_each_role_logs_in_and_sees_its_part_of_the_console(login, live_server, memory_set, frozen_now):
    for username in ("operator", "reviewer", "staff", "demo"):
        page = login(username)
        links = set(page.locator("header nav a").all_inner_texts())
        assert NAV[username] <= links, (username, links)
        assert not (HIDDEN[username] & links), (username, links)
        account = set(page.locator("header .who a").all_inner_texts())
        assert ACCOUNT[username] <= account and "帮助" in account, (username, account)
        if username != "demo":
            assert not ({"管理后台", "API 令牌"} & account), (username, account)
        forbidden = page.goto(f"{live_server.url}{reverse('console:graph')}")
        assert forbidden.status == (200 if username in ("staff", "demo") else 403)


def _decay_fields(page) -> dict[str, str]:
    return {name: page.inner_text(f'[data-field="{name}"]') for name in ("strength", "half_life", "updated_at", "due_at")}


def test_pin_shows_a_chip_and_a_reviewer_undoes_it(login, live_server, memory_set, frozen_now):
    fact_id = memory_set["facts"][2]
    operator = login("operator")
    operator.goto(f"{live_server.url}{reverse('console:fact', args=[fact_id])}")
    before = _decay_fields(operator)

    operator.goto(f"{live_server.url}{reverse('console:facts')}")
    row = operator.locator(f"#fact-row-{fact_id}")
    assert row.locator(".chip.pinned").count() == 0
    row.locator('button[data-action="pin"]').click()  # hx-confirm → accepted → htmx swaps the row
    operator.wait_for_selector(f"#fact-row-{fact_id} .chip.pinned")
    assert "已完成" in row.locator(".notice").inner_text() and "可撤销" in row.locator(".notice").inner_text()  # beside it
    assert operator.inner_text("#messages") == ""  # not at the top of the page, out of sight
    assert operator.url.endswith(reverse("console:facts"))  # no full navigation: htmx swapped the row
    shot(operator, "facts-after-pin")

    reviewer = login("reviewer")
    reviewer.goto(f"{live_server.url}{reverse('curation:operations')}")
    reviewer.locator("button[data-undo]").first.click()
    reviewer.wait_for_selector("#operations-table .chip.undone")
    undone = reviewer.locator("#operations-table tr:has(.chip.undone)")
    assert "撤销条目 #" in undone.locator(".notice").inner_text()  # the outcome beside the row, naming the undo entry
    reviewer.reload()
    assert reviewer.locator("#operations-table .chip.undo").count() == 1
    shot(reviewer, "operations-after-undo")

    operator.goto(f"{live_server.url}{reverse('console:fact', args=[fact_id])}")
    assert operator.locator("#fact-summary .chip.pinned").count() == 0
    assert _decay_fields(operator) == before


def test_an_operator_resolves_a_conflict(login, live_server, memory_set, frozen_now):
    from memory.models import Fact

    f1, f2 = memory_set["facts"][:2]
    page = login("operator")
    page.goto(f"{live_server.url}{reverse('curation:conflicts')}")
    assert page.locator(".conflict-group").count() == 1
    shot(page, "conflicts")
    page.click(f'button[data-keep="{f2}"]')
    page.wait_for_selector(".conflict-group .notice")  # the group's card says what became of it, in place
    assert "已保留" in page.inner_text(".conflict-group .notice") and page.inner_text("#messages") == ""
    assert Fact.objects.get(pk=f1).superseded_by_id == f1
    page.reload()
    assert page.locator("text=没有待裁决的冲突组").count() == 1


def test_both_are_true_keeps_every_member_and_can_be_undone(login, live_server, memory_set, frozen_now):
    from memory.models import Fact

    f1, f2 = memory_set["facts"][:2]
    page = login("operator")
    page.goto(f"{live_server.url}{reverse('curation:conflicts')}")
    page.click("button[data-keep-all]")
    page.wait_for_selector(".conflict-group .notice")
    assert "都保留" in page.inner_text(".conflict-group .notice")
    assert [Fact.objects.get(pk=f).state for f in (f1, f2)] == ["active", "active"]
    assert {Fact.objects.get(pk=f).slot for f in (f1, f2)} == {""}
    reviewer = login("reviewer")
    reviewer.goto(f"{live_server.url}{reverse('curation:operations')}")
    reviewer.locator("button[data-undo]").first.click()
    reviewer.wait_for_selector("#operations-table .notice")
    assert "住址" in {Fact.objects.get(pk=f).slot for f in (f1, f2)}  # one member is back in its slot


def test_a_spreading_preview_draws_the_graph(login, live_server, memory_set, frozen_now):
    page = login("staff")
    page.goto(f"{live_server.url}{reverse('console:graph')}")
    assert page.locator("svg.graph circle.node").count() >= 4
    page.fill('#spread-panel input[name="q"]', "猫")
    page.click("#spread-panel button.primary")
    page.wait_for_selector("#spread-result")
    assert page.locator("svg.graph .ring-seed").count() >= 1
    assert "顺带想起来的" in page.inner_text("#spread-result")
    assert re.search(r"联想扩散用时 [\d.]+ ms", page.inner_text("#spread-result"))
    page.locator(f'svg.graph a[data-node="fact:{memory_set["facts"][2]}"]').click()
    page.wait_for_selector("#node-panel >> text=从这里扩散")
    shot(page, "graph-spreading")


def test_an_import_job_progress_bar_completes(login, live_server, memory_set, frozen_now):
    from memory import pipeline
    from memory.models import Job

    page = login("staff")
    page.goto(f"{live_server.url}{reverse('console:imports')}")
    page.fill('textarea[name="text"]', "柯基原本是牧牛犬。\n\n柴犬原产于日本。\n\n龙井茶是一种绿茶。")
    page.fill('input[name="origin_name"]', "小知识")
    page.click("form[enctype] button.primary")
    job = Job.objects.get(kind="import")
    card = page.locator(f"#job-{job.pk}")
    assert card.get_attribute("hx-trigger") == "every 2s"
    pipeline.run_import(job_id=job.pk, embed=False)  # what the worker does
    page.wait_for_selector(f'#job-{job.pk}[data-status="done"]', timeout=8_000)
    assert page.locator(f"#job-{job.pk} .progress").get_attribute("aria-valuenow") == "100"
    assert page.locator(f"#job-{job.pk}").get_attribute("hx-trigger") is None  # polling stopped
    page.wait_for_selector("#import-batches .chip.active")  # the batch list refreshed on jobFinished
    shot(page, "imports-job-done")


def test_curation_works_without_javascript(login, live_server, memory_set, frozen_now):
    from memory.models import Fact, FactState

    fact_id = memory_set["facts"][2]
    page = login("operator", javascript=False)
    page.goto(f"{live_server.url}{reverse('console:facts')}")
    page.locator(f'#fact-row-{fact_id} button[data-action="invalidate"]').click()
    page.wait_for_selector("text=标失效后该事实不再进入召回与提示词")  # the confirmation page
    page.click("form button.primary")
    page.wait_for_selector(f"#fact-row-{fact_id} .chip.invalid")
    assert Fact.objects.get(pk=fact_id).state == FactState.INVALID


def test_screenshots_of_the_main_pages(login, live_server, memory_set, frozen_now):
    page = login("demo")
    pages = {
        "dashboard": reverse("console:dashboard"),
        "streams": reverse("console:streams"),
        "stream": reverse("console:stream", args=[memory_set["direct"].pk]) + "?q=过敏",
        "episodes": reverse("console:episodes"),
        "facts-search": reverse("console:facts") + "?q=住在哪里",
        "fact-detail": reverse("console:fact", args=[memory_set["facts"][0]]),
        "knowledge": reverse("console:knowledge"),
        "playground": reverse("console:playground")
        + f"?stream={memory_set['direct'].pk}&speaker={memory_set['alice'].pk}&text=你住在哪里",
        "jobs": reverse("console:jobs"),
    }
    for name, path in pages.items():
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 200, name
        shot(page, name)
    page.goto(f"{live_server.url}{reverse('console:dashboard')}")
    page.wait_for_selector("#worker-health")  # loaded by htmx after the page


def test_api_docs_render_offline(login, live_server):
    """Swagger UI comes from the installed packages: nothing outside the server is fetched."""
    page = login("demo")
    outside: list[str] = []

    def only_the_server(route):
        if route.request.url.startswith(live_server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_the_server)
    page.goto(f"{live_server.url}/api/docs")
    # Swagger UI draws one block per operation once its script and the schema have loaded.
    page.wait_for_selector(".swagger-ui .opblock")
    assert page.locator(".swagger-ui .opblock").count() > 10
    assert "/api/v1/messages" in page.content()
    assert not outside, outside
