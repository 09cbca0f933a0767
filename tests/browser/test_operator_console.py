"""Issue 14 — a console that speaks to operators: job cards, search, row feedback, loading
states, links a role can follow, translations, browsing messages.

Each test drives the system Chromium against the live server (see conftest.py).
"""
from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.browser.conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

RAW = re.compile(r"\{'|'\w+':|=\{|\bTrue\b|\bNone\b")


def _finished_jobs():
    from memory.models import Job

    pool = {"turns": 3, "recall": 0.8123, "ndcg": 0.7, "displaced": 0, "negatives": 0}
    group = {"sample_count": 5, "human": pool, "weak": pool}
    evaluate = Job.objects.create(
        kind="evaluate", status="done", progress=5, total=5,
        params={"target": {"label": "当前生效", "profile": None, "params": {}}, "max_turns": 50},
        result={"kind": "evaluate", "label": "当前生效", "k": 3, "sample_count": 5, "params": {},
                "reconcile": {"matched": 4, "mismatched": 1, "drift_only": 0},
                "groups": {"all": group, "direct": group}, "embedding": {"embedder": None}, "per_turn": []},
    )
    compare = Job.objects.create(
        kind="compare", status="done", progress=5, total=5,
        params={"a": {"label": "甲", "params": {}}, "b": {"label": "乙", "params": {"fact_recall_limit": 3}}},
        result={"kind": "compare", "sample_count": 5, "changed_turns": 2,
                "a": {"label": "甲", "profile": None, "params": {}, "k": 3, "groups": {"all": group}},
                "b": {"label": "乙", "profile": None, "params": {}, "k": 3, "groups": {"all": group}},
                "difference": {"all": {"human": {"recall": {"mean": 0.125, "low": 0.05, "high": 0.2, "n": 3}, "ndcg": None},
                                       "weak": {"recall": None, "ndcg": None}}},
                "per_turn": [], "facts": {}, "embedding": {}},
    )
    imported = Job.objects.create(
        kind="import", status="done", progress=3, total=3, params={"batch_id": 1, "origin_name": "小知识"},
        result={"batch_id": 1, "submitted": 3, "added": 2, "duplicated": 1, "embedded": 2},
    )
    return evaluate, compare, imported


def test_finished_jobs_read_as_one_line_with_a_link_to_their_report(login, live_server, memory_set, frozen_now):
    evaluate, compare, imported = _finished_jobs()
    page = login("staff")
    page.goto(f"{live_server.url}{reverse('console:jobs')}")
    text = page.inner_text("main")
    assert not RAW.search(text), text
    assert "0.8123" in page.inner_text(f"#job-{evaluate.pk} .job-headline")
    assert "+0.125 [+0.050, +0.200]" in page.inner_text(f"#job-{compare.pk} .job-headline")
    line = page.inner_text(f"#job-{imported.pk} .job-headline")
    assert all(n in line for n in ("新增 2", "重复 1", "已向量化 2")), line
    assert "小知识" in page.inner_text(f"#job-{imported.pk}")
    page.click(f"#job-{compare.pk} .job-headline a")
    page.wait_for_url(f"**{reverse('tuning:job', args=[compare.pk])}")
    shot(page, "jobs-readable")

    operator = login("operator")  # no tuning permission: no link to a report it cannot open
    operator.goto(f"{live_server.url}{reverse('console:jobs')}")
    assert operator.locator(f"#job-{compare.pk} .job-headline a").count() == 0


def test_a_tuning_report_uses_the_one_job_card_and_reloads_when_done(login, live_server, memory_set, frozen_now,
                                                                      monkeypatch):
    from tuning import evaluation, tasks
    from tuning.evaluation import QueryVectors

    monkeypatch.setattr(tasks.evaluate_task, "delay", lambda job_id: None)
    job = evaluation.submit_evaluation(evaluation.resolve_target(params={"fact_recall_limit": 3}), max_turns=10)
    page = login("staff")
    page.goto(f"{live_server.url}{reverse('tuning:job', args=[job.pk])}")
    card = page.locator(f"#job-{job.pk}")
    assert card.get_attribute("hx-trigger") == "every 2s"
    evaluation.run_job(job.pk, vectors=QueryVectors(None))
    page.wait_for_selector("#mismatch-count", timeout=8_000)
    assert page.locator(f"#job-{job.pk}").count() == 0


def test_fact_search_honours_the_state_filter(login, live_server, memory_set, frozen_now):
    from curation import services as curation
    from memory import services

    alice = memory_set["alice"]
    gone = services.add_fact(person_id=alice.pk, content="主人住在苏州", kind="身份", origin_kind="direct",
                             at=frozen_now - 3_600_000).fact_id
    curation.invalidate_fact(fact_id=gone, user="operator", at=frozen_now)
    old = services.add_fact(person_id=alice.pk, content="主人在苏州上班", kind="身份", origin_kind="direct",
                            at=frozen_now - 3_600_000).fact_id
    curation.replace_fact(fact_id=old, content="主人在无锡上班", user="operator", at=frozen_now)
    page = login("operator")
    for state, wanted, unwanted in (("invalid", {gone}, {old}), ("superseded", {old}, {gone}), ("", {gone, old}, set())):
        page.goto(f"{live_server.url}{reverse('console:facts')}?state={state}&q=苏州")
        for fact_id in wanted:
            assert page.locator(f"#fact-row-{fact_id}").count() == 1, (state, fact_id)
        for fact_id in unwanted:
            assert page.locator(f"#fact-row-{fact_id}").count() == 0, (state, fact_id)
    shot(page, "facts-search-all-states")


@pytest.mark.parametrize("where", ["row", "fact-page"])
def test_a_refused_action_rerenders_the_row_with_its_message_beside_it(login, live_server, memory_set, frozen_now,
                                                                        where):
    from curation import services as curation

    fact_id = memory_set["facts"][2]
    page = login("operator")
    url = reverse("console:facts") if where == "row" else reverse("console:fact", args=[fact_id])
    region = f"#fact-row-{fact_id}" if where == "row" else "#fact-summary"
    page.goto(f"{live_server.url}{url}")
    curation.invalidate_fact(fact_id=fact_id, user="someone-else", at=frozen_now)  # another operator was faster
    page.locator(f'{region} button[data-action="invalidate"]').click()
    page.wait_for_selector(f"{region} .refusal")
    assert "操作被拒绝" in page.inner_text(f"{region} .refusal")
    assert page.locator(f"{region} .chip.invalid").count() == 1  # the real state
    assert page.locator(f'{region} button[data-action="restore"]').count() == 1
    assert page.locator(f'{region} button[data-action="invalidate"]').count() == 0
    shot(page, f"refusal-beside-{where}")


@pytest.mark.parametrize("debug", [True, False], ids=["DEBUG on", "DEBUG off"])
def test_a_refusal_never_replaces_more_than_its_region(login, live_server, memory_set, frozen_now, settings, debug):
    """Under `make run` (DEBUG on) django-htmx's debug script replaced the whole document with any 400/404
    htmx answer: a refusal meant for a row blanked the console. Each refusal here must land in its own
    region, the rest of the page untouched, with DEBUG on and off."""
    from curation import services as curation
    from memory.models import Fact
    from memory.privacy import forget

    settings.DEBUG = debug
    f1, f2, f3 = memory_set["facts"][:3]
    content = Fact.objects.get(pk=f3).content

    def intact(page, heading: str) -> None:
        assert page.locator("header nav a").count() >= 3 and page.locator("h1").inner_text() == heading
        assert page.locator("link[rel=stylesheet]").count() == 1  # still the styled console

    operator = login("operator")
    operator.goto(f"{live_server.url}{reverse('console:facts')}")
    assert (operator.locator('script[src*="django-htmx.js"]').count() == 1) == debug  # the debug script is there
    rows = operator.locator("#fact-results tbody tr").count()
    # 400: a rewrite to the same text (the case), from the row
    row = operator.locator(f"#fact-row-{f3}")
    row.locator("details.action summary").click()
    row.locator("textarea[name=content]").fill(content)
    row.locator("details.action button.primary").click()
    operator.wait_for_selector(f"#fact-row-{f3} .refusal")
    intact(operator, "事实")
    assert operator.locator("#fact-results tbody tr").count() == rows
    # 404: a fact forgotten by someone else meanwhile
    plan = forget.plan_forget(target="fact", target_id=f1)
    forget.forget(target="fact", target_id=f1, user="someone-else", expected_digest=plan.digest())
    operator.locator(f'#fact-row-{f1} button[data-action="invalidate"]').click()
    operator.wait_for_selector(f"#fact-row-{f1} .refusal")
    assert "不存在" in operator.inner_text(f"#fact-row-{f1}")
    intact(operator, "事实")
    # 409 on the fact page: invalidated by someone else meanwhile
    operator.goto(f"{live_server.url}{reverse('console:fact', args=[f2])}")
    curation.invalidate_fact(fact_id=f2, user="someone-else", at=frozen_now)
    operator.locator('#fact-summary button[data-action="invalidate"]').click()
    operator.wait_for_selector("#fact-summary .refusal")
    intact(operator, f"事实 #{f2} · 小林")
    # 409 in the journal: an operation undone by someone else meanwhile
    reviewer = login("reviewer")
    reviewer.goto(f"{live_server.url}{reverse('curation:operations')}")
    op = reviewer.locator("button[data-undo]").first.get_attribute("data-undo")
    curation.undo_operation(operation_id=int(op), user="someone-else")
    reviewer.locator(f'button[data-undo="{op}"]').click()
    reviewer.wait_for_selector(f"#op-{op} .refusal")
    intact(reviewer, "操作流水")


def test_an_action_shows_progress_and_disables_its_button_while_it_runs(login, live_server, memory_set, frozen_now,
                                                                          monkeypatch):
    import time

    from curation.actions import ACTIONS

    pin = ACTIONS["pin"]

    def slow_pin(**kwargs):
        time.sleep(1.5)
        return pin.service(**kwargs)

    monkeypatch.setitem(ACTIONS, "pin", pin._replace(service=slow_pin))
    fact_id = memory_set["facts"][2]
    page = login("operator")
    page.goto(f"{live_server.url}{reverse('console:facts')}")
    assert not page.locator("#busy").is_visible()
    button = page.locator(f'#fact-row-{fact_id} button[data-action="pin"]')
    button.click()
    page.wait_for_selector("#busy.htmx-request", state="visible", timeout=1_000)
    assert button.is_disabled()
    page.wait_for_selector(f"#fact-row-{fact_id} .chip.pinned")
    assert not page.locator("#busy").is_visible()


@pytest.mark.parametrize("role", ["operator", "reviewer", "staff"])
def test_every_link_a_role_sees_it_can_follow(login, live_server, memory_set, frozen_now, role):
    from urllib.parse import urldefrag, urlparse

    _finished_jobs()
    page = login(role)
    starts = [page.url] + [
        f"{live_server.url}{path}" for path in (
            reverse("console:fact", args=[memory_set["facts"][0]]), reverse("console:fact", args=[memory_set["facts"][2]]),
            reverse("console:episodes"), reverse("console:stream", args=[memory_set["direct"].pk]),
        )
    ]
    starts += [urldefrag(href)[0] for href in page.eval_on_selector_all("header nav a", "els => els.map(e => e.href)")]
    followed: dict[str, int] = {}
    for start in dict.fromkeys(starts):
        if page.goto(start).status >= 400:
            continue  # a start page outside the role is checked through the nav, not here
        hrefs = page.eval_on_selector_all("main a[href], header a[href]", "els => els.map(e => e.href)")
        for href in hrefs:
            url = urldefrag(href)[0]
            if urlparse(url).netloc != urlparse(live_server.url).netloc or url in followed:
                continue
            followed[url] = page.request.get(url, max_redirects=0).status
    dead = {url: status for url, status in followed.items() if status in (403, 404)}
    assert not dead, dead
    assert len(followed) > 10


def test_a_streams_messages_are_browsable_and_an_episode_shows_its_messages(login, live_server, memory_set,
                                                                              frozen_now):
    direct, episode, msgs = memory_set["direct"], memory_set["episode"], memory_set["messages"]
    page = login("operator")
    page.goto(f"{live_server.url}{reverse('console:stream', args=[direct.pk])}")
    listed = {int(x) for x in page.locator("#stream-messages tr[data-message]").evaluate_all(
        "rows => rows.map(r => r.dataset.message)")}
    assert {m.pk for m in msgs} <= listed  # archived (summarised) and pending alike
    page.select_option('select[name="archived"]', "yes")
    page.click("form:has(select[name=archived]) button")
    page.wait_for_function("document.querySelectorAll('#stream-messages tr[data-message]').length == 2")
    assert "archived=yes" in page.url  # the filter is in the address (pushed by htmx)
    page.locator(f'#stream-messages tr[data-message="{msgs[0].pk}"] a').click()
    page.wait_for_url(f"**{reverse('console:episode', args=[episode.pk])}")
    shown = page.inner_text("#episode-messages")
    assert "我住在杭州" in shown and "我喜欢猫" in shown and "我对花生过敏" not in shown
    shot(page, "episode-messages")


def test_the_dashboard_shows_what_an_operator_needs_at_a_glance(login, live_server, memory_set, frozen_now):
    from memory import services
    from memory.models import Job

    Job.objects.create(kind="import", status="failed", error="boom", finished_at=__import__("django.utils.timezone",
                       fromlist=["now"]).now())
    services.emit_event("memory_fact_scope_blocked", {"factId": memory_set["facts"][0], "reason": "private"},
                        at=frozen_now, stream_id=memory_set["group"].pk)
    page = login("operator")
    glance = page.locator("#glance")
    for key, url in (("learnt", "console:facts"), ("conflicts", "curation:conflicts"), ("jobs", "console:jobs"),
                     ("workers", "console:worker_health"), ("pending", "console:streams")):
        assert glance.locator(f'a[data-glance="{key}"]').get_attribute("href").split("?")[0] == reverse(url), key
    # "facts learnt today" leads to exactly those: the list filtered from local midnight
    assert "?since=" in glance.locator('a[data-glance="learnt"]').get_attribute("href")
    # why messages wait: the streams are below the summary trigger (48), and it says so
    assert "48" in glance.locator("#backlog-why").inner_text()
    assert glance.locator('[data-glance="conflicts"] .metric').inner_text() == "1"
    assert glance.locator('[data-glance="pending"] .metric').inner_text() == "3"  # two direct + one group message
    assert "1" in glance.locator('[data-glance="jobs"] .danger-text').inner_text()  # the failed job
    page.wait_for_selector("#glance #worker-health")
    text = page.inner_text("main")
    assert "memory_fact_scope_blocked" not in text and "{'" not in text and "抽取游标" not in text
    assert "可见性规则" in text
    shot(page, "dashboard-at-a-glance")


def test_papercuts(login, live_server, memory_set, frozen_now):
    page = login("demo")
    not_found = []
    page.on("response", lambda r: not_found.append(r.url) if r.status == 404 else None)
    page.context.add_cookies([{"name": "django_language", "value": "en", "url": live_server.url}])
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}{reverse('console:dashboard')}")
    first, last = page.locator("header nav a").first.bounding_box(), page.locator("header nav a").last.bounding_box()
    assert abs(first["y"] - last["y"]) < 4, (first, last)  # the English nav fits on one line at 1440 px
    page.goto(f"{live_server.url}{reverse('tuning:index')}")
    inputs = page.locator("input.draft")
    assert inputs.count() > 0
    assert all(inputs.nth(i).evaluate("e => e.scrollWidth <= e.clientWidth") for i in range(inputs.count()))
    page.goto(f"{live_server.url}{reverse('console:graph')}")
    assert page.get_attribute('input[name="hops"]', "max") == "4"  # as far as tuning's ppr_hops goes
    page.goto(f"{live_server.url}{reverse('curation:operations')}")
    assert page.locator('select[name="person"] option').count() >= 3  # a person picker, not a raw id
    page.goto(f"{live_server.url}/admin/memory/")
    admin = page.inner_text("#content")
    assert "Identitys" not in admin and "Knowledges" not in admin and "Import batchs" not in admin
    assert not [u for u in not_found if "favicon" in u], not_found


def test_the_help_page_shows_who_can_do_what(login, live_server, memory_set, frozen_now):
    page = login("reviewer")
    page.click("header a.help")
    page.wait_for_selector("#roles")
    header = page.locator("#roles thead th").all_inner_texts()
    assert header[1:] == ["operator", "reviewer", "staff", "超级用户"]
    undo = page.locator("#roles tr", has_text="撤销操作").locator("td").all_inner_texts()
    assert undo[1:] == ["—", "✓", "—", "✓"]


def test_a_refusal_speaks_the_interface_language(login, live_server, memory_set, frozen_now):
    from curation import services as curation

    fact_id = memory_set["facts"][2]
    page = login("operator")
    page.context.add_cookies([{"name": "django_language", "value": "en", "url": live_server.url}])
    page.goto(f"{live_server.url}{reverse('console:facts')}")
    curation.invalidate_fact(fact_id=fact_id, user="someone-else", at=frozen_now)
    page.locator(f'#fact-row-{fact_id} button[data-action="invalidate"]').click()
    refusal = page.locator(f"#fact-row-{fact_id} .refusal")
    refusal.wait_for()
    assert f"fact #{fact_id} is already invalid" in refusal.inner_text()
    assert not re.search(r"[\u4e00-\u9fff]", refusal.inner_text())


def test_back_after_a_history_cache_miss_restores_the_whole_page(login, live_server, memory_set, frozen_now):
    """htmx asks for a page it no longer has cached without ``HX-Request`` (historyRestoreAsHxRequest off), so
    the view answers with the whole page, not the fragment it sends to htmx swaps."""
    page = login("operator")
    page.goto(f"{live_server.url}{reverse('console:facts')}")
    page.fill("#id_q", "猫")
    page.wait_for_url("**q=*")  # the search pushed its URL
    page.goto(f"{live_server.url}{reverse('console:dashboard')}")
    page.goto(f"{live_server.url}{reverse('console:facts')}?q=%E7%8C%AB")
    page.fill("#id_q", "杭州")
    page.wait_for_function("location.search.includes('%E6%9D%AD')")
    page.evaluate("htmx.config.historyCacheSize = 0")  # nothing cached: the back button asks the server
    with page.expect_request(lambda r: "HX-History-Restore-Request".lower() in r.headers) as restore:
        page.go_back()
    assert "hx-request" not in restore.value.headers
    page.wait_for_function("document.querySelector('#id_q').value === '猫'")
    assert page.locator("header.top").count() == 1 and page.locator("#fact-results").count() == 1
    assert "小林喜欢猫" in page.inner_text("#fact-results")
