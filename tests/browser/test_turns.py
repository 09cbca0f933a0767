"""The turn pages in a browser: from a fact to the turns that used it, the inspector, labelling (htmx and
without JavaScript), the replay's difference, and a fit run by a real Celery worker."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests import dbenv
from tests.browser.conftest import shot
from tests.integration.test_worker import ROOT, Worker, redis_test_db  # noqa: F401 — the flushed Redis database
from tests.redis_url import TEST_REDIS_URL

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def world(users):
    from tests.tuning import world as labelled

    return labelled.build(["阿青", "小白", "老周"], label=False)


def test_a_reviewer_finds_a_turn_from_a_fact_sees_why_labels_it_and_the_count_follows(login, live_server, world):
    from tuning.models import RelevanceLabel

    turn_id, name, topic = world.turns[0]
    fact_id = world.facts[(name, topic)]
    page = login("reviewer")
    page.goto(f"{live_server.url}/facts/{fact_id}/")
    page.click("#fact-turns")
    page.wait_for_selector("#fact-filter")
    assert page.locator(f'tr[data-turn="{turn_id}"]').count() == 1
    page.click(f'tr[data-turn="{turn_id}"] a >> nth=0')
    page.wait_for_selector("#why")
    row = page.locator(f"#fact-{fact_id}")
    assert row.get_attribute("data-verdict") == "prompt"
    assert "提示词最多放" in row.locator(".reason").inner_text()
    assert "这个回合 0 条标注" in page.locator("#label-counts").inner_text()
    row.locator("button[value=yes]").click()  # htmx: the row is swapped, the counts refresh themselves
    page.wait_for_selector(f'#fact-{fact_id}[data-labelled="yes"]')
    page.wait_for_function("() => document.querySelector('#label-counts').innerText.includes('1 条标注')")
    assert RelevanceLabel.objects.get(turn_id=turn_id, fact_id=fact_id).user == "reviewer"
    shot(page, "turn-labelled")
    # the turn list says it is labelled
    page.goto(f"{live_server.url}/turns/?labelled=yes")
    assert page.locator(f'tr[data-turn="{turn_id}"] [data-labels="1"]').count() == 1


HAN = re.compile(r"[\u4e00-\u9fff]")
COUNTS = {"zh-hans": ("这个回合 0 条标注", "这个回合 1 条标注", "全部已标注 1 个回合"),
          "en": ("0 labels on this turn", "1 label on this turn", "1 turn labelled in all")}


@pytest.mark.parametrize("language", ["zh-hans", "en"])
def test_a_new_reviewer_walks_the_demo_data_in_either_language(login, live_server, language):
    """``seed_demo``'s recorded turns, as a reviewer meets them: from a fact to a turn that used it, every
    candidate's reason in the page's language, a label, and the counts following it."""
    import io

    from django.core.management import call_command

    from memory.models import Turn
    from tuning.models import RelevanceLabel

    call_command("seed_demo", "--if-empty", stdout=io.StringIO(), stderr=io.StringIO())
    turn = next(t for t in Turn.objects.order_by("id") if t.prompt_fact_ids and len(t.pool or []) > len(t.prompt_fact_ids))
    fact_id = turn.prompt_fact_ids[0]
    page = login("reviewer")
    page.context.add_cookies([{"name": "django_language", "value": language, "url": live_server.url}])
    page.goto(f"{live_server.url}/facts/{fact_id}/")
    page.click("#fact-turns")
    page.wait_for_selector("#fact-filter")
    page.click(f'tr[data-turn="{turn.pk}"] a >> nth=0')
    page.wait_for_selector("#why")
    verdicts = page.locator("#candidates tbody tr[data-fact]")
    assert verdicts.count() == len(turn.pool)
    assert {verdicts.nth(i).get_attribute("data-verdict") for i in range(verdicts.count())} - {"prompt"}  # some left out
    for i in range(verdicts.count()):
        reason = verdicts.nth(i).locator(".reason").inner_text().strip()
        assert reason and (language != "en" or not HAN.search(reason)), reason
    assert page.locator(f"#fact-{fact_id}").get_attribute("data-verdict") == "prompt"
    none, one, all_turns = COUNTS[language]
    assert none in page.locator("#label-counts").inner_text()
    page.locator(f"#fact-{fact_id} button[value=yes]").click()
    page.wait_for_selector(f'#fact-{fact_id}[data-labelled="yes"]')
    page.wait_for_function("(text) => document.querySelector('#label-counts').innerText.includes(text)", arg=one)
    assert all_turns in page.locator("#label-counts").inner_text()
    assert RelevanceLabel.objects.get(turn=turn, fact_id=fact_id).user == "reviewer"
    shot(page, f"turn-demo-{language}")


def test_labelling_works_without_javascript(login, live_server, world):
    from tuning.models import RelevanceLabel

    turn_id, name, topic = world.turns[1]
    fact_id = world.facts[(name, topic)]
    page = login("staff", javascript=False)
    page.goto(f"{live_server.url}/turns/{turn_id}/")
    page.locator(f"#fact-{fact_id} button[value=no]").click()
    page.wait_for_selector(f'#fact-{fact_id}[data-labelled="no"]')
    assert RelevanceLabel.objects.get(turn_id=turn_id, fact_id=fact_id).relevant is False
    # a fact the ranking never offered, found by search and added
    other = "吉他" if topic != "吉他" else "咖啡"
    missing = world.facts[(name, other)]
    page.fill("#add input[name=q]", other)
    page.click("#add button[type=submit]")
    page.locator(f'#add-results [data-fact="{missing}"] button').click()
    page.wait_for_selector(f'#added-labels [data-fact="{missing}"]')
    assert RelevanceLabel.objects.get(turn_id=turn_id, fact_id=missing).added is True


def test_the_replay_marks_what_another_profile_would_put_in_the_prompt(login, live_server, world):
    from memory import services as memory_services
    from tests.tuning import world as labelled
    from tuning import services

    turn_id, name, topic = world.turns[0]
    memory_services.add_fact(person_id=world.persons[name], content=f"{name}说{topic}很黏人", at=labelled.T0)
    services.save_profile("一条就够", {"fact_recall_limit": 1})
    page = login("staff")
    page.goto(f"{live_server.url}/turns/{turn_id}/")
    page.select_option("#replay-section select[name=profile]", "一条就够")
    page.click("#replay-section button[type=submit]")
    page.wait_for_selector("#replay-summary")
    assert int(page.locator("#replay-summary").get_attribute("data-changed")) >= 1
    assert page.locator('#replay tr[data-changed="yes"]').count() >= 1
    assert "<html" not in page.locator("#replay").inner_html()  # htmx swapped the panel alone
    shot(page, "turn-replay")


# --- a fit run by a real worker ------------------------------------------------------------------------------

SEED = r"""
import django
django.setup()
from django.contrib.auth.models import User
from memory.management.commands.ensure_roles import ensure_roles
from tests.tuning import world
groups = ensure_roles()
user = User.objects.create_user("staff", password="staff-password")
user.groups.add(groups["staff"])
world.build()
"""


@pytest.mark.usefixtures("redis_test_db")
def test_a_fit_runs_on_a_real_worker_and_is_applied_in_one_click(browser, tmp_path):
    """gunicorn and a Celery worker on a file store of their own (a real worker cannot share the test's in-memory
    database): the staff user starts a fit on the tuning page, watches it on the job card, saves and applies it."""
    from bench.common import Server, stop_process_group

    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="config.settings", MEMORY_DB=str(tmp_path / "fit.sqlite3"), REDIS_URL=TEST_REDIS_URL,
               MEMORY_ENQUEUE_TASKS="1", EMBEDDING_PROVIDER="none", LLM_BASE_URL="", LLM_MODEL="", PYTHONPATH=str(ROOT),
               DJANGO_DEBUG="1", DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost")
    dbenv.migrated_store(env)
    done = subprocess.run([sys.executable, "-c", SEED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    worker = Worker(env, tmp_path / "worker.log")
    server = Server(env, workers=1)
    context = browser.new_context(locale="zh-CN", viewport={"width": 1400, "height": 900})
    try:
        assert worker.wait_for_log("ready", 90), (tmp_path / "worker.log").read_text(errors="replace")[-2000:]
        server.wait_ready(timeout=90)
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(f"{server.base}/accounts/login/")
        page.fill("input[name=username]", "staff")
        page.fill("input[name=password]", "staff-password")
        page.click("form button.primary")
        page.wait_for_url(f"{server.base}/")
        page.goto(f"{server.base}/tuning/")
        assert page.locator("#fit-labels").get_attribute("data-turns") == "36"
        page.fill("#fit input[name=budget]", "3")
        page.click("#fit button[type=submit]")
        page.wait_for_url("**/tuning/jobs/*/")
        page.wait_for_selector("#fit-verdict", timeout=120_000)  # the card polled until done, then the report
        verdict = page.locator("#fit-verdict").get_attribute("data-verdict")
        assert verdict in {"better", "negligible", "worse", "unsure", "unchanged"}
        assert page.locator('#fit-figures tr[data-split="heldout"] td').nth(1).inner_text() == "12"
        shot(page, "tuning-fit-worker")
        if page.locator("#fit-apply").count():
            page.click("#fit-apply button[type=submit]")
            page.wait_for_url(f"{server.base}/tuning/")
            assert page.locator('#journal tr[data-op="apply"]').count() == 1
        rows = dbenv.query(env, "SELECT status, worker FROM jobs WHERE kind = 'fit'")
        assert rows and rows[0][0] == "done" and "it-worker" in rows[0][1]
    finally:
        context.close()
        server.stop()
        worker.stop()
        stop_process_group(worker.proc)
