"""Fixtures of the console tests: one logged-in client per role, and a small memory set."""
from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.test import Client

from memory.management.commands.ensure_roles import ensure_roles

#: A fixed "now" (2025-01-01 00:00 UTC in ms) so retention values are exact.
NOW = 1_735_689_600_000
HOUR = 3_600_000

XSS = '<script>alert("x")</script>"><img src=x onerror=alert(1)> javascript:alert(2)'


@pytest.fixture(autouse=True)
def _console_settings(settings, monkeypatch):
    """No embedding model in console tests, no tuning overrides, a fresh cache."""
    settings.EMBEDDING_PROVIDER = "none"
    settings.MEMORY_ENQUEUE_TASKS = False
    from memory.providers import config

    config.reset_cache()
    monkeypatch.setattr("memory.overrides.active_overrides", lambda: {})
    cache.clear()


@pytest.fixture
def roles(db) -> dict[str, Group]:
    return ensure_roles()


@pytest.fixture
def make_client(db, roles) -> Callable[[str], Client]:
    """``make_client('operator')`` → a client logged in as a user of that group (or a superuser)."""

    def make(role: str) -> Client:
        user = User.objects.filter(username=role).first()
        if user is None and role == "superuser":
            user = User.objects.create_superuser("superuser", "root@example.com", "superuser-password")
        elif user is None:
            user = User.objects.create_user(role, password=f"{role}-password")
            if role in roles:
                user.groups.add(roles[role])
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def operator(make_client) -> Client:
    return make_client("operator")


@pytest.fixture
def reviewer(make_client) -> Client:
    return make_client("reviewer")


@pytest.fixture
def staff(make_client) -> Client:
    return make_client("staff")


@pytest.fixture
def admin_client_(make_client) -> Client:
    return make_client("superuser")


@pytest.fixture
def memory_set(db):
    """Two persons, a direct and a group stream, messages, an episode, facts (one conflict), knowledge, edges."""
    from memory import services

    now = NOW
    alice = services.resolve_person(platform="qq", external_id="alice", name="小林", at=now - 100 * HOUR)
    bob = services.resolve_person(platform="qq", external_id="bob", name="阿杰", at=now - 100 * HOUR)
    direct = services.resolve_stream(platform="qq", kind="direct", external_id="alice", name="小林私聊")
    group = services.resolve_stream(platform="qq", kind="group", external_id="g1", name="读书群")
    msgs = []
    for i, text in enumerate(["我住在杭州", "我喜欢猫", "我对花生过敏", XSS]):
        m, _ = services.append_message(
            stream_id=direct.pk, role="user", content=text, sender_person_id=alice.pk, at=now - (50 - i) * HOUR
        )
        msgs.append(m)
    services.append_message(stream_id=group.pk, role="user", content="大家好", sender_person_id=bob.pk, at=now - 10 * HOUR)
    episode = services.add_episode(
        stream_id=direct.pk, summary="小林聊到住处和猫", cues=["杭州", "猫"], started_at=now - 50 * HOUR,
        ended_at=now - 48 * HOUR, message_ids=[m.pk for m in msgs[:2]], at=now - 47 * HOUR,
    )
    f1 = services.add_fact(person_id=alice.pk, content="小林住在杭州", kind="身份", slot="住址", origin_kind="direct",
                           at=now - 40 * HOUR).fact_id
    f2 = services.add_fact(person_id=alice.pk, content="小林住在上海", kind="身份", slot="住址", origin_kind="direct",
                           at=now - 20 * HOUR).fact_id
    f3 = services.add_fact(person_id=alice.pk, content="小林喜欢猫", kind="偏好", origin_kind="direct",
                           at=now - 30 * HOUR).fact_id
    f4 = services.add_fact(person_id=bob.pk, content="阿杰心情不错", kind="状态", origin_kind="group",
                           at=now - 200 * HOUR).fact_id  # 状态 decays in hours: frozen by now
    f5 = services.add_fact(person_id=bob.pk, content=XSS, kind="事件", origin_kind="group", at=now - 5 * HOUR).fact_id
    services.sweep(at=now)
    k1 = services.add_knowledge(content="猫是肉食动物", source="import", at=now - 10 * HOUR)
    k2 = services.add_knowledge(content=XSS, source="import", at=now - 10 * HOUR)
    services.link_together(refs=[("fact", f1), ("fact", f3), ("episode", episode.pk)], at=now - 30 * HOUR)
    services.link_together(refs=[("fact", f3), ("knowledge", k1)], at=now - 30 * HOUR)
    services.link_together(refs=[("fact", f5), ("knowledge", k2)], at=now - 3 * HOUR)
    return {
        "alice": alice, "bob": bob, "direct": direct, "group": group, "episode": episode,
        "facts": [f1, f2, f3, f4, f5], "knowledge": [k1, k2], "messages": msgs,
    }


@pytest.fixture
def frozen_now(monkeypatch):
    """Make ``services.now_ms()`` return NOW everywhere it is called."""
    monkeypatch.setattr("memory.services.now_ms", lambda: NOW)
    return NOW
