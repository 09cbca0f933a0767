"""Console pages of retrieval tuning."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from memory import overrides
from memory import services as memory_services
from memory.models import Job, Turn
from tuning import evaluation, services
from tuning.evaluation import QueryVectors
from tuning.models import RetrievalProfile

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _offline(settings, monkeypatch):
    settings.EMBEDDING_PROVIDER = "none"
    settings.MEMORY_ENQUEUE_TASKS = False
    from tuning import tasks

    monkeypatch.setattr(tasks.evaluate_task, "delay", lambda job_id: None)
    monkeypatch.setattr(tasks.compare_task, "delay", lambda job_id: None)


@pytest.fixture
def tuner(client):
    user = User.objects.create_user("tuner", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="tune_retrieval"))
    client.force_login(user)
    return client


def draft_post(client, action="evaluate_draft", **values):
    data = {"action": action, "max_turns": "50"}
    data.update({f"p_{k}": v for k, v in values.items() if k not in ("name", "compare_with")})
    for k in ("name", "compare_with"):
        if k in values:
            data[k] = values[k]
    return client.post(reverse("tuning:draft"), data)


def test_permission_required(client):
    url = reverse("tuning:index")
    assert client.get(url).status_code == 302  # to login
    User.objects.create_user("plain", password="pw")
    client.login(username="plain", password="pw")
    assert client.get(url).status_code == 403
    assert client.post(reverse("tuning:rollback")).status_code == 403


def test_index_shows_the_parameter_table_and_profiles(tuner):
    services.save_profile("boost", {"bm25_weight": 2.0, "ppr_hops": 3})
    services.apply_profile("boost")
    html = tuner.get(reverse("tuning:index")).content.decode()
    for param in ("bm25_weight", "retention_weight_floor", "ppr_alpha", "ppr_hops", "pool_score_percentile",
                  "fact_recall_limit", "recalled_episode_limit", "recent_episode_limit"):
        assert f'data-param="{param}"' in html
    assert 'data-active-profile="boost"' in html
    assert "回滚到默认方案" in html and "生效中" in html and "由配置提供" in html
    assert 'name="p_ppr_hops"' in html and 'value="3"' in html  # draft prefilled with the override
    assert "[1.0, 4.0]" in html or "[1, 4]" in html
    assert "还没跑过评估" in html


def test_save_draft_as_profile_keeps_integers(tuner):
    r = draft_post(tuner, "save", name="hops", ppr_hops="3", bm25_weight="2", ppr_alpha="")
    assert r.status_code == 302
    params = RetrievalProfile.objects.get(name="hops").params
    assert params == {"ppr_hops": 3, "bm25_weight": 2.0} and type(params["ppr_hops"]) is int
    # a whole number written 3.0 is the integer 3, as over the API (JSON Schema's integer)
    assert draft_post(tuner, "save", name="hops", ppr_hops="3.0", fact_recall_limit="27.0").status_code == 302
    params = RetrievalProfile.objects.get(name="hops").params
    assert params == {"ppr_hops": 3, "fact_recall_limit": 27} and type(params["fact_recall_limit"]) is int


@pytest.mark.parametrize(("values", "fragment"), [
    ({"ppr_hops": "3.5"}, "需要整数"),
    ({"ppr_hops": "1.5"}, "需要整数"),
    ({"bm25_weight": "abc"}, "需要数值"),
    ({"bm25_weight": "9"}, "越界"),
])
def test_draft_refusals_name_the_parameter(tuner, values, fragment):
    r = draft_post(tuner, "save", name="bad", **values)
    assert r.status_code == 400
    html = r.content.decode()
    assert fragment in html and list(values)[0] in html
    assert not RetrievalProfile.objects.exists()


def test_draft_refusals_speak_the_interface_language(tuner):
    tuner.cookies["django_language"] = "en"
    html = draft_post(tuner, "save", name="bad", bm25_weight="9").content.decode()
    assert "bm25_weight is out of range" in html and "越界" not in html
    html = draft_post(tuner, "save", name="default", bm25_weight="2").content.decode()
    assert "built-in profile" in html and "不可保存" not in html


@pytest.mark.parametrize("name", [None, "", "   "])
def test_save_needs_a_name(tuner, name):
    values = {"bm25_weight": "2"} if name is None else {"bm25_weight": "2", "name": name}
    r = draft_post(tuner, "save", **values)
    assert r.status_code == 400 and "参数方案名称为空，不可保存" in r.content.decode()
    assert not RetrievalProfile.objects.exists()


def test_save_refuses_a_builtin_name(tuner):
    r = draft_post(tuner, "save", name="default", bm25_weight="2")
    assert r.status_code == 400 and "default 是内置参数方案，不可保存" in r.content.decode()
    assert not RetrievalProfile.objects.exists()


def test_evaluate_draft_creates_a_job_and_redirects(tuner):
    services.save_profile("alpha", {"ppr_alpha": 0.9})
    services.apply_profile("alpha")
    r = draft_post(tuner, "evaluate_draft", fact_recall_limit="3")
    job = Job.objects.get()
    assert r.status_code == 302 and r["Location"] == reverse("tuning:job", args=[job.pk])
    assert job.kind == "evaluate" and job.params["target"]["params"] == {"fact_recall_limit": 3}
    assert job.params["max_turns"] == 50 and job.created_by == "tuner"
    # the live overrides are untouched
    assert overrides.active_overrides() == {"ppr_alpha": 0.9}


def test_evaluate_active(tuner):
    services.save_profile("alpha", {"ppr_alpha": 0.9})
    services.apply_profile("alpha")
    draft_post(tuner, "evaluate_active", ppr_hops="bogus")  # the draft is ignored
    job = Job.objects.get()
    assert job.params["target"]["profile"] == "alpha" and job.params["target"]["params"] == {"ppr_alpha": 0.9}


def test_apply_rollback_delete_export(tuner):
    services.save_profile("boost", {"bm25_weight": 2.0})
    r = tuner.post(reverse("tuning:apply"), {"name": "boost"})
    assert r.status_code == 302 and overrides.active_overrides() == {"bm25_weight": 2.0}
    r = tuner.get(reverse("tuning:export"), {"name": "boost"})
    assert r.status_code == 200 and "retrieval-profile-boost.json" in r["Content-Disposition"]
    data = json.loads(r.content)
    assert data["profile"] == "boost" and data["params"] == {"bm25_weight": 2.0} and "exported_at" in data
    assert tuner.get(reverse("tuning:export"), {"name": "ghost"}).status_code == 404
    tuner.post(reverse("tuning:rollback"))
    assert services.active_profile_name() == "default"
    tuner.post(reverse("tuning:apply"), {"name": "boost"})
    r = tuner.post(reverse("tuning:delete"), {"name": "boost"}, follow=True)
    assert "回落到 default" in r.content.decode()
    assert services.active_profile_name() == "default" and not RetrievalProfile.objects.exists()
    r = tuner.post(reverse("tuning:apply"), {"name": "ghost"}, follow=True)
    assert "不存在" in r.content.decode()


def _traces():
    a = memory_services.resolve_person(platform="qq", external_id="a", name="阿青", at=T0)
    s = memory_services.resolve_stream(platform="qq", kind="group", external_id="g")
    fa = memory_services.add_fact(person_id=a.pk, content="阿青喜欢手冲咖啡", at=T0).fact_id
    from memory import recall

    pool = recall.replay_turn_pool(person_ids=[a.pk], text="咖啡", impression="", now=T0 + 1000, stream_kind="group",
                                   overrides={})
    Turn.objects.create(stream=s, speaker=a, at=T0 + 1000, text="咖啡", stream_kind="group",
                        present_person_ids=[a.pk], pool=[f.as_dict() for f in pool] + [{"factId": 424242, "score": 0.1}],
                        prompt_fact_ids=[fa], confirmed_at=T0 + 1100)
    return fa


def test_job_page_progress_then_report(tuner):
    _traces()
    job = evaluation.submit_evaluation(evaluation.resolve_target(params={"fact_recall_limit": 3}), max_turns=10)
    html = tuner.get(reverse("tuning:job", args=[job.pk])).content.decode()
    # the console's one job card (polls every 2 s); its jobFinished event reloads the report
    assert f'id="job-{job.pk}"' in html and 'hx-trigger="every 2s"' in html and "等待后台进程接手" in html
    assert 'hx-trigger="jobFinished from:body"' in html
    evaluation.run_job(job.pk, vectors=QueryVectors(None))
    html = tuner.get(reverse("tuning:job", args=[job.pk])).content.decode()
    # the mismatch count is the first number shown
    first_metric = html.index('class="metric"')
    assert html.index('id="mismatch-count"') < html.index('class="metric"', first_metric + 1)
    assert 'data-mismatched="1"' in html and 'data-reconcile="mismatch"' in html and "#424242" in html
    assert "nDCG@3" in html and "fact_recall_limit=3" in html
    # its sample: how many turns, how many scorable, and that one turn is an anecdote; a row per stream kind
    assert "样本：最近 1 个留痕回合" in html and "其中 0 个按人工标注评分，1 个按当时进了提示词的事实评分" in html
    assert 'id="few-scorable"' in html
    assert 'data-group="desktop"' in html
    r = tuner.get(reverse("tuning:job_json", args=[job.pk]))
    assert json.loads(r.content)["k"] == 3
    index = tuner.get(reverse("tuning:index")).content.decode()
    assert f'<td><a href="{reverse("tuning:job", args=[job.pk])}">#{job.pk}</a></td>' in index


def test_compare_page(tuner):
    fa = _traces()
    services.save_profile("one", {"fact_recall_limit": 1})
    cafe = memory_services.add_fact(
        person_id=Turn.objects.get().speaker_id, content="阿青常去的咖啡馆在西湖边", at=T0
    ).fact_id
    r = tuner.post(reverse("tuning:compare"), {"a": "one", "b": "@active", "max_turns": "10"})
    job = Job.objects.get(kind="compare")
    assert r.status_code == 302 and r["Location"] == reverse("tuning:job", args=[job.pk])
    assert evaluation.run_job(job.pk, vectors=QueryVectors(None)) is True
    html = tuner.get(reverse("tuning:job", args=[job.pk])).content.decode()
    assert "A · one" in html and "B · 当前生效（默认）" in html  # the stored label composed on the page
    assert 'data-group="all"' in html and "nDCG A" in html
    assert 'id="sample-size"' in html and "回放不一致：用当时生效的参数重放" in html  # mismatches explained
    # A keeps only the confirmed fact (its k is 1); B's top k also holds the café fact: it moved in, fa did not.
    # Checked by the fact links of the moved-in cell, not a bare "#<id>", which a turn id can match too.
    moved_in = html.split('class="small moved-in"', 1)[1].split("</td>", 1)[0]
    assert "移入 top k" in html and f'href="{reverse("console:fact", args=[cafe])}"' in moved_in
    assert f'href="{reverse("console:fact", args=[fa])}"' not in moved_in
    changed = tuner.get(reverse("tuning:job", args=[job.pk]), {"changed": "1"}).content.decode()
    assert "显示全部回合" in changed


def test_compare_draft_against_active(tuner):
    r = draft_post(tuner, "compare", compare_with="@active", fact_recall_limit="2")
    job = Job.objects.get()
    assert r.status_code == 302 and job.kind == "compare"
    assert job.params["a"]["profile"] == "default" and job.params["b"]["params"] == {"fact_recall_limit": 2}


def test_unknown_job_is_404(tuner):
    assert tuner.get(reverse("tuning:job", args=[999])).status_code == 404
    other = Job.objects.create(kind="import")
    assert tuner.get(reverse("tuning:job", args=[other.pk])).status_code == 404


def test_a_report_from_before_the_desktop_row_still_reads(tuner):
    _traces()
    job = evaluation.submit_evaluation(evaluation.resolve_target(), max_turns=10)
    evaluation.run_job(job.pk, vectors=QueryVectors(None))
    job.refresh_from_db()
    job.result["groups"].pop("desktop")
    job.save(update_fields=["result"])
    html = tuner.get(reverse("tuning:job", args=[job.pk])).content.decode()
    assert 'data-group="all"' in html and 'data-group="desktop"' not in html
