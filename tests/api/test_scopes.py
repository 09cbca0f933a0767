"""Token scopes: each route needs its scope (403 naming it), admin implies all; commands."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from memory.api.auth import clear_token_cache, issue_token
from memory.models import ApiToken

from .conftest import ApiClient, person, stream

pytestmark = pytest.mark.django_db

REFUSED_FOR_BOT = [
    ("post", "facts/1/pin", "curation"),
    ("post", "facts/1/invalidate", "curation"),
    ("post", "facts/1/replace", "curation"),
    ("get", "conflicts", "curation"),
    ("get", "operations", "curation"),
    ("post", "operations/1/undo", "undo"),
    ("get", "tuning", "tuning"),
    ("post", "tuning/apply", "tuning"),
    ("post", "tuning/rollback", "tuning"),
    ("post", "forget/preview", "forget"),
    ("post", "forget", "forget"),
    ("get", "persons/1/export", "export"),
]


@pytest.mark.parametrize(("method", "path", "scope"), REFUSED_FOR_BOT)
def test_a_bot_token_gets_403_naming_the_missing_scope(bot_token, method, path, scope):
    client = ApiClient(bot_token)
    r = getattr(client, method)(path, **({"body": {"target": "fact", "id": 1}} if method == "post" else {}))
    assert r.status_code == 403
    assert f"'{scope}'" in r.json()["detail"]


def test_a_bot_token_can_store_and_read(bot_token):
    client = ApiClient(bot_token)
    r = client.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": "我住在杭州"})
    assert r.status_code == 201
    assert client.post("facts", {"person": person(), "content": "住在杭州", "kind": "身份"}).status_code == 201
    assert client.post("actions/consult", {"query": "杭州"}).status_code == 200
    facts = client.get(f"persons/{r.json()['person_id']}/facts")  # and reads back what it stored
    assert facts.status_code == 200 and [f["content"] for f in facts.json()["facts"]] == ["住在杭州"]


def test_a_curation_token_cannot_undo(db):
    _, plain = issue_token("curator", ["curation"])
    client = ApiClient(plain)
    assert client.get("operations").status_code == 200
    r = client.post("operations/1/undo", {})
    assert r.status_code == 403 and "'undo'" in r.json()["detail"]
    assert client.post("messages", {"stream": stream(), "role": "assistant", "content": "x"}).status_code == 403


def test_admin_implies_every_scope(db):
    _, plain = issue_token("root", ["admin", "bot"])
    assert ApiToken.objects.get(name="root").scopes == ["admin"]
    client = ApiClient(plain)
    assert client.get("tuning").status_code == 200
    assert client.post("operations/99/undo", {}).status_code == 404


def test_openapi_states_each_routes_scope(anon):
    doc = anon.client.get("/api/openapi.json").json()
    undo = doc["paths"]["/api/v1/operations/{operation_id}/undo"]["post"]
    assert undo["x-token-scope"] == "undo"
    assert "`undo`" in undo["description"]
    assert undo["responses"]["403"]
    assert doc["paths"]["/api/v1/facts/{fact_id}/pin"]["post"]["x-token-scope"] == "curation"
    assert doc["paths"]["/api/v1/tuning/apply"]["post"]["x-token-scope"] == "tuning"
    assert doc["paths"]["/api/v1/messages"]["post"]["x-token-scope"] == "bot"


def test_create_api_token_takes_scopes_and_refuses_unknown_ones(db):
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", "ops", "--scope", "curation", "--scope", "undo", stdout=out, stderr=err)
    assert ApiToken.objects.get(name="ops").scopes == ["curation", "undo"]
    call_command("create_api_token", "plain", stdout=out, stderr=err)
    assert ApiToken.objects.get(name="plain").scopes == ["bot"]
    with pytest.raises(CommandError):
        call_command("create_api_token", "x", "--scope", "everything", stdout=out, stderr=err)


def test_revoke_api_token_refuses_the_token_and_keeps_the_row(db):
    _, plain = issue_token("gone", ["bot"])
    client = ApiClient(plain)
    assert client.get("persons/999/facts").status_code == 404
    out = io.StringIO()
    call_command("revoke_api_token", "gone", stdout=out)
    assert "Revoked 1" in out.getvalue()
    clear_token_cache()
    assert client.get("persons/999/facts").status_code == 401
    assert ApiToken.objects.get(name="gone").revoked_at is not None
    with pytest.raises(CommandError):
        call_command("revoke_api_token", "gone", stdout=out)


def test_forget_preview_and_forget_through_the_api(db):
    _, plain = issue_token("privacy", ["bot", "forget"])
    client = ApiClient(plain)
    sent = client.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": "我的门禁密码是九五二七"})
    preview = client.post("forget/preview", {"target": "message", "id": sent.json()["id"]})
    assert preview.status_code == 200 and preview.json()["counts"]["messages"] == 1
    assert preview.json()["undoable"] is False
    assert client.post("forget", {"target": "message", "id": sent.json()["id"], "digest": "0" * 16}).status_code == 409
    done = client.post("forget", {"target": "message", "id": sent.json()["id"], "digest": preview.json()["digest"]})
    assert done.status_code == 200 and done.json()["counts"] == preview.json()["counts"]
    assert client.post("forget/preview", {"target": "message", "id": sent.json()["id"]}).status_code == 404


def test_the_export_holds_identities_messages_facts_and_operations(api):
    sent = api.post("messages", {"stream": stream(), "sender": person(name="小周"), "role": "user", "content": "我叫小周"})
    pid = sent.json()["person_id"]
    api.post("facts", {"person": person(), "content": "名字是小周", "kind": "身份"})
    doc = api.get(f"persons/{pid}/export").json()
    assert doc["identities"][0]["external_id"] == "u1"
    assert [m["content"] for m in doc["messages"]] == ["我叫小周"]
    assert doc["facts"][0]["content"] == "名字是小周" and "retention" in doc["facts"][0]
    assert api.get("persons/99999/export").status_code == 404


def test_export_needs_its_own_scope(db):
    """The API's rule is the console's: the export is its own grant (scope ``export``, or ``admin``)."""
    alice = ApiClient(issue_token("writer", ["bot"])[1]).post(
        "messages", {"stream": stream(), "sender": person("alice-x"), "role": "user", "content": "我住在杭州"}
    ).json()["person_id"]
    for scopes in (["bot"], ["forget"], ["curation", "undo", "tuning"]):
        r = ApiClient(issue_token("-".join(scopes), scopes)[1]).get(f"persons/{alice}/export")
        assert r.status_code == 403 and "'export'" in r.json()["detail"], scopes
    for scopes in (["export"], ["admin"]):
        r = ApiClient(issue_token(f"can-{scopes[0]}", scopes)[1]).get(f"persons/{alice}/export")
        assert r.status_code == 200 and r.json()["messages"][0]["content"] == "我住在杭州", scopes
