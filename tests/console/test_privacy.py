"""Console: persons, export, forgetting with its preview, the API token page."""
from __future__ import annotations

import json

import pytest
from django.utils import timezone

from memory import meta, services
from memory.api.auth import hash_token, issue_token
from memory.models import ApiToken, Fact, ForgetRecord, Message, Person

pytestmark = pytest.mark.django_db
NOW = 1_800_000_000_000


@pytest.fixture
def alice(db):
    person = services.resolve_person(platform="qq", external_id="alice-9", name="<b>爱丽丝</b>", at=NOW)
    stream = services.resolve_stream(platform="qq", kind="group", external_id="g9", name="群")
    services.append_message(stream_id=stream.pk, role="user", content="我的门牌号是<script>九号</script>院",
                            sender_person_id=person.pk, at=NOW)
    services.add_fact(person_id=person.pk, content="门牌号是九号院", kind="身份", at=NOW)
    return person


def test_persons_page_searches_by_name_and_external_id_with_counts(operator, alice):
    r = operator.get("/persons/", {"q": "alice-9"})
    body = r.content.decode()
    assert r.status_code == 200 and f'data-person="{alice.pk}"' in body
    assert "&lt;b&gt;爱丽丝&lt;/b&gt;" in body and "<b>爱丽丝</b>" not in body
    assert operator.get("/persons/", {"q": "nobody-here"}).content.decode().count("data-person=") == 0


def test_export_page_is_escaped_and_json_downloads(operator, alice):
    page = operator.get(f"/persons/{alice.pk}/export/").content.decode()
    assert "&lt;script&gt;九号&lt;/script&gt;" in page and "<script>九号" not in page
    r = operator.get(f"/persons/{alice.pk}/export/", {"format": "json"})
    doc = json.loads(r.content)
    assert r["Content-Disposition"].startswith("attachment") and doc["facts"][0]["content"] == "门牌号是九号院"
    assert "source_message_id" in doc["facts"][0]  # the message it was heard in (null: none recorded)


def test_forget_preview_then_confirm_removes_the_person(operator, alice):
    preview = operator.get(f"/forget/person/{alice.pk}/")
    body = preview.content.decode()
    assert preview.status_code == 200 and "无法撤销" in body and 'data-count="messages">1<' in body
    assert "&lt;script&gt;" in body and "<script>九号" not in body
    digest = preview.context["plan"].digest()
    r = operator.post(f"/forget/person/{alice.pk}/", {"digest": digest})
    assert r.status_code == 302
    assert not Person.objects.filter(pk=alice.pk).exists() and not Message.objects.exists() and not Fact.objects.exists()
    record = ForgetRecord.objects.get()
    assert record.user == "operator" and record.counts["messages"] == 1 and "九号" not in json.dumps(record.counts)


def test_a_stale_preview_is_refused_and_previewed_again(operator, alice):
    r = operator.post(f"/forget/person/{alice.pk}/", {"digest": "stale"})
    assert r.status_code == 409 and Person.objects.filter(pk=alice.pk).exists()
    assert "无法撤销" in r.content.decode()


def test_only_operators_with_the_permission_forget(reviewer, alice):
    assert reviewer.get(f"/forget/person/{alice.pk}/").status_code == 403
    assert reviewer.post(f"/forget/person/{alice.pk}/", {"digest": "x"}).status_code == 403
    assert Person.objects.filter(pk=alice.pk).exists()  # refused: nothing forgotten


def test_token_page_creates_shows_the_secret_once_and_revokes(admin_client_):
    issue_token("legacy", ["admin"])
    page = admin_client_.get("/tokens/").content.decode()
    assert "1 个令牌拥有全部权限" in page
    r = admin_client_.post("/tokens/", {"name": "ops-bot", "scopes": ["curation", "undo"]})
    assert r.status_code == 302 and r["Location"] == "/tokens/"  # POST/redirect/GET: a reload makes no second token
    body = admin_client_.get("/tokens/").content.decode()
    row = ApiToken.objects.get(name="ops-bot")
    secret = body.split("data-secret class=\"secret\">")[1].split("<")[0]
    assert row.scopes == ["curation", "undo"] and row.token_hash == hash_token(secret)
    assert secret not in admin_client_.get("/tokens/").content.decode()  # never shown again
    confirm = admin_client_.post(f"/tokens/{row.pk}/revoke/")  # without JavaScript: a page naming the token asks
    assert confirm.status_code == 200 and "ops-bot" in confirm.content.decode()
    assert ApiToken.objects.get(pk=row.pk).revoked_at is None
    assert admin_client_.post(f"/tokens/{row.pk}/revoke/", {"confirmed": "1"}).status_code == 302
    assert ApiToken.objects.get(pk=row.pk).revoked_at is not None
    assert admin_client_.post("/tokens/", {"name": "bad", "scopes": ["everything"]}).status_code == 400


def test_a_live_token_name_is_unique(admin_client_):
    issue_token("my-bot", ["bot"])
    r = admin_client_.post("/tokens/", {"name": "my-bot", "scopes": ["bot"]})
    assert r.status_code == 400 and "my-bot" in r.content.decode()
    assert ApiToken.objects.filter(name="my-bot").count() == 1
    ApiToken.objects.filter(name="my-bot").update(revoked_at=timezone.now())
    assert admin_client_.post("/tokens/", {"name": "my-bot", "scopes": ["bot"]}).status_code == 302  # a revoked name is free


def test_token_page_is_for_superusers_and_token_managers(operator):
    assert operator.get("/tokens/").status_code == 403
    assert operator.post("/tokens/", {"name": "x", "scopes": ["admin"]}).status_code == 403
    assert not ApiToken.objects.exists()


def test_dashboard_warns_about_tokens_with_every_scope(admin_client_):
    issue_token("legacy", ["admin"])
    assert "请收窄" in admin_client_.get("/").content.decode()


def test_an_htmx_confirmation_navigates_to_the_next_page(operator, alice):
    digest = operator.get(f"/forget/person/{alice.pk}/").context["plan"].digest()
    r = operator.post(f"/forget/person/{alice.pk}/", {"digest": digest, "next": "/persons/"}, headers={"HX-Request": "true"})
    assert r.status_code == 204 and r["HX-Redirect"] == "/persons/"


def test_dashboard_shows_message_retention(admin_client_, settings):
    assert "永久保留" in admin_client_.get("/").content.decode()
    settings.MESSAGE_RETENTION_DAYS = 30
    meta.meta_set("message_retention", {"at": NOW, "days": 30, "emptied": 4, "total": 9})
    body = admin_client_.get("/").content.decode()
    assert "保留 30 天" in body and "累计清空 9 条" in body


def test_forget_links_on_stream_fact_and_episode_pages(operator, memory_set):
    stream = memory_set["direct"]
    page = operator.get(f"/streams/{stream.pk}/").content.decode()
    assert f"/forget/stream/{stream.pk}/" in page and "/forget/message/" in page
    assert f"/forget/fact/{memory_set['facts'][0]}/" in operator.get(f"/facts/{memory_set['facts'][0]}/").content.decode()
    assert f"/forget/episode/{memory_set['episode'].pk}/" in operator.get("/episodes/").content.decode()
    persons = operator.get("/persons/", {"q": "alice"}).content.decode()
    assert f"/streams/{stream.pk}/" in persons and f"/persons/{memory_set['alice'].pk}/export/" in persons


def test_forgetting_a_message_from_the_stream_page_without_javascript(operator, memory_set):
    message = memory_set["messages"][0]
    preview = operator.get(f"/forget/message/{message.pk}/", {"next": f"/streams/{message.stream_id}/"})
    digest = preview.context["plan"].digest()
    r = operator.post(f"/forget/message/{message.pk}/", {"digest": digest, "next": f"/streams/{message.stream_id}/"})
    assert r.status_code == 302 and r["Location"] == f"/streams/{message.stream_id}/"
    assert not Message.objects.filter(pk=message.pk).exists()


def test_the_owner_is_not_offered_forgetting_and_a_refusal_stays_in_the_console(operator, alice):
    owner = Person.objects.get(kind="owner")
    persons = operator.get("/persons/").content.decode()
    assert f'href="/forget/person/{alice.pk}/' in persons and f'href="/forget/person/{owner.pk}/' not in persons
    assert "主人不能被遗忘" in persons
    for response in (operator.get(f"/forget/person/{owner.pk}/"), operator.post(f"/forget/person/{owner.pk}/", {"digest": "x"})):
        body = response.content.decode()
        assert response.status_code == 409
        assert 'id="forget-refusal"' in body and "主人不能被遗忘" in body
        assert '<nav aria-label="主导航">' in body  # a console page, not a bare fragment
        assert 'name="digest"' not in body  # nothing to confirm
    assert Person.objects.filter(pk=owner.pk).exists()


def test_the_forget_preview_says_how_many_it_does_not_list(operator, alice):
    from memory import services

    stream = Message.objects.filter(sender_person_id=alice.pk).values_list("stream_id", flat=True).first()
    for i in range(12):
        services.append_message(stream_id=stream, role="user", content=f"第{i}条消息", sender_person_id=alice.pk, at=NOW + i)
    body = operator.get(f"/forget/person/{alice.pk}/").content.decode()
    assert 'data-count="messages">13<' in body
    assert 'data-more="3"' in body and "还有 3 条未列出" in body  # 10 listed, 3 more


def test_forget_titles_are_composed_in_the_interface_language(operator, alice):
    assert "遗忘 · 人物 #" in operator.get(f"/forget/person/{alice.pk}/").content.decode()
    operator.cookies["django_language"] = "en"
    body = operator.get(f"/forget/person/{alice.pk}/").content.decode()
    assert f"Forget · Person #{alice.pk}" in body and "人物 #" not in body


def test_export_is_its_own_permission_refused_to_reviewers_and_staff(reviewer, staff, operator, admin_client_, alice):
    """Every role browses streams; only superusers and operators (memory.export_person) export a person."""
    for client in (reviewer, staff):
        assert client.get(f"/persons/{alice.pk}/export/").status_code == 403
        assert client.get(f"/persons/{alice.pk}/export/", {"format": "json"}).status_code == 403
        page = client.get("/persons/").content.decode()
        assert f'data-person="{alice.pk}"' in page and f"/persons/{alice.pk}/export/" not in page
    for client in (operator, admin_client_):
        assert client.get(f"/persons/{alice.pk}/export/", {"format": "json"}).status_code == 200
        assert f"/persons/{alice.pk}/export/" in client.get("/persons/").content.decode()


def test_export_permission_granted_to_one_user(make_client, alice):
    from django.contrib.auth.models import Permission, User

    client = make_client("lonely")  # a user of no role
    assert client.get(f"/persons/{alice.pk}/export/").status_code == 403
    User.objects.get(username="lonely").user_permissions.add(Permission.objects.get(codename="export_person"))
    assert client.get(f"/persons/{alice.pk}/export/", {"format": "json"}).status_code == 200
