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


def test_known_refs_and_new_names(api):
    """The one-statement path (PostgreSQL: both refs known, no name change) and every way out of it."""
    from memory import services

    first = api.post("messages", {"stream": stream(name="G"), "sender": person(name="Ann"), "role": "user",
                                  "content": "我喜欢猫", "at": T0}).json()
    same = api.post("messages", {"stream": stream(name="G"), "sender": person(name="Ann"), "role": "user",
                                 "content": "我也喜欢狗", "at": T0 + 1}).json()
    unnamed = api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": "好",
                                    "at": T0 + 2}).json()
    assert (first["stream_id"], first["person_id"]) == (same["stream_id"], same["person_id"])
    assert (unnamed["stream_id"], unnamed["person_id"]) == (first["stream_id"], first["person_id"])
    names = lambda: (Stream.objects.get(pk=first["stream_id"]).display_name,  # noqa: E731
                     Identity.objects.get(person_id=first["person_id"]).display_name)
    assert names() == ("G", "Ann")
    # a new display name is stored, on the stream and on the identity
    renamed = api.post("messages", {"stream": stream(name="G2"), "sender": person(name="Annie"), "role": "user",
                                    "content": "改名了", "at": T0 + 3}).json()
    assert (renamed["stream_id"], renamed["person_id"]) == (first["stream_id"], first["person_id"])
    assert names() == ("G2", "Annie")
    assert Person.objects.get(pk=first["person_id"]).display_name == "Ann"  # the person keeps the name it had
    # a known stream with a new sender, a known sender in a new stream
    bob = api.post("messages", {"stream": stream(), "sender": person(ext="u2"), "role": "user", "content": "嗨"}).json()
    assert bob["stream_id"] == first["stream_id"] and bob["person_id"] != first["person_id"]
    other = api.post("messages", {"stream": stream(ext="g9"), "sender": person(), "role": "user", "content": "嗨"}).json()
    assert other["stream_id"] != first["stream_id"] and other["person_id"] == first["person_id"]
    # what was stored: content, time, tokens (searchable), sender
    msg = Message.objects.get(pk=same["id"])
    assert (msg.content, msg.created_at, msg.role, msg.sender_person_id) == ("我也喜欢狗", T0 + 1, "user", same["person_id"])
    assert msg.tokens
    stored, created = services.store_message(stream=stream(), sender=None, role="assistant", content="好的",
                                             external_message_id="a-1", at=T0 + 5)
    again, created_again = services.store_message(stream=stream(), sender=None, role="assistant", content="好的",
                                                  external_message_id="a-1", at=T0 + 6)
    assert (created, created_again) == (True, False) and again.pk == stored.pk
    assert (stored.stream_id, stored.sender_person_id, stored.created_at) == (first["stream_id"], None, T0 + 5)


def test_a_known_refs_message_is_one_statement_on_postgresql(api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    body = {"stream": stream(), "sender": person(), "role": "user", "content": "今天天气不错"}
    api.post("messages", body)
    with CaptureQueriesContext(connection) as queries:
        r = api.post("messages", {**body, "external_message_id": "e-1"})
        again = api.post("messages", {**body, "external_message_id": "e-1"})
    assert (r.status_code, again.status_code) == (201, 200)
    writes = [q["sql"] for q in queries.captured_queries if "messages" in q["sql"]]
    if connection.vendor == "postgresql":  # look-ups and the insert in one statement; the repeat reads its row
        assert len(writes) == 3, writes


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
