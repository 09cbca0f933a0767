"""The tuning JSON API (``/api/v1/tuning/...``): integers stay integers over HTTP."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from memory import overrides
from memory.api.auth import issue_token
from memory.models import Job
from tuning.models import RetrievalProfile

pytestmark = pytest.mark.django_db

BASE = "/api/v1/tuning"


class Api:
    def __init__(self, token: str | None):
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str = "", **params):
        return self.client.get(BASE + path, params, headers=self.headers)

    def post(self, path: str, body=None, raw: str | None = None):
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(BASE + path, data=data, content_type="application/json", headers=self.headers)

    def delete(self, path: str):
        return self.client.delete(BASE + path, headers=self.headers)


@pytest.fixture
def api():
    _, token = issue_token("tuner", ["tuning"])
    return Api(token)


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch, settings):
    settings.EMBEDDING_PROVIDER = "none"
    from tuning import tasks

    monkeypatch.setattr(tasks.evaluate_task, "delay", lambda job_id: None)
    monkeypatch.setattr(tasks.compare_task, "delay", lambda job_id: None)


def test_requires_a_token():
    assert Api(None).get().status_code == 401
    assert Api("nope").post("/apply", {"name": "x"}).status_code == 401


def test_the_reference_profile_answers_to_its_old_name(api):
    # "seed" was the reference profile's name (tuning/migrations/0004_reference_profile): it still applies
    r = api.post("/apply", {"name": "seed"})
    assert r.status_code == 200, r.content
    assert r.json()["profile"] == "reference" and r.json()["params"]["reference_blend"] == 1
    assert api.get().json()["active"]["profile"] == "reference"
    r = api.post("/profiles", {"name": "seed", "params": {"bm25_weight": 2.0}})
    assert r.status_code == 422 and "seed" in r.json()["detail"]


def test_integer_parameter_saved_and_applied_over_http(api):
    r = api.post("/profiles", raw='{"name": "hops", "params": {"ppr_hops": 3, "fact_recall_limit": 8, "bm25_weight": 2}}')
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["params"] == {"ppr_hops": 3, "fact_recall_limit": 8, "bm25_weight": 2.0}
    assert type(body["params"]["ppr_hops"]) is int and type(body["params"]["bm25_weight"]) is float
    stored = RetrievalProfile.objects.get(name="hops").params
    assert type(stored["ppr_hops"]) is int and type(stored["bm25_weight"]) is float

    r = api.post("/apply", {"name": "hops"})
    assert r.status_code == 200, r.content
    assert r.json()["profile"] == "hops" and r.json()["params"]["ppr_hops"] == 3
    assert type(overrides.active_overrides()["ppr_hops"]) is int
    assert overrides.tuned("fact_recall_limit", 6) == 8

    state = api.get().json()
    assert state["active"] == {"profile": "hops", "overrides": {"ppr_hops": 3, "fact_recall_limit": 8, "bm25_weight": 2.0}}
    assert [p["name"] for p in state["profiles"]] == ["default", "reference", "hops"]  # reference: built in
    assert state["profiles"][2]["active"] is True and state["profiles"][2]["last_applied_at"] is not None
    assert state["whitelist"]["ppr_hops"] == {
        "kind": "int", "min": 1.0, "max": 4.0, "legacy": 2, "label": "PPR 跳数", "configured": None
    }
    assert state["whitelist"]["fact_recall_limit"]["configured"] == 6


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        ('{"name": "x", "params": {"ppr_hops": 1.5}}', "body.params.ppr_hops", "需要整数"),
        ('{"name": "x", "params": {"ppr_alpha": true}}', "body.params.ppr_alpha", "需要数值"),
        ('{"name": "x", "params": {"bm25_weight": 99}}', "body.params.bm25_weight", "越界"),
        ('{"name": "x", "params": {"half_life": 1}}', "body.params.half_life", "不在调优白名单"),
        ('{"name": "default", "params": {}}', "body.name", "不可保存"),
        ('{"name": " seed ", "params": {}}', "body.name", "不可保存"),
        ('{"name": "  ", "params": {}}', "body.name", "不可保存"),
    ],
)
def test_refusals_name_the_parameter(api, raw, field, fragment):
    r = api.post("/profiles", raw=raw)
    assert r.status_code == 422, r.content
    body = r.json()
    assert fragment in body["detail"] and body["errors"][0]["field"] == field
    assert not RetrievalProfile.objects.exists()


def test_malformed_bodies_are_422(api):
    assert api.post("/profiles", {"name": "x"}).status_code == 422
    assert api.post("/profiles", {"name": "x", "params": {}, "extra": 1}).status_code == 422


def test_apply_unknown_is_404_and_rollback(api):
    assert api.post("/apply", {"name": "ghost"}).status_code == 404
    api.post("/profiles", {"name": "b", "params": {"bm25_weight": 2.0}})
    api.post("/apply", {"name": "b"})
    r = api.post("/rollback")
    assert r.status_code == 200 and r.json()["profile"] == "default" and r.json()["params"] == {}
    assert overrides.active_overrides() == {}


def test_export_and_delete(api):
    api.post("/profiles", {"name": "b", "params": {"ppr_hops": 4}})
    api.post("/apply", {"name": "b"})
    r = api.get("/export")  # blank = active
    assert r.status_code == 200 and r.json()["profile"] == "b" and r.json()["params"] == {"ppr_hops": 4}
    assert api.get("/export", name="default").json()["params"] == {}
    assert api.get("/export", name="ghost").status_code == 404
    r = api.delete("/profiles/b")
    assert r.status_code == 200
    assert r.json() == {"deleted": True, "active": "default", "profiles": ["default", "reference"]}
    assert overrides.active_overrides() == {}
    assert api.delete("/profiles/b").json()["deleted"] is False
    for builtin in ("default", "reference", "seed"):  # input the schema refuses (ProfileName): 422, as documented
        r = api.delete(f"/profiles/{builtin}")
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == "path.name", r.content


def test_whole_numbers_are_integers_wherever_the_schema_says_integer(api):
    """JSON Schema's ``integer`` admits 27.0 (and the API's other integer fields take it): the integer 27."""
    r = api.post("/profiles", {"name": "x", "params": {"fact_recall_limit": 27.0, "ppr_hops": 3.0, "bm25_weight": 2}})
    assert r.status_code == 201, r.content
    stored = RetrievalProfile.objects.get(name="x").params
    assert stored == {"fact_recall_limit": 27, "ppr_hops": 3, "bm25_weight": 2.0}
    assert isinstance(stored["fact_recall_limit"], int) and isinstance(stored["bm25_weight"], float)
    r = api.post("/evaluate", {"params": {"fact_recall_limit": 27.0}})
    assert r.status_code == 202 and r.json()["params"]["target"]["params"] == {"fact_recall_limit": 27}, r.content
    r = api.post("/compare", {"a": {"params": {"ppr_hops": 2.0}}, "b": {"params": {"fact_recall_limit": 27.0}}})
    assert r.status_code == 202, r.content
    r = api.post("/evaluate", {"params": {"fact_recall_limit": 27.5}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.params.fact_recall_limit"


def test_evaluate_returns_a_job_and_the_job_reports(api):
    r = api.post("/evaluate", {"params": {"fact_recall_limit": 3}, "max_turns": 50})
    assert r.status_code == 202, r.content
    job_id = r.json()["job_id"]
    job = Job.objects.get(pk=job_id)
    assert job.kind == "evaluate" and job.params["target"]["params"] == {"fact_recall_limit": 3}
    assert job.params["max_turns"] == 50 and job.created_by == "api:tuner"
    from tuning import evaluation

    assert evaluation.run_job(job_id, vectors=evaluation.QueryVectors(None)) is True
    body = api.get(f"/jobs/{job_id}").json()
    assert body["status"] == "done" and body["percent"] == 100 and body["result"]["k"] == 3
    assert api.get("/jobs/999999").status_code == 404


def test_evaluate_refusals(api):
    assert api.post("/evaluate", {"params": {"ppr_hops": 2.5}}).status_code == 422
    assert api.post("/evaluate", {"profile": "ghost"}).status_code == 404
    assert api.post("/evaluate", {"max_turns": 5001}).status_code == 422
    assert api.post("/evaluate", {"max_turns": 501}).json()["params"]["max_turns"] == 500  # unlabelled: the newest 500
    assert api.post("/evaluate", {"max_turns": 501, "labelled": True}).json()["params"]["max_turns"] == 501
    r = api.post("/evaluate", {})  # the active profile
    assert r.status_code == 202 and r.json()["params"]["target"]["profile"] == "default"


def test_compare_returns_a_job(api):
    api.post("/profiles", {"name": "wide", "params": {"fact_recall_limit": 12}})
    r = api.post("/compare", {"a": {}, "b": {"profile": "wide"}})
    assert r.status_code == 202, r.content
    params = r.json()["params"]
    assert params["a"]["profile"] == "default" and params["b"]["params"] == {"fact_recall_limit": 12}
    # the side is the key (a, b), the label the target's own: pages compose "A · …" when they show it
    assert params["a"]["label"] == "当前生效（default）" and params["b"]["label"] == "wide"
    assert api.post("/compare", {"a": {}, "b": {"params": {"ppr_hops": 9}}}).status_code == 422
    # params beside a profile are held to the schema too (the profile wins, but garbage is not accepted)
    assert api.post("/compare", {"a": {}, "b": {"profile": "wide", "params": {"ppr_hops": {}}}}).status_code == 422
