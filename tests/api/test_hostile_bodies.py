"""Bodies the parser used to take or to answer with a Python error (issue 31, item 6).

Raw surrogate bytes in a text → 422 naming the field (as an escaped ``\\ud800`` already was); a body
not sent as ``application/json`` → 415; a key given twice → 422 naming it; an id holding a
format character (zero-width, bidi override) → 422. Nothing is written. An empty message (a placeholder
filled later) is nothing to embed, not a failed embedding.
"""
from __future__ import annotations

import json

import pytest
from django.test import Client

from config.api import api as ninja_api
from memory.models import Job, Knowledge, Message, Person, Stream

from .conftest import T0, person, stream

pytestmark = pytest.mark.django_db

SURROGATE = b"\xed\xa0\x80"  # U+D800 written as UTF-8 bytes: not UTF-8, but json decodes it (surrogatepass)


def _counts() -> tuple[int, ...]:
    return Stream.objects.count(), Person.objects.count(), Message.objects.count(), Knowledge.objects.count(), \
        Job.objects.count()


def _refused(r, status: int, field: str) -> dict:
    assert r.status_code == status, (r.status_code, r.content)
    body = r.json()
    assert body["errors"][0]["field"] == field, body
    assert field in body["detail"] or status == 415, body
    return body


def _message(**kw) -> dict:
    return {"stream": stream(), "role": "user", "sender": person(), "content": "今天去爬山了", "at": T0, **kw}


@pytest.mark.parametrize(("path", "body", "field"), [
    ("messages", b'{"stream": {"platform": "qq", "kind": "group", "external_id": "g1"}, "role": "assistant", '
                 b'"content": "a' + SURROGATE + b'b"}', "body.content"),
    ("knowledge/imports", b'{"text": "\xe4\xb9\x8c\xe9\xbe\x99\xe8\x8c\xb6' + SURROGATE + b'"}', "body.text"),
    ("messages", b'{"stream": {"platform": "qq", "kind": "group", "external_id": "g' + SURROGATE + b'"}, '
                 b'"role": "assistant", "content": "x"}', "body.stream.external_id"),
])
def test_raw_surrogate_bytes_are_422_naming_the_field(api, path, body, field):
    before = _counts()
    body = _refused(api.post(path, raw=body), 422, field)
    assert "surrogate" in body["detail"]
    assert _counts() == before


def test_an_escaped_surrogate_names_its_field_too(api):
    raw = '{"stream": {"platform": "qq", "kind": "group", "external_id": "g"}, "role": "assistant", "content": "\\udc00"}'
    _refused(api.post("messages", raw=raw), 422, "body.content")


def test_hangul_which_shares_the_surrogates_lead_byte_is_stored(api):
    r = api.post("messages", _message(content="안녕하세요 힘내"))  # 힘 is ED 9E 98 in UTF-8
    assert r.status_code == 201, r.content
    assert Message.objects.get().content == "안녕하세요 힘내"


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz", "", "application/jsonp",
])
def test_a_json_body_not_sent_as_json_is_415(token, content_type):
    client = Client(headers={"Authorization": f"Bearer {token}"})
    before = _counts()
    r = client.post("/api/v1/messages", data=json.dumps(_message()), content_type=content_type)
    assert r.status_code == 415, (content_type, r.status_code, r.content)
    assert "application/json" in r.json()["detail"]
    assert r.json()["errors"][0]["type"] == "unsupported_media_type"
    assert _counts() == before


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_content_types_still_pass(token, content_type):
    client = Client(headers={"Authorization": f"Bearer {token}"})
    r = client.post("/api/v1/messages", data=json.dumps(_message()), content_type=content_type)
    assert r.status_code == 201, r.content


def test_a_body_without_content_type_is_415_on_the_wire(token):
    # the test client always names a type; the WSGI environ of a client that sends none has no CONTENT_TYPE
    client = Client(headers={"Authorization": f"Bearer {token}"})
    r = client.generic("POST", "/api/v1/messages", json.dumps(_message()).encode(), content_type=None)
    assert r.status_code == 415, r.content


def test_every_route_with_a_body_documents_415_and_413():
    for path, item in ninja_api.get_openapi_schema()["paths"].items():
        for method, operation in item.items():
            if isinstance(operation, dict) and "requestBody" in operation:
                assert {"413", "415"} <= set(operation["responses"]), (method, path)


@pytest.mark.parametrize(("raw", "field"), [
    ('{"stream": {"platform": "qq", "kind": "group", "external_id": "g1"}, "role": "assistant", '
     '"content": "我喜欢猫", "content": "我讨厌猫"}', "body.content"),
    ('{"stream": {"platform": "qq", "kind": "group", "external_id": "g1", "external_id": "g2"}, '
     '"role": "assistant", "content": "x"}', "body.stream.external_id"),
])
def test_a_key_given_twice_is_422_naming_it(api, raw, field):
    before = _counts()
    body = _refused(api.post("messages", raw=raw), 422, field)
    assert "twice" in body["detail"] and body["errors"][0]["type"] == "duplicate_key"
    assert _counts() == before


def test_a_key_given_twice_in_a_list_item_is_found(api):
    raw = '{"labels": [{"turn": 1, "fact": 2, "relevant": true}, {"turn": 1, "turn": 2, "fact": 3, "relevant": false}]}'
    _refused(api.post("tuning/labels", raw=raw), 422, "body.labels.1.turn")


@pytest.mark.parametrize("ext", ["\u200b", "\u202erel", "abc\u200d", "\ufeffg1", "\u2066x\u2069", "\u00ad"])
@pytest.mark.parametrize("where", ["stream", "sender"])
def test_ids_with_invisible_format_characters_are_refused(api, ext, where):
    before = _counts()
    body = _message(**{where: stream(ext) if where == "stream" else person(ext)})
    r = _refused(api.post("messages", body), 422, f"body.{where}.external_id")
    assert "invisible" in r["detail"]
    _refused(api.post("messages", _message(**{where: {**body[where], "platform": "q\u200bq", "external_id": "x"}})),
             422, f"body.{where}.platform")
    assert _counts() == before


def test_format_characters_stay_allowed_in_names_and_texts(api):
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one emoji of three joined by ZWJ
    r = api.post("messages", _message(stream=stream(name=f"家{family}"), content=f"周末全家出游{family}"))
    assert r.status_code == 201, r.content
    assert Stream.objects.get(external_id="g1").display_name == f"家{family}"


def test_the_schema_states_the_id_rule():
    import re

    schemas = ninja_api.get_openapi_schema()["components"]["schemas"]
    for model in ("StreamRef", "PersonRef"):
        for name in ("platform", "external_id"):
            refused = schemas[model]["properties"][name]["not"]["pattern"]
            assert re.search(refused, "\u202erel") and re.search(refused, "\u200b") and not re.search(refused, "rel")


def test_an_empty_placeholder_is_nothing_to_embed_until_it_is_filled(api):
    """A message may be stored empty and filled later (PATCH): meanwhile the backfill neither sends it to the
    embedder nor counts it failed, on any run; filled, it is embedded."""
    from memory import pipeline
    from tests.workers.conftest import FakeEmbedder

    ids = [api.post("messages", _message(content=text, at=T0 + i)).json()["id"] for i, text in enumerate(["", " \u3000"])]
    embedder = FakeEmbedder()
    for _run in range(2):
        result = pipeline.backfill_vectors(embedder=embedder)
        assert (result.messages, result.failed) == (0, 0)
        assert not pipeline.vectors_pending_after(result.last_ids)  # no re-enqueue loop over them
    assert embedder.batches == []
    assert api.patch(f"messages/{ids[0]}", {"content": "[图片] 一只猫"}).status_code == 200
    result = pipeline.backfill_vectors(embedder=embedder)
    assert (result.messages, result.failed) == (1, 0) and embedder.batches == [["[图片] 一只猫"]]
    assert Message.objects.get(pk=ids[0]).embedding is not None
