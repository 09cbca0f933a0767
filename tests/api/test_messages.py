"""POST/PATCH /api/v1/messages."""
from __future__ import annotations

import pytest

from memory.models import Identity, Message, Person, Stream

from .conftest import T0, person, stream

pytestmark = pytest.mark.django_db


def test_post_user_message_resolves_refs_and_returns_201(api):
    r = api.post(
        "messages",
        {"stream": stream(name="Group"), "sender": person(name="Ann"), "role": "user", "content": "我喜欢猫", "at": T0},
    )
    assert r.status_code == 201, r.content
    body = r.json()
    msg = Message.objects.get(pk=body["id"])
    assert body["stream_id"] == msg.stream_id and body["person_id"] == msg.sender_person_id
    assert msg.created_at == T0 and msg.content == "我喜欢猫" and msg.role == "user"
    s = Stream.objects.get(pk=body["stream_id"])
    assert (s.platform, s.kind, s.external_id, s.display_name) == ("qq", "group", "g1", "Group")
    assert Identity.objects.get(person_id=body["person_id"]).external_id == "u1"


def test_same_refs_resolve_to_same_ids(api):
    a = api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": "a"}).json()
    b = api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": "b"}).json()
    assert (a["stream_id"], a["person_id"]) == (b["stream_id"], b["person_id"])
    assert a["id"] != b["id"]
    c = api.post("messages", {"stream": stream(kind="direct"), "sender": person(), "role": "user", "content": "c"})
    assert c.json()["stream_id"] != a["stream_id"]


def test_assistant_message_needs_no_sender(api):
    r = api.post("messages", {"stream": stream(), "role": "assistant", "content": "好的"})
    assert r.status_code == 201
    assert r.json()["person_id"] is None


def test_user_message_without_sender_is_422_and_writes_nothing(api):
    streams, persons = Stream.objects.count(), Person.objects.count()
    r = api.post("messages", {"stream": stream(ext="new"), "role": "user", "content": "hi"})
    assert r.status_code == 422
    assert "body.sender" in r.json()["detail"]
    assert Stream.objects.count() == streams and Person.objects.count() == persons
    assert not Message.objects.exists()


def test_idempotent_on_external_message_id(api):
    body = {"stream": stream(), "sender": person(), "role": "user", "content": "hi", "external_message_id": "m-1"}
    first = api.post("messages", body)
    again = api.post("messages", body)
    assert first.status_code == 201 and again.status_code == 200
    assert first.json() == again.json()
    assert Message.objects.filter(external_message_id="m-1").count() == 1
    # the same external id in another stream is another message
    other = api.post("messages", {**body, "stream": stream(ext="g2")})
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]


def test_content_limit_is_422_with_the_limit(api, settings):
    settings.MESSAGE_MAX_CHARS = 100
    before = Stream.objects.count()
    r = api.post("messages", {"stream": stream(ext="x"), "sender": person(), "role": "user", "content": "a" * 101})
    assert r.status_code == 422
    assert "100" in r.json()["detail"] and "body.content" in r.json()["detail"]
    assert Stream.objects.count() == before and not Message.objects.exists()
    ok = api.post("messages", {"stream": stream(ext="x"), "sender": person(), "role": "user", "content": "a" * 100})
    assert ok.status_code == 201


def test_default_limit_is_20000(api):
    r = api.post("messages", {"stream": stream(), "role": "assistant", "content": "a" * 20001})
    assert r.status_code == 422 and "20000" in r.json()["detail"]


def test_invalid_role_is_422(api):
    r = api.post("messages", {"stream": stream(), "role": "system", "content": "x"})
    assert r.status_code == 422 and "body.role" in r.json()["detail"]


def test_at_defaults_to_now(api):
    from memory import services

    before = services.now_ms()
    r = api.post("messages", {"stream": stream(), "role": "assistant", "content": "x"})
    assert before <= Message.objects.get(pk=r.json()["id"]).created_at <= services.now_ms()


def test_patch_fills_placeholder_body(api):
    r = api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": "", "at": T0})
    mid = r.json()["id"]
    p = api.patch(f"messages/{mid}", {"content": "[图片] 一只猫"})
    assert p.status_code == 200
    assert p.json() == r.json()
    msg = Message.objects.get(pk=mid)
    assert msg.content == "[图片] 一只猫" and msg.created_at == T0


def test_patch_unknown_message_is_404(api):
    r = api.patch("messages/424242", {"content": "x"})
    assert r.status_code == 404
    assert "424242" in r.json()["detail"]


def test_patch_validation(api, settings):
    mid = api.post("messages", {"stream": stream(), "role": "assistant", "content": "x"}).json()["id"]
    assert api.patch(f"messages/{mid}", {}).status_code == 422
    settings.MESSAGE_MAX_CHARS = 5
    r = api.patch(f"messages/{mid}", {"content": "toolong"})
    assert r.status_code == 422 and "5" in r.json()["detail"]
    assert Message.objects.get(pk=mid).content == "x"
    assert api.patch("messages/abc", {"content": "x"}).status_code in (404, 422)
