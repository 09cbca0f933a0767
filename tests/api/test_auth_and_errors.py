"""Auth, token command and the error envelope (422 naming the field, malformed JSON …)."""
from __future__ import annotations

import io
import json
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from config.api import api as ninja_api
from memory.api.auth import hash_token
from memory.models import ApiToken, Message, Person, Stream

from .conftest import T0, ApiClient, person, stream

pytestmark = pytest.mark.django_db


def test_no_token_is_401_with_json_body(anon):
    r = anon.post("messages", {"stream": stream(), "role": "assistant", "content": "hi"})
    assert r.status_code == 401
    assert "Bearer" in r.json()["detail"]
    assert not Message.objects.exists()


def test_bad_token_is_401(db):
    r = ApiClient("nope").post("messages", {"stream": stream(), "role": "assistant", "content": "hi"})
    assert r.status_code == 401
    assert r.json()["detail"]


def test_wrong_scheme_is_401(token):
    client = ApiClient(None)
    client.headers = {"Authorization": f"Token {token}"}
    assert client.get("persons/1/facts").status_code == 401


def test_docs_and_schema_are_public(anon):
    assert anon.client.get("/api/openapi.json").status_code == 200
    assert anon.client.get("/api/docs").status_code == 200


def test_create_api_token_prints_token_once_and_stores_only_hash(db):
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", "bot-a", stdout=out, stderr=err)
    plain = out.getvalue().strip()
    row = ApiToken.objects.get(name="bot-a")
    assert row.token_hash == hash_token(plain) and plain not in row.token_hash
    r = ApiClient(plain).post("messages", {"stream": stream(), "role": "assistant", "content": "hi", "at": T0})
    assert r.status_code == 201


def test_last_used_at_written_at_most_once_a_minute(api, token):
    from memory.api.auth import clear_token_cache

    row = ApiToken.objects.get(token_hash=hash_token(token))
    assert row.last_used_at is None
    api.get("persons/999/facts")
    first = ApiToken.objects.get(pk=row.pk).last_used_at
    assert first is not None
    api.get("persons/999/facts")
    assert ApiToken.objects.get(pk=row.pk).last_used_at == first
    old = timezone.now() - timedelta(minutes=2)
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=old)
    clear_token_cache()  # a queryset update sends no signal; the cache would hide it for 10 s
    api.get("persons/999/facts")
    assert ApiToken.objects.get(pk=row.pk).last_used_at > old


def test_malformed_json_is_422(api):
    r = api.post("messages", raw=b'{"stream": ')
    assert r.status_code == 422
    assert "JSON" in r.json()["detail"]


def test_invalid_utf8_and_nan_are_422(api):
    assert api.post("messages", raw=b'{"content": "\xff"}').status_code == 422
    r = api.post("turns/1/confirm", raw=b'{"query_embedding": [NaN]}')
    assert r.status_code == 422


def test_lone_surrogate_is_422_naming_field(api):
    body = '{"stream": {"platform": "qq", "kind": "group", "external_id": "g"}, "role": "assistant", "content": "\\ud800"}'
    before = Stream.objects.count()
    r = api.post("messages", raw=body)
    assert r.status_code == 422
    assert "body.content" in r.json()["detail"]
    assert Stream.objects.count() == before


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("messages", {"stream": stream(), "role": "assistant", "content": "a\x00b"}, "body.content"),
        ("turns", {"stream": stream(), "speaker": {"platform": "qq", "external_id": "u\x00"}, "text": "hi"},
         "body.speaker.external_id"),
        ("turns", {"stream": stream(external_id="g\x00"), "speaker": {"platform": "qq", "external_id": "u"}, "text": "x"},
         "body.stream.external_id"),
    ],
)
def test_nul_character_is_422_on_every_backend(api, path, body, field):
    # PostgreSQL cannot store a NUL in text, SQLite can: the parser refuses it for both, before any write
    before = (Stream.objects.count(), Person.objects.count())
    r = api.post(path, body)
    assert r.status_code == 422
    assert field in r.json()["detail"] and "NUL" in r.json()["detail"]
    assert r.json()["errors"][0]["type"] == "json_invalid"
    assert (Stream.objects.count(), Person.objects.count()) == before


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32-be"])
def test_nul_in_a_body_not_in_utf8_is_422(api, encoding):
    # json accepts UTF-16/32 bodies; their escapes are not the bytes b"\\u", and the NUL is still refused
    body = json.dumps({"stream": stream(), "role": "assistant", "content": "a\x00b"}).encode(encoding)
    r = api.post("messages", raw=body)
    assert r.status_code == 422
    assert "body.content" in r.json()["detail"] and "NUL" in r.json()["detail"]
    ok = json.dumps({"stream": stream(), "role": "assistant", "content": "ab"}).encode(encoding)
    assert api.post("messages", raw=ok).status_code in (200, 201)


def test_schema_states_request_strings_have_no_nul():
    schema = ninja_api.get_openapi_schema()
    stream_ref = schema["components"]["schemas"]["StreamRef"]["properties"]
    for name in ("platform", "external_id", "name"):
        pattern = stream_ref[name]["pattern"]
        assert re.search(pattern, "g") and not re.search(pattern, "g\x00"), name
    assert not re.search(stream_ref["external_id"]["pattern"], "   ")


def test_missing_field_is_422_naming_it(api):
    r = api.post("messages", {"stream": stream(), "role": "assistant"})
    assert r.status_code == 422
    body = r.json()
    assert "body.content" in body["detail"]
    assert body["errors"][0]["field"] == "body.content"


def test_wrong_type_names_nested_field(api):
    r = api.post("messages", {"stream": stream(kind="channel"), "role": "assistant", "content": "x"})
    assert r.status_code == 422
    assert "body.stream.kind" in r.json()["detail"]
    r = api.post("messages", {"stream": stream(), "role": "assistant", "content": 5})
    assert r.status_code == 422 and "body.content" in r.json()["detail"]


def test_unknown_field_is_422(api):
    r = api.post("messages", {"stream": stream(), "role": "assistant", "content": "x", "externl_message_id": "1"})
    assert r.status_code == 422
    assert "externl_message_id" in r.json()["detail"]


def test_body_not_an_object_is_422(api):
    assert api.post("messages", raw="[1, 2]").status_code == 422
    assert api.post("messages", raw="null").status_code == 422
    assert api.post("messages", raw="").status_code == 422


def test_out_of_range_ids_and_at_are_422(api):
    assert api.patch(f"messages/{2**70}", {"content": "x"}).status_code == 422
    assert api.get("persons/0/facts").status_code == 422
    r = api.post("messages", {"stream": stream(), "role": "assistant", "content": "x", "at": 10**30})
    assert r.status_code == 422 and "body.at" in r.json()["detail"]
    r = api.get("persons/1/facts", at="soon")
    assert r.status_code == 422 and "query.at" in r.json()["detail"]


def test_oversized_body_is_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    r = api.post("messages", {"stream": stream(), "role": "assistant", "content": "x" * 5000})
    assert r.status_code == 413
    assert "1000" in r.json()["detail"]


def test_unknown_route_is_404_json(api):
    r = api.get("nothing-here")
    assert r.status_code == 404


def test_person_ref_blank_external_id_is_422(api):
    r = api.post("messages", {"stream": stream(), "sender": person(ext="  "), "role": "user", "content": "x"})
    assert r.status_code == 422 and "body.sender.external_id" in r.json()["detail"]


def test_deleted_token_is_refused_at_once_in_this_process(api, token):
    assert api.get("persons/999/facts").status_code == 404  # cached as valid
    ApiToken.objects.filter(token_hash=hash_token(token)).get().delete()
    assert api.get("persons/999/facts").status_code == 401
