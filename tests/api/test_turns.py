"""POST /api/v1/turns and /turns/{id}/confirm."""
from __future__ import annotations

import time

import pytest
from django.test import override_settings

from memory.models import Fact, Message, Person, PipelineEvent, Stream, Turn
from tests.providers.conftest import Reply

from .conftest import T0, person, stream

pytestmark = pytest.mark.django_db

FACTS = [
    ("喜欢喝乌龙茶", "偏好", ""),
    ("住在杭州", "身份", "居住地"),
    ("住在上海", "身份", "居住地"),
    ("养了一只橘猫叫年糕", "事件", ""),
    ("每天早上跑步", "习惯", ""),
]
DECAY_FIELDS = ("strength", "hit_count", "updated_at", "due_at", "active", "last_hit_at", "half_life_hours")


def snapshot():
    return {f["id"]: tuple(f[k] for k in DECAY_FIELDS) for f in Fact.objects.values("id", *DECAY_FIELDS)}


@pytest.fixture
def seeded(api):
    ids = []
    for content, kind, slot in FACTS:
        r = api.post("facts", {"person": person(), "kind": kind, "slot": slot, "content": content, "at": T0})
        ids.append(r.json()["fact_id"])
    api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": "早上好", "at": T0 + 1})
    api.post("messages", {"stream": stream(), "role": "assistant", "content": "早上好呀", "at": T0 + 2})
    return ids


def turn(api, text, at=T0 + 10_000, **kw):
    return api.post("turns", {"stream": stream(), "speaker": person(), "text": text, "at": at, **kw})


def test_turn_returns_context(api, seeded):
    r = turn(api, "你还记得我喜欢喝什么茶吗")
    assert r.status_code == 200, r.content
    body = r.json()
    assert set(body) >= {"turn_id", "working_memory", "facts", "episodes"}
    assert Turn.objects.filter(pk=body["turn_id"]).exists()
    assert [m["content"] for m in body["working_memory"]] == ["早上好", "早上好呀"]
    wm = body["working_memory"][0]
    assert set(wm) == {"id", "role", "person_id", "content", "at"} and wm["at"] == T0 + 1 and wm["role"] == "user"
    assert body["facts"][0]["id"] == seeded[0]
    fact = body["facts"][0]
    assert set(fact) >= {"id", "person_id", "kind", "slot", "content", "retention", "score", "conflict_slot"}
    assert fact["content"] == "喜欢喝乌龙茶" and 0 < fact["retention"] <= 1 and fact["score"] > 0
    assert body["episodes"] == []


def test_turn_records_trace(api, seeded):
    body = turn(api, "乌龙茶").json()
    trace = PipelineEvent.objects.get(kind="memory_retrieval_trace", turn_id=body["turn_id"])
    assert trace.at == T0 + 10_000
    assert seeded[0] in [c["factId"] for c in trace.payload["candidatePool"]]


def test_turn_is_read_only_for_facts(api, seeded):
    before = snapshot()
    body = turn(api, "乌龙茶 杭州 橘猫 跑步").json()
    assert body["facts"]
    assert snapshot() == before


def test_conflict_groups_are_completed(api, seeded):
    body = turn(api, "你住在杭州吗").json()
    by_id = {f["id"]: f for f in body["facts"]}
    assert seeded[1] in by_id and seeded[2] in by_id
    assert by_id[seeded[1]]["conflict_slot"] == "居住地" and by_id[seeded[2]]["conflict_slot"] == "居住地"


def test_same_at_same_answer(api, seeded):
    a = turn(api, "你还记得我的猫和茶吗", at=T0 + 50_000).json()
    b = turn(api, "你还记得我的猫和茶吗", at=T0 + 50_000).json()
    assert a["turn_id"] != b["turn_id"]
    a.pop("turn_id"), b.pop("turn_id")
    assert a == b


def test_later_at_lowers_retention(api, seeded):
    early = turn(api, "每天早上跑步", at=T0 + 1000).json()["facts"][0]
    late = turn(api, "每天早上跑步", at=T0 + 1000 + 24 * 3_600_000 * 30).json()["facts"][0]
    assert early["id"] == late["id"] and late["retention"] < early["retention"]


def test_watermark_fixes_snapshot(api, seeded):
    first, reply = Message.objects.order_by("id")
    later = api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": "在吗", "at": T0 + 3})
    body = turn(api, "早上", watermark_message_id=first.pk).json()
    # user messages stored after the watermark are left out; assistant rows stay
    assert [m["id"] for m in body["working_memory"]] == [first.pk, reply.pk]
    assert later.json()["id"] not in [m["id"] for m in turn(api, "早上", watermark_message_id=first.pk).json()["working_memory"]]
    assert later.json()["id"] in [m["id"] for m in turn(api, "早上").json()["working_memory"]]


def test_watermark_unknown_is_404(api, seeded):
    r = turn(api, "早上", watermark_message_id=99999)
    assert r.status_code == 404 and "99999" in r.json()["detail"]
    # a message of another stream is not a watermark here, and the new stream is not created
    other = Message.objects.first().pk
    streams, persons = Stream.objects.count(), Person.objects.count()
    r = api.post("turns", {"stream": stream(ext="new"), "speaker": person(ext="new"), "text": "x",
                           "watermark_message_id": other})
    assert r.status_code == 404
    assert (Stream.objects.count(), Person.objects.count()) == (streams, persons)
    assert not Turn.objects.exists()


def test_turn_validation(api, seeded):
    r = api.post("turns", {"stream": stream(), "text": "x"})
    assert r.status_code == 422 and "body.speaker" in r.json()["detail"]
    r = api.post("turns", {"stream": stream(), "speaker": person(), "text": None})
    assert r.status_code == 422 and "body.text" in r.json()["detail"]
    assert not Turn.objects.exists()


def test_confirm_reinforces_exactly_the_returned_facts(api, seeded):
    tid = turn(api, "乌龙茶 橘猫").json()["turn_id"]
    before = snapshot()
    r = api.post(f"turns/{tid}/confirm", {"at": T0 + 20_000})
    assert r.status_code == 200, r.content
    body = r.json()
    returned = [f["id"] for f in body["facts"]]
    assert returned and sorted(body["reinforced"]) == sorted(returned)
    after = snapshot()
    changed = {fid for fid in before if before[fid] != after[fid]}
    assert changed == set(returned)
    for fid in returned:
        row = Fact.objects.get(pk=fid)
        assert row.hit_count == 1 and row.updated_at == T0 + 20_000 and row.last_hit_at == T0 + 20_000
    t = Turn.objects.get(pk=tid)
    assert t.confirmed_at == T0 + 20_000 and t.prompt_fact_ids == returned


def test_confirm_with_query_embedding_and_empty_body(api, seeded):
    tid = turn(api, "乌龙茶").json()["turn_id"]
    r = api.post(f"turns/{tid}/confirm", {"query_embedding": [0.1, -0.2, 0.3], "at": T0 + 20_000})
    assert r.status_code == 200, r.content
    assert r.json()["used_vector"] is True
    tid2 = turn(api, "乌龙茶").json()["turn_id"]
    assert api.post(f"turns/{tid2}/confirm").status_code == 200


def test_confirm_twice_is_409_and_reinforces_once(api, seeded):
    tid = turn(api, "乌龙茶").json()["turn_id"]
    assert api.post(f"turns/{tid}/confirm", {"at": T0 + 20_000}).status_code == 200
    after_first = snapshot()
    r = api.post(f"turns/{tid}/confirm", {"at": T0 + 30_000})
    assert r.status_code == 409
    assert "already confirmed" in r.json()["detail"]
    assert snapshot() == after_first


def test_confirm_unknown_turn_is_404(api, seeded):
    r = api.post("turns/777777/confirm", {})
    assert r.status_code == 404 and "777777" in r.json()["detail"]


def test_confirm_validation(api, seeded):
    tid = turn(api, "乌龙茶").json()["turn_id"]
    r = api.post(f"turns/{tid}/confirm", {"query_embedding": ["a"]})
    assert r.status_code == 422 and "body.query_embedding.0" in r.json()["detail"]
    assert api.post(f"turns/{tid}/confirm", {"query_embedding": []}).status_code == 422
    assert api.post(f"turns/{tid}/confirm", raw='{"query_embedding": [Infinity]}').status_code == 422
    r = api.post(f"turns/{tid}/confirm", {"query_embedding": [1e308]})
    assert r.status_code == 422 and "body.query_embedding.0" in r.json()["detail"]
    assert api.post(f"turns/{tid}/confirm", {"unknown": 1}).status_code == 422
    assert Turn.objects.get(pk=tid).confirmed_at is None


@pytest.mark.django_db
def test_a_turns_refs_and_watermark_are_one_lookup_and_a_new_name_still_renames():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory import services

    s = services.resolve_stream(platform="qq", kind="direct", external_id="r1", name="老地方")
    p = services.resolve_person(platform="qq", external_id="u1", name="阿明", at=T0)
    mid = services.append_message(stream_id=s.pk, role="user", content="在吗", sender_person_id=p.pk, at=T0)[0].pk
    refs = {"stream": {"platform": "qq", "kind": "direct", "external_id": "r1", "name": ""},
            "speaker": {"platform": "qq", "external_id": "u1", "name": "阿明"}}
    with CaptureQueriesContext(connection) as queries:
        found, speaker = services.resolve_turn_refs(**refs, watermark_message_id=mid, at=T0)
    assert (found.pk, found.kind, found.display_name, speaker.pk, speaker.display_name) == (
        s.pk, "direct", "老地方", p.pk, "阿明")
    assert len(queries.captured_queries) == 1
    # another stream's message is no watermark here: nothing found, nothing created
    other = services.resolve_stream(platform="qq", kind="group", external_id="g1")
    elsewhere = services.append_message(stream_id=other.pk, role="assistant", content="嗯", at=T0)[0].pk
    new = {"stream": {**refs["stream"], "external_id": "r2"}, "speaker": refs["speaker"]}
    assert services.resolve_turn_refs(**new, watermark_message_id=elsewhere, at=T0) == (None, None)
    assert not Stream.objects.filter(external_id="r2").exists()
    # a new display name, a new speaker: their resolvers rename and create
    renamed = {"stream": {**refs["stream"], "name": "新地方"}, "speaker": {**refs["speaker"], "external_id": "u9"}}
    found, speaker = services.resolve_turn_refs(**renamed, at=T0)
    assert found.pk == s.pk and Stream.objects.get(pk=s.pk).display_name == "新地方"
    assert speaker.pk != p.pk and Person.objects.filter(pk=speaker.pk).exists()


def test_a_hung_embedding_provider_costs_one_confirm_its_short_timeout_and_the_next_ones_nothing(api, seeded, fake_openai):
    fake_openai.push("/embeddings", *[Reply(delay=3.0) for _ in range(4)])
    remote = {"EMBEDDING_PROVIDER": "openai", "EMBEDDING_BASE_URL": fake_openai.base_url, "EMBEDDING_MODEL": "m",
              "EMBEDDING_DIM": fake_openai.dim, "EMBEDDING_QUERY_TIMEOUT": 0.3, "EMBEDDING_DOWN_SECONDS": 60}
    with override_settings(**remote):
        waits = []  # the first confirm's wall time only bounds loosely: the calls below are the proof
        for text in ("乌龙茶 橘猫", "乌龙茶"):
            tid = turn(api, text).json()["turn_id"]
            started = time.monotonic()
            r = api.post(f"turns/{tid}/confirm", {"at": T0 + 20_000})
            waits.append(time.monotonic() - started)
            assert r.status_code == 200, r.content
            assert r.json()["used_vector"] is False and r.json()["facts"][0]["content"] == "喜欢喝乌龙茶"

    assert len(fake_openai.calls("/embeddings")) == 1  # the first confirm's question; nothing after it
    assert 0.3 <= waits[0] < 3.0  # its own timeout, not the hung reply (3 s) nor the workers' 30 s and retries
