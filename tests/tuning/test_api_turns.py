"""The API of turns, relevance labels and the fit job: scopes, bad input (nothing stored), the happy paths."""
from __future__ import annotations

import pytest

from memory.api.auth import issue_token
from memory.models import Job
from tests.tuning import world as labelled
from tests.tuning.test_api import Api
from tuning.models import RelevanceLabel, TuningOperation

pytestmark = pytest.mark.django_db

ROUTES = [
    ("get", "/turns", None),
    ("get", "/turns/1", None),
    ("get", "/labels", None),
    ("post", "/labels", {"labels": []}),
    ("post", "/turns/1/labels", {"fact": 1, "relevant": True}),
    ("post", "/fit", {}),
    ("post", "/jobs/1/apply", {}),
]


@pytest.fixture(autouse=True)
def _offline(settings, monkeypatch):
    settings.EMBEDDING_PROVIDER = "none"
    settings.MEMORY_ENQUEUE_TASKS = False
    from tuning import evaluation

    monkeypatch.setattr(evaluation.enqueue, "publish", lambda name, args: None)


@pytest.fixture
def api():
    _, token = issue_token("tuner", ["tuning"])
    return Api(token)


@pytest.fixture
def world():
    return labelled.build(["阿青", "小白"], label=False)


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_a_bot_token_gets_403_naming_the_tuning_scope(method, path, body):
    _, token = issue_token("bot", ["bot"])
    client = Api(token)
    r = client.get(path) if method == "get" else client.post(path, body)
    assert r.status_code == 403 and "'tuning'" in r.json()["detail"]


def test_the_openapi_document_states_the_scope_of_the_new_routes(api):
    doc = api.client.get("/api/openapi.json").json()
    for path, method in [("/api/v1/tuning/turns", "get"), ("/api/v1/tuning/turns/{turn_id}", "get"),
                         ("/api/v1/tuning/labels", "post"), ("/api/v1/tuning/fit", "post")]:
        assert doc["paths"][path][method]["x-token-scope"] == "tuning"


def test_labels_import_refuses_unknown_ids_and_other_persons_facts_and_stores_nothing(api, world):
    (t0, n0, p0), (t1, n1, p1) = world.turns[0], world.turns[1]
    good = {"turn": t0, "fact": world.facts[(n0, p0)], "relevant": True}
    for bad, status in (({"turn": t1, "fact": 999999, "relevant": True}, 404),
                        ({"turn": 999999, "fact": world.facts[(n1, p1)], "relevant": True}, 404),
                        ({"turn": t1, "fact": world.facts[("小白", p1)], "relevant": True}, 409)):
        r = api.post("/labels", {"labels": [good, bad]})
        assert r.status_code == status, r.content
        assert r.json()["errors"][0]["field"].startswith("body.labels.1.")
    assert not RelevanceLabel.objects.exists() and not TuningOperation.objects.exists()
    r = api.post("/labels", {"labels": [{"turn": t0, "fact": True, "relevant": True}]})
    assert r.status_code == 422 and "body.labels.0.fact" in r.json()["detail"]
    assert api.post("/labels", {"labels": [good], "extra": 1}).status_code == 422
    assert not RelevanceLabel.objects.exists()


def test_labels_import_then_export(api, world):
    entries = [{"turn": t, "fact": world.facts[(n, p)], "relevant": True} for t, n, p in world.turns]
    r = api.post("/labels", {"labels": entries})
    assert r.status_code == 200 and r.json() == {"created": 12, "updated": 0, "unchanged": 0, "turns_labelled": 12}
    assert RelevanceLabel.objects.filter(user="api:tuner").count() == 12
    exported = api.get("/labels").json()["labels"]
    assert [(e["turn"], e["fact"], e["relevant"]) for e in exported] == [(e["turn"], e["fact"], True) for e in entries]
    assert [e["turn"] for e in api.get("/labels", turn=world.turns[0][0]).json()["labels"]] == [world.turns[0][0]]


def test_one_label_of_a_turn_set_and_removed(api, world):
    turn_id, name, topic = world.turns[0]
    fact_id = world.facts[(name, topic)]
    r = api.post(f"/turns/{turn_id}/labels", {"fact": fact_id, "relevant": False})
    assert r.status_code == 200 and r.json()["created"] == 1
    assert api.post(f"/turns/{turn_id}/labels", {"fact": fact_id, "relevant": False}).json()["unchanged"] == 1
    assert api.post(f"/turns/{turn_id}/labels", {"fact": fact_id, "relevant": None}).json()["updated"] == 1
    assert not RelevanceLabel.objects.exists()
    assert api.post(f"/turns/{turn_id}/labels", {"fact": 999999, "relevant": True}).status_code == 404
    assert api.post("/turns/999999/labels", {"fact": fact_id, "relevant": True}).status_code == 404
    other = world.facts[("小白", topic)]
    r = api.post(f"/turns/{turn_id}/labels", {"fact": other, "relevant": True})
    assert r.status_code == 409 and "没有这个人" in r.json()["detail"]
    assert not RelevanceLabel.objects.exists()


def test_turns_list_filters_and_one_turn_with_its_inspector_data(api, world):
    turn_id, name, topic = world.turns[0]
    fact_id = world.facts[(name, topic)]
    api.post(f"/turns/{turn_id}/labels", {"fact": fact_id, "relevant": True})
    listed = api.get("/turns").json()
    assert listed["count"] == 12 and listed["turns_labelled"] == 1 and listed["turns"][0]["id"] == world.turns[-1][0]
    assert [t["id"] for t in api.get("/turns", labelled="true").json()["turns"]] == [turn_id]
    assert api.get("/turns", labelled="false").json()["count"] == 11
    assert api.get("/turns", stream=world.streams["阿青"].pk).json()["count"] == 6
    assert api.get("/turns", person=world.persons["小白"]).json()["count"] == 6
    used = api.get("/turns", fact=fact_id).json()["turns"]
    assert turn_id in [t["id"] for t in used] and all(fact_id in t["prompt_fact_ids"] for t in used)
    assert api.get("/turns", limit=0).status_code == 422
    body = api.get(f"/turns/{turn_id}").json()
    assert body["turn"]["id"] == turn_id and body["turn"]["labels"] == 1
    candidate = next(c for c in body["candidates"] if c["fact"] == fact_id)
    assert candidate["verdict"] == "prompt" and candidate["label"]["relevant"] is True
    assert {"lexical", "coverage", "retention", "score", "eligible"} <= set(candidate["terms"])
    assert fact_id in body["prompt"] and body["profile"]["name"] == "default"
    assert body["conversation"][-1]["content"] == f"说说{topic}吧"
    assert api.get("/turns/999999").status_code == 404


def test_a_fit_with_three_labelled_turns_is_a_409_saying_how_many_are_needed(api, world):
    for t, n, p in world.turns[:3]:
        api.post(f"/turns/{t}/labels", {"fact": world.facts[(n, p)], "relevant": True})
    r = api.post("/fit", {"budget": 5})
    assert r.status_code == 409
    body = r.json()
    assert (body["needed"], body["have"]) == (30, 3) and "至少 30 个回合" in body["detail"]
    assert not Job.objects.filter(kind="fit").exists()
    assert api.post("/fit", {"budget": 0}).status_code == 422
    assert api.post("/fit", {"budget": 5, "streams": [999999]}).status_code == 404


def test_a_fit_is_queued_polled_and_applied(api):
    labelled.build()
    r = api.post("/fit", {"budget": 2, "k": 5})
    assert r.status_code == 202, r.content
    job_id = r.json()["job_id"]
    assert api.post(f"/jobs/{job_id}/apply", {}).status_code == 409  # not run yet
    from tuning import fit
    from tuning.evaluation import QueryVectors

    assert fit.run_fit_job(job_id, vectors=QueryVectors(None))
    done = api.get(f"/jobs/{job_id}").json()
    assert done["status"] == "done" and done["result"]["k"] == 5 and done["result"]["split"]["heldout_turns"] == 12
    r = api.post(f"/jobs/{job_id}/apply", {"name": "fitted"})
    assert r.status_code == 200 and r.json()["profile"] == "fitted"
    assert api.get().json()["active"]["profile"] == "fitted"
    assert api.post("/jobs/999999/apply", {}).status_code == 404
