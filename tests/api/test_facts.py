"""POST /api/v1/facts and GET /api/v1/persons/{id}/facts."""
from __future__ import annotations

import pytest

from memory.models import Fact, Person

from .conftest import T0, person, stream

pytestmark = pytest.mark.django_db

HOUR = 3_600_000


def add(api, content, **kw):
    body = {"person": person(), "kind": kw.pop("kind", "偏好"), "content": content, "at": kw.pop("at", T0), **kw}
    return api.post("facts", body)


def test_new_fact_is_201_then_similar_is_200_reinforced(api):
    r = add(api, "喜欢喝乌龙茶")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["created"] is True and body["conflict_with"] == [] and body["superseded"] is None
    fact = Fact.objects.get(pk=body["fact_id"])
    assert fact.person_id == body["person_id"] and fact.kind == "偏好" and fact.origin_kind == "legacy"
    again = add(api, "喜欢喝乌龙茶", at=T0 + HOUR)
    assert again.status_code == 200
    assert again.json()["fact_id"] == body["fact_id"] and again.json()["created"] is False
    assert Fact.objects.count() == 1
    assert Fact.objects.get(pk=body["fact_id"]).hit_count == 1


def test_stream_kind_sets_origin_and_promotion_is_reported(api):
    r = add(api, "住在杭州", kind="身份", stream_kind="direct")
    assert Fact.objects.get(pk=r.json()["fact_id"]).origin_kind == "direct"
    again = add(api, "住在杭州", kind="身份", stream_kind="group")
    assert again.json()["origin_promoted"] is True
    assert Fact.objects.get(pk=r.json()["fact_id"]).origin_kind == "group"
    desk = add(api, "养了一只狗", stream_kind="desktop")
    assert Fact.objects.get(pk=desk.json()["fact_id"]).origin_kind == "direct"


def test_slot_conflict_is_reported_not_resolved(api):
    a = add(api, "住在杭州", kind="身份", slot="居住地").json()
    b = add(api, "住在上海", kind="身份", slot="居住地").json()
    assert b["created"] and b["conflict_with"] == [a["fact_id"]]
    assert Fact.objects.get(pk=a["fact_id"]).superseded_by_id is None


def test_supersedes(api):
    a = add(api, "在读大三", kind="状态").json()
    b = add(api, "已经毕业工作了", kind="状态", supersedes=a["fact_id"]).json()
    assert b["superseded"] == a["fact_id"]
    assert Fact.objects.get(pk=a["fact_id"]).superseded_by_id == b["fact_id"]


def test_supersedes_unknown_fact_is_404_and_writes_nothing(api):
    persons = Person.objects.count()
    r = add(api, "新事实", supersedes=987654)
    assert r.status_code == 404 and "987654" in r.json()["detail"]
    assert not Fact.objects.exists() and Person.objects.count() == persons


def test_fact_validation(api):
    assert add(api, "   ").status_code == 422
    assert add(api, "！！！").status_code == 422
    r = api.post("facts", {"person": person(), "content": "x"})
    assert r.status_code == 422 and "body.kind" in r.json()["detail"]
    r = add(api, "x" * 2001)
    assert r.status_code == 422 and "body.content" in r.json()["detail"]
    r = add(api, "ok", stream_kind="channel")
    assert r.status_code == 422 and "body.stream_kind" in r.json()["detail"]
    assert not Fact.objects.exists()


def test_person_facts_lists_decay_state(api):
    a = add(api, "喜欢猫", kind="偏好").json()
    b = add(api, "今天很累", kind="状态").json()
    pid = a["person_id"]
    r = api.get(f"persons/{pid}/facts", at=T0 + 12 * HOUR)
    assert r.status_code == 200
    body = r.json()
    assert body["person_id"] == pid and body["at"] == T0 + 12 * HOUR
    rows = {f["id"]: f for f in body["facts"]}
    assert list(rows) == [a["fact_id"], b["fact_id"]]
    state = rows[b["fact_id"]]
    assert state["half_life_hours"] == 12 and state["retention"] == pytest.approx(0.5)
    assert state["strength"] == 1.0 and state["active"] is True and state["invalid"] is False
    assert state["pinned"] is False and state["superseded_by"] is None and state["hit_count"] == 0
    for key in ("due_at", "slot", "origin_kind", "kind", "content", "updated_at", "created_at", "last_hit_at"):
        assert key in state
    # deterministic under the same `at`
    assert api.get(f"persons/{pid}/facts", at=T0 + 12 * HOUR).json() == body


def test_person_facts_hides_invalid_unless_asked(api):
    a = add(api, "在读大三", kind="状态").json()
    b = add(api, "已经毕业", kind="状态", supersedes=a["fact_id"]).json()
    pid = a["person_id"]
    ids = [f["id"] for f in api.get(f"persons/{pid}/facts", at=T0).json()["facts"]]
    assert ids == [b["fact_id"]]
    rows = api.get(f"persons/{pid}/facts", at=T0, include_invalid="true").json()["facts"]
    assert [f["id"] for f in rows] == [a["fact_id"], b["fact_id"]]
    assert rows[0]["invalid"] is True and rows[0]["superseded_by"] == b["fact_id"]


def test_person_facts_unknown_person_is_404(api):
    r = api.get("persons/999999/facts")
    assert r.status_code == 404 and "999999" in r.json()["detail"]


def test_source_message_is_recorded_and_an_unknown_one_is_404(api):
    posted = api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "at": T0,
                                   "content": "我上周末去西湖边跑了十公里"}).json()
    r = add(api, "周末在西湖跑步", kind="事件", source_message_id=posted["id"])
    assert r.status_code == 201, r.content
    assert Fact.objects.get(pk=r.json()["fact_id"]).source_message_id == posted["id"]
    persons = Person.objects.count()
    missing = add(api, "另一件事", source_message_id=987654)
    assert missing.status_code == 404 and "message 987654" in missing.json()["detail"]
    assert Fact.objects.count() == 1 and Person.objects.count() == persons
    assert add(api, "还有一件事", source_message_id=0).status_code == 422
