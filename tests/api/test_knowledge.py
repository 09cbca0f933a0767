"""POST /api/v1/knowledge, knowledge imports and the consult action."""
from __future__ import annotations

import pytest

from memory.models import Knowledge

from .conftest import T0

pytestmark = pytest.mark.django_db


def test_add_knowledge_201_then_200_same_id(api):
    r = api.post("knowledge", {"content": "乌龙茶是半发酵茶。", "source": "manual", "at": T0})
    assert r.status_code == 201, r.content
    kid = r.json()["id"]
    row = Knowledge.objects.get(pk=kid)
    assert row.source == "manual" and row.created_at == T0
    again = api.post("knowledge", {"content": "乌龙茶是半发酵茶。"})
    assert again.status_code == 200 and again.json() == {"id": kid, "created": False}
    assert Knowledge.objects.count() == 1


def test_add_knowledge_validation(api):
    assert api.post("knowledge", {"content": "  "}).status_code == 422
    assert api.post("knowledge", {"content": "……"}).status_code == 422
    r = api.post("knowledge", {"source": "x"})
    assert r.status_code == 422 and "body.content" in r.json()["detail"]
    assert not Knowledge.objects.exists()


def test_import_starts_job_then_runs(api):
    from memory import pipeline

    text = "乌龙茶是半发酵茶。\n\n龙井是绿茶。\n\n普洱是黑茶。"
    r = api.post("knowledge/imports", {"text": text, "origin_name": "tea.txt"})
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["status"] == "queued" and body["batch_id"] and body["total"] == 3
    pipeline.run_import(job_id=body["job_id"], embed=False)
    done = api.get(f"knowledge/imports/{body['job_id']}").json()
    assert done["status"] == "done" and done["batch_id"] == body["batch_id"]
    assert Knowledge.objects.filter(import_batch_id=body["batch_id"]).count() == 3
    assert "text" not in done["result"]


def test_second_import_while_running_is_409(api):
    assert api.post("knowledge/imports", {"text": "第一批。", "origin_name": "a"}).status_code == 202
    r = api.post("knowledge/imports", {"text": "第二批。", "origin_name": "b"})
    assert r.status_code == 409 and r.json()["detail"]


def test_import_validation(api):
    r = api.post("knowledge/imports", {"text": "x" * 200_001})
    assert r.status_code == 422 and "200000" in r.json()["detail"]
    assert api.post("knowledge/imports", {"text": " \n\n "}).status_code == 422
    r = api.post("knowledge/imports", {"origin_name": "a"})
    assert r.status_code == 422 and "body.text" in r.json()["detail"]
    assert api.post("knowledge/imports", {"text": "x", "kind": "zip"}).status_code == 422
    assert api.get("knowledge/imports/999999").status_code == 404


def test_consult(api):
    api.post("knowledge", {"content": "乌龙茶是半发酵茶。"})
    api.post("knowledge", {"content": "龙井是绿茶。"})
    r = api.post("actions/consult", {"query": "乌龙茶", "at": T0})
    assert r.status_code == 200
    hits = r.json()["knowledge"]
    assert hits and hits[0]["content"] == "乌龙茶是半发酵茶。" and set(hits[0]) == {"id", "content", "score"}
    row = Knowledge.objects.get(pk=hits[0]["id"])
    assert row.hit_count == 1 and row.last_hit_at == T0
    assert api.post("actions/consult", {"query": "x", "limit": 0}).status_code == 422
    assert api.post("actions/consult", {}).status_code == 422
    assert api.post("actions/consult", {"query": "AND OR NOT \"(*"}).status_code == 200
