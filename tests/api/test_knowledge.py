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
