"""Curation routes: pin/unpin/invalidate/restore/replace, conflicts, operations, undo."""
from __future__ import annotations

import pytest

from memory.models import Fact, FactOperation

from .conftest import T0, person

pytestmark = pytest.mark.django_db

HOUR = 3_600_000
DECAY = ("strength", "half_life_hours", "updated_at", "due_at", "active")


def add(api, content, kind="偏好", slot="", who="u1"):
    r = api.post("facts", {"person": person(ext=who), "kind": kind, "slot": slot, "content": content, "at": T0})
    assert r.status_code == 201, r.content
    return r.json()


def decay_state(fid):
    return Fact.objects.filter(pk=fid).values(*DECAY, "superseded_by").get()


def test_pin_unpin_and_undo(api):
    f = add(api, "喜欢喝乌龙茶")["fact_id"]
    before = decay_state(f)
    r = api.post(f"facts/{f}/pin", {"at": T0 + HOUR})
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["ok"] is True and body["fact_id"] == f
    op = FactOperation.objects.get(pk=body["operation_id"])
    assert op.op == "pin" and op.user == "api:test-bot" and op.at == T0 + HOUR
    assert Fact.objects.get(pk=f).pinned
    again = api.post(f"facts/{f}/pin")
    assert again.status_code == 409 and again.json()["detail"]
    assert api.post(f"facts/{f}/unpin").status_code == 200
    assert not Fact.objects.get(pk=f).pinned
    assert api.post(f"facts/{f}/unpin").status_code == 409
    # undo the pin after the unpin: writes the pin's prev back exactly
    u = api.post(f"operations/{body['operation_id']}/undo", {"at": T0 + 2 * HOUR})
    assert u.status_code == 200 and u.json()["undo_of"] == body["operation_id"]
    assert decay_state(f) == before


def test_pin_of_frozen_fact_is_409(api):
    f = add(api, "今天很累", kind="状态")["fact_id"]
    Fact.objects.filter(pk=f).update(active=False)
    r = api.post(f"facts/{f}/pin")
    assert r.status_code == 409
    assert not FactOperation.objects.exists()


def test_invalidate_restore_undo_twice(api):
    f = add(api, "住在杭州", kind="身份")["fact_id"]
    before = decay_state(f)
    inv = api.post(f"facts/{f}/invalidate")
    assert inv.status_code == 200
    assert Fact.objects.get(pk=f).superseded_by_id == f
    assert api.post(f"facts/{f}/invalidate").status_code == 409
    op = inv.json()["operation_id"]
    assert api.post(f"operations/{op}/undo").status_code == 200
    assert decay_state(f) == before
    twice = api.post(f"operations/{op}/undo")
    assert twice.status_code == 409 and twice.json()["detail"]
    assert api.post(f"facts/{f}/restore").status_code == 409  # already valid
    api.post(f"facts/{f}/invalidate")
    assert api.post(f"facts/{f}/restore").status_code == 200
    assert Fact.objects.get(pk=f).superseded_by_id is None


def test_undo_of_undo_is_409_and_unknown_is_404(api):
    f = add(api, "住在杭州", kind="身份")["fact_id"]
    op = api.post(f"facts/{f}/invalidate").json()["operation_id"]
    undo_id = api.post(f"operations/{op}/undo").json()["operation_id"]
    assert api.post(f"operations/{undo_id}/undo").status_code == 409
    assert api.post("operations/999999/undo").status_code == 404


def test_unknown_fact_is_404(api):
    for action in ("pin", "unpin", "invalidate", "restore"):
        r = api.post(f"facts/999999/{action}")
        assert r.status_code == 404, action
        assert r.json()["detail"]
    assert api.post("facts/999999/replace", {"content": "新的"}).status_code == 404


def test_replace(api):
    f = add(api, "在读大三", kind="状态", slot="学业")["fact_id"]
    r = api.post(f"facts/{f}/replace", {"content": "已经毕业工作了", "at": T0 + HOUR})
    assert r.status_code == 200, r.content
    body = r.json()
    new = Fact.objects.get(pk=body["new_fact_id"])
    assert new.content == "已经毕业工作了" and new.slot == "学业" and new.kind == "状态"
    assert Fact.objects.get(pk=f).superseded_by_id == new.pk
    assert FactOperation.objects.get(pk=body["operation_id"]).op == "replace"
    # replacing an invalid fact → 409; blank → 422; same meaning → 422
    assert api.post(f"facts/{f}/replace", {"content": "另一个说法"}).status_code == 409
    assert api.post(f"facts/{new.pk}/replace", {"content": "   "}).status_code == 422
    assert api.post(f"facts/{new.pk}/replace", {"content": "！！"}).status_code == 422
    assert api.post(f"facts/{new.pk}/replace", {"content": "已经毕业工作了。"}).status_code == 422
    r = api.post(f"facts/{new.pk}/replace", {})
    assert r.status_code == 422 and "body.content" in r.json()["detail"]
    # undo the replace: the old row is valid again and the new row self-invalidated (not deleted)
    assert api.post(f"operations/{body['operation_id']}/undo").status_code == 200
    assert Fact.objects.get(pk=f).superseded_by_id is None
    assert Fact.objects.get(pk=new.pk).superseded_by_id == new.pk


def test_conflicts_and_resolve(api):
    a = add(api, "住在杭州", kind="身份", slot="居住地")
    b = add(api, "住在上海", kind="身份", slot="居住地")
    add(api, "住在北京", kind="身份", slot="居住地", who="u2")
    pid = a["person_id"]
    r = api.get("conflicts", person_id=pid, at=T0)
    assert r.status_code == 200
    groups = r.json()["groups"]
    assert len(groups) == 1
    g = groups[0]
    assert g["person_id"] == pid and g["slot"] == "居住地"
    assert [m["id"] for m in g["members"]] == [a["fact_id"], b["fact_id"]]
    assert set(g["members"][0]) >= {"id", "kind", "content", "origin_kind", "retention", "strength",
                                    "half_life_hours", "updated_at"}
    assert len(api.get("conflicts").json()["groups"]) == 1  # u2 has one member only
    assert api.get("conflicts", person_id=999999).status_code == 404
    res = api.post("conflicts/resolve", {"keep_fact_id": b["fact_id"], "drop_fact_id": a["fact_id"]})
    assert res.status_code == 200 and res.json()["ok"] is True
    assert Fact.objects.get(pk=a["fact_id"]).superseded_by_id == a["fact_id"]
    assert api.get("conflicts", person_id=pid).json()["groups"] == []
    # resolving again: the dropped fact is no longer a valid member
    again = api.post("conflicts/resolve", {"keep_fact_id": b["fact_id"], "drop_fact_id": a["fact_id"]})
    assert again.status_code == 409


def test_resolve_errors(api):
    a = add(api, "住在杭州", kind="身份", slot="居住地")
    other = add(api, "喜欢猫", kind="偏好", slot="宠物")
    same = api.post("conflicts/resolve", {"keep_fact_id": a["fact_id"], "drop_fact_id": a["fact_id"]})
    assert same.status_code == 422 and same.json()["detail"]
    assert api.post("conflicts/resolve", {"keep_fact_id": a["fact_id"], "drop_fact_id": 999999}).status_code == 404
    assert api.post("conflicts/resolve", {"keep_fact_id": a["fact_id"], "drop_fact_id": other["fact_id"]}).status_code == 422
    r = api.post("conflicts/resolve", {"keep_fact_id": a["fact_id"]})
    assert r.status_code == 422 and "body.drop_fact_id" in r.json()["detail"]


def test_keep_all_takes_every_member_out_of_the_conflict_and_undoes_one_by_one(api):
    a = add(api, "住在杭州", kind="身份", slot="居住地")
    b = add(api, "住在上海", kind="身份", slot="居住地")
    pid = a["person_id"]
    stale = api.post("conflicts/keep-all", {"fact_id": a["fact_id"], "member_ids": [a["fact_id"]]})
    assert stale.status_code == 409 and Fact.objects.get(pk=a["fact_id"]).slot == "居住地"  # nothing changed
    res = api.post("conflicts/keep-all", {"fact_id": a["fact_id"], "member_ids": [a["fact_id"], b["fact_id"]]})
    assert res.status_code == 200, res.json()
    body = res.json()
    assert body["ok"] is True and sorted(body["fact_ids"]) == sorted([a["fact_id"], b["fact_id"]])
    assert len(body["operation_ids"]) == 2
    assert api.get("conflicts", person_id=pid).json()["groups"] == []
    for fid in (a["fact_id"], b["fact_id"]):  # both still valid, out of the slot
        fact = Fact.objects.get(pk=fid)
        assert fact.superseded_by_id is None and fact.slot == ""
    assert api.post("conflicts/keep-all", {"fact_id": a["fact_id"]}).status_code == 409  # no group any more
    assert api.post("conflicts/keep-all", {"fact_id": 999999}).status_code == 404
    assert api.post("conflicts/keep-all", {}).status_code == 422
    assert api.post(f"operations/{body['operation_ids'][0]}/undo").status_code == 200
    assert sorted([Fact.objects.get(pk=a["fact_id"]).slot, Fact.objects.get(pk=b["fact_id"]).slot]) == ["", "居住地"]


def test_operations_log(api):
    a = add(api, "住在杭州", kind="身份")
    b = add(api, "喜欢猫", who="u2")
    op1 = api.post(f"facts/{a['fact_id']}/invalidate", {"at": T0 + 1}).json()["operation_id"]
    op2 = api.post(f"facts/{b['fact_id']}/pin", {"at": T0 + 2}).json()["operation_id"]
    api.post(f"operations/{op1}/undo", {"at": T0 + 3})
    ops = api.get("operations").json()["operations"]
    assert [o["op"] for o in ops] == ["undo", "pin", "invalidate"]
    first = ops[2]
    assert first["id"] == op1 and first["fact_id"] == a["fact_id"] and first["fact_content"] == "住在杭州"
    assert first["undone_by"] == ops[0]["id"] and ops[0]["undo_of"] == op1
    assert first["prev"] == {"superseded_by": None} and first["actor"] == "manual"
    assert [o["id"] for o in api.get("operations", person_id=b["person_id"]).json()["operations"]] == [op2]
    assert len(api.get("operations", fact_id=a["fact_id"]).json()["operations"]) == 2
    assert len(api.get("operations", limit=1).json()["operations"]) == 1
    r = api.get("operations", limit=0)
    assert r.status_code == 422 and "query.limit" in r.json()["detail"]
    assert api.get("operations", limit=500).status_code == 422
