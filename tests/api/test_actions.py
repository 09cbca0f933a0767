"""POST /api/v1/actions/recall and /actions/inspect."""
from __future__ import annotations

import pytest

from memory.models import Fact, MemoryEdge, Message

from .conftest import T0, person, stream

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(api):
    out = {}
    for content, kind in [("养了一只橘猫叫年糕", "事件"), ("喜欢喝乌龙茶", "偏好"), ("住在杭州", "身份")]:
        out[content] = api.post("facts", {"person": person(), "kind": kind, "content": content, "at": T0}).json()["fact_id"]
    for i, text in enumerate(["我家橘猫今天又胖了", "下午去西湖散步", "晚上喝了乌龙茶"]):
        api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": text, "at": T0 + i})
    return out


def test_recall_returns_facts_without_reinforcement(api, seeded):
    before = list(Fact.objects.order_by("id").values_list("strength", "hit_count", "updated_at"))
    r = api.post("actions/recall", {"stream": stream(), "speaker": person(), "query": "橘猫 乌龙茶", "at": T0 + 1000})
    assert r.status_code == 200, r.content
    body = r.json()
    assert set(body) >= {"facts", "episodes", "spread", "observation"}
    ids = {f["id"] for f in body["facts"]}
    assert {seeded["养了一只橘猫叫年糕"], seeded["喜欢喝乌龙茶"]} <= ids
    assert "橘猫" in body["observation"]
    assert list(Fact.objects.order_by("id").values_list("strength", "hit_count", "updated_at")) == before
    # adopted items are linked in the association graph
    assert MemoryEdge.objects.exists()


def test_recall_with_hops_spreads(api, seeded):
    api.post("actions/recall", {"stream": stream(), "speaker": person(), "query": "橘猫 乌龙茶", "at": T0 + 1000})
    r = api.post("actions/recall", {"stream": stream(), "speaker": person(), "query": "橘猫", "hops": 2, "at": T0 + 2000})
    assert r.status_code == 200
    for hit in r.json()["spread"]:
        assert set(hit) == {"kind", "id", "content", "score", "hops"}


def test_recall_validation(api, seeded):
    r = api.post("actions/recall", {"stream": stream(), "speaker": person(), "query": "猫", "hops": 9})
    assert r.status_code == 422 and "body.hops" in r.json()["detail"]
    r = api.post("actions/recall", {"stream": stream(), "query": "猫"})
    assert r.status_code == 422 and "body.speaker" in r.json()["detail"]


def test_inspect(api, seeded):
    r = api.post("actions/inspect", {"stream": stream(), "query": "乌龙茶"})
    assert r.status_code == 200
    messages = r.json()["messages"]
    assert [m["content"] for m in messages] == ["晚上喝了乌龙茶"]
    assert set(messages[0]) >= {"id", "role", "person_id", "content", "at"}
    last = Message.objects.get(content="晚上喝了乌龙茶")
    before = api.post("actions/inspect", {"stream": stream(), "query": "乌龙茶", "before_message_id": last.pk})
    assert before.json()["messages"] == []
    assert api.post("actions/inspect", {"stream": stream(ext="other"), "query": "乌龙茶"}).json()["messages"] == []


def test_inspect_errors(api, seeded):
    r = api.post("actions/inspect", {"stream": stream(), "query": "猫", "before_message_id": 99999})
    assert r.status_code == 404
    assert api.post("actions/inspect", {"stream": stream(), "query": "猫", "limit": 0}).status_code == 422
    assert api.post("actions/inspect", {"stream": stream(), "query": "%_\\"}).status_code == 200


def test_inspect_ranks_by_bm25(api):
    def post(text, i):
        r = api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": text, "at": T0 + i})
        return r.json()["id"]

    rare = post("昨天喝了乌龙茶", 0)
    common = [post(f"我们去吃饭吧 {i}", i + 1) for i in range(6)]
    # one query term each: the rare term wins (a word-count ranking would tie and take the newest)
    r = api.post("actions/inspect", {"stream": stream(), "query": "吃饭 乌龙茶", "limit": 1})
    assert r.status_code == 200, r.content
    assert [m["id"] for m in r.json()["messages"]] == [rare]
    body = api.post("actions/inspect", {"stream": stream(), "query": "吃饭 乌龙茶", "limit": 3}).json()["messages"]
    assert [m["id"] for m in body] == [rare, common[-2], common[-1]]  # chronological; ties: newer first
    scores = {m["id"]: m["score"] for m in body}
    assert scores[rare] > scores[common[-1]] == scores[common[-2]] > 0
    # FTS syntax in the query is plain text
    assert api.post("actions/inspect", {"stream": stream(), "query": 'stream : "s1" OR 吃饭*'}).status_code == 200
