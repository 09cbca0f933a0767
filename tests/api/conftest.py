"""Fixtures of the API tests: a bearer token and a JSON client that sends it."""
from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from memory.api.auth import clear_token_cache, issue_token

T0 = 1_700_000_000_000  # a fixed "now" (epoch ms) for deterministic calls


@pytest.fixture(autouse=True)
def _no_task_enqueueing(settings):
    settings.MEMORY_ENQUEUE_TASKS = False
    settings.MESSAGE_MAX_CHARS = 20000
    clear_token_cache()
    yield
    clear_token_cache()


@pytest.fixture
def token(db) -> str:
    """A token with every scope (``admin``); scope tests use ``bot_token``."""
    _, plain = issue_token("test-bot", ["admin"])
    return plain


@pytest.fixture
def bot_token(db) -> str:
    _, plain = issue_token("only-bot", ["bot"])
    return plain


class ApiClient:
    """Thin JSON wrapper over Django's test client with the bearer token set."""

    def __init__(self, token: str | None):
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _call(self, method: str, path: str, body: Any = None, raw: bytes | str | None = None, **kw: Any):
        url = path if path.startswith("/") else f"/api/v1/{path}"
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        fn = getattr(self.client, method)
        return fn(url, data=data if data is not None else "", content_type="application/json", headers=self.headers, **kw)

    def get(self, path: str, **params: Any):
        return self.client.get(path if path.startswith("/") else f"/api/v1/{path}", params, headers=self.headers)

    def post(self, path: str, body: Any = None, **kw: Any):
        return self._call("post", path, body, **kw)

    def patch(self, path: str, body: Any = None, **kw: Any):
        return self._call("patch", path, body, **kw)


@pytest.fixture
def api(token) -> ApiClient:
    return ApiClient(token)


@pytest.fixture
def anon(db) -> ApiClient:
    return ApiClient(None)


def stream(ext: str = "g1", kind: str = "group", platform: str = "qq", **kw: Any) -> dict[str, Any]:
    return {"platform": platform, "kind": kind, "external_id": ext, **kw}


def person(ext: str = "u1", platform: str = "qq", **kw: Any) -> dict[str, Any]:
    return {"platform": platform, "external_id": ext, **kw}
