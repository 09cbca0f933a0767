"""``GET /healthz`` (docs/DEPLOY.md): the database decides, Redis is reported."""
from __future__ import annotations

from unittest import mock

import pytest
from django.db import OperationalError

from tests.redis_url import TEST_REDIS_URL


@pytest.mark.django_db
def test_ok_without_login_with_redis(client, settings):
    settings.REDIS_URL = TEST_REDIS_URL
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok", "backend": response.json()["backend"]}
    assert response.json()["backend"] in {"sqlite", "postgresql"}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_redis_down_is_reported_not_fatal(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["redis"] == "down" and response.json()["database"] == "ok"


@pytest.mark.django_db
def test_database_down_is_503(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    with mock.patch("django.db.backends.utils.CursorWrapper.execute", side_effect=OperationalError("gone")):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["status"] == "down" and response.json()["database"] == "OperationalError"


def test_only_get(client):
    assert client.post("/healthz").status_code == 405
