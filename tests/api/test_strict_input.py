"""Request bodies are strict and every instant is bounded (issue 11, items 4 and 7).

JSON ``true`` is no integer, ``"123"`` no epoch, ``1`` no boolean: each is a 422 that
names the field, and nothing is written. Query parameters are strings by nature and are
still parsed, within their bounds. Every epoch-ms input stops before the year 9000, so
whatever the console derives from it stays a date every page can show.
"""
from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client

from memory.api.schemas import MAX_EPOCH_MS
from memory.models import Fact, FactOperation, Knowledge, Message

from .conftest import T0, person, stream

pytestmark = pytest.mark.django_db

LOCAL_OVERFLOW_MS = 253_402_272_000_000  # NOTES.md: fromtimestamp in Asia/Shanghai fails from here


def _fact(api, content: str = "我喜欢喝乌龙茶", **kw) -> int:
    r = api.post("facts", {"person": person(), "kind": "偏好", "content": content, "at": T0, **kw})
    assert r.status_code == 201, r.content
    return r.json()["fact_id"]


def _assert_422(r, field: str) -> None:
    assert r.status_code == 422, (r.status_code, r.content)
    body = r.json()
    assert field in [e["field"] for e in body["errors"]], body
    assert field in body["detail"]


@pytest.mark.parametrize("value", [True, False, "123", 12.5, "1700000000000", [T0], {"ms": T0}])
def test_at_must_be_a_json_integer(api, value):
    r = api.post("messages", {"stream": stream(), "role": "assistant", "content": "x", "at": value})
    _assert_422(r, "body.at")
    assert not Message.objects.exists()


def test_invalidate_with_at_false_writes_no_journal_entry(api):
    fact_id = _fact(api)
    r = api.post(f"facts/{fact_id}/invalidate", {"at": False})
    _assert_422(r, "body.at")
    assert not FactOperation.objects.filter(op="invalidate").exists()
    assert Fact.objects.get(pk=fact_id).superseded_by_id is None


def test_integers_and_booleans_of_every_body_are_strict(api):
    base = {"stream": stream(), "speaker": person(), "query": "猫"}
    _assert_422(api.post("actions/recall", {**base, "hops": True}), "body.hops")
    _assert_422(api.post("actions/recall", {**base, "hops": "1"}), "body.hops")
    _assert_422(api.post("actions/recall", {**base, "cross_person": 1}), "body.cross_person")
    _assert_422(api.post("actions/recall", {**base, "cross_person": "true"}), "body.cross_person")
    _assert_422(api.post("actions/inspect", {"stream": stream(), "query": "猫", "limit": "5"}), "body.limit")
    _assert_422(api.post("actions/consult", {"query": "猫", "limit": True}), "body.limit")
    _assert_422(api.post("turns", {"stream": stream(), "speaker": person(), "text": "x", "watermark_message_id": "1"}),
                "body.watermark_message_id")
    _assert_422(api.post("turns/1/confirm", {"query_embedding": [True, 0.5]}), "body.query_embedding.0")
    _assert_422(api.post("facts", {"person": person(), "kind": "偏好", "content": "喜欢猫", "supersedes": "1"}),
                "body.supersedes")
    _assert_422(api.post("knowledge", {"content": "乌龙茶是半发酵茶", "at": "0"}), "body.at")
    _assert_422(api.post("conflicts/resolve", {"keep_fact_id": True, "drop_fact_id": 2}), "body.keep_fact_id")
    _assert_422(api.post("tuning/evaluate", {"max_turns": "10"}), "body.max_turns")
    _assert_422(api.post("tuning/compare", {"a": {}, "b": {}, "max_turns": True}), "body.max_turns")
    assert not Knowledge.objects.exists()


def test_json_integers_and_floats_still_pass(api):
    """Strictness refuses coercion, not numbers: ``5.0`` is the JSON integer 5 (JSON Schema's
    ``integer`` admits it) and an integer embedding component is a float."""
    r = api.post("messages", {"stream": stream(), "role": "assistant", "content": "x", "at": float(T0)})
    assert r.status_code == 201
    assert Message.objects.get().created_at == T0
    assert api.post("actions/inspect", {"stream": stream(), "query": "x", "limit": 5.0}).status_code == 200
    r = api.post("turns", {"stream": stream(), "speaker": person(), "text": "你好", "at": T0 + 1})
    assert r.status_code == 200
    r = api.post(f"turns/{r.json()['turn_id']}/confirm", {"query_embedding": [1, 0.5, 0], "at": T0 + 2})
    assert r.status_code == 200


def test_query_parameters_are_parsed_but_bounded(api):
    fact_id = _fact(api)
    person_id = Fact.objects.get(pk=fact_id).person_id
    assert api.get("operations", limit="5").status_code == 200
    _assert_422(api.get("operations", limit="500"), "query.limit")
    r = api.get(f"persons/{person_id}/facts", at=str(T0 + 1000))
    assert r.status_code == 200 and r.json()["at"] == T0 + 1000
    _assert_422(api.get(f"persons/{person_id}/facts", at=str(MAX_EPOCH_MS + 1)), "query.at")
    _assert_422(api.get("conflicts", at=str(LOCAL_OVERFLOW_MS)), "query.at")


def test_the_epoch_bound_is_a_date_every_page_can_show():
    # years of decay (a 身份 fact freezes ~3.3 years after its last touch) and any UTC offset stay printable
    last = dt.datetime.fromtimestamp((MAX_EPOCH_MS + 10 * 365 * 86_400_000) / 1000, tz=dt.UTC)
    assert last.astimezone(dt.timezone(dt.timedelta(hours=14))).year < 9999
    assert MAX_EPOCH_MS < LOCAL_OVERFLOW_MS


@pytest.mark.parametrize(
    "path,body",
    [
        ("messages", {"stream": stream(), "role": "assistant", "content": "x"}),
        ("turns", {"stream": stream(), "speaker": person(), "text": "x"}),
        ("turns/1/confirm", {}),
        ("actions/recall", {"stream": stream(), "speaker": person(), "query": "x"}),
        ("actions/consult", {"query": "x"}),
        ("facts", {"person": person(), "kind": "偏好", "content": "喜欢猫"}),
        ("knowledge", {"content": "乌龙茶是半发酵茶"}),
        ("facts/1/pin", {}),
        ("facts/1/replace", {"content": "喜欢狗"}),
        ("conflicts/resolve", {"keep_fact_id": 1, "drop_fact_id": 2}),
        ("operations/1/undo", {}),
    ],
)
def test_far_future_at_is_422_on_every_route(api, path, body):
    # the value of the issue: schema-valid before, and the console's pages 500 on it
    r = api.post(path, {**body, "at": 253_402_300_799_999})
    _assert_422(r, "body.at")
    assert api.post(path, {**body, "at": MAX_EPOCH_MS + 1}).status_code == 422


def test_the_schema_states_the_bounds_and_strictness(db):
    spec = Client().get("/api/openapi.json").json()
    schemas = spec["components"]["schemas"]
    at = schemas["MessageIn"]["properties"]["at"]["anyOf"][0]
    assert at["type"] == "integer" and at["minimum"] == 0 and at["maximum"] == MAX_EPOCH_MS
    assert schemas["MessageIn"]["additionalProperties"] is False
    params = spec["paths"]["/api/v1/persons/{person_id}/facts"]["get"]["parameters"]
    query_at = next(p for p in params if p["name"] == "at")["schema"]
    assert MAX_EPOCH_MS in [s.get("maximum") for s in query_at.get("anyOf", [query_at])]
