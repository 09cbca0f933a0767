"""Password reset exists only when mail is configured (EMAIL_HOST or EMAIL_BACKEND)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client

RESET_URLS = ["/accounts/password_reset/", "/accounts/password_reset/done/", "/accounts/reset/MQ/abc-def/",
              "/accounts/reset/done/"]


@pytest.fixture
def user(db):
    return User.objects.create_user("amy", email="amy@example.com", password="amy-password")


@pytest.mark.parametrize("url", RESET_URLS)
def test_without_mail_the_reset_pages_are_404(settings, user, url):
    settings.PASSWORD_RESET_ENABLED = False
    assert Client().get(url).status_code == 404


def test_without_mail_nothing_is_sent_and_the_link_is_hidden(settings, user):
    settings.PASSWORD_RESET_ENABLED = False
    client = Client()
    assert client.post("/accounts/password_reset/", {"email": "amy@example.com"}).status_code == 404
    assert mail.outbox == []
    page = client.get("/accounts/login/").content.decode()
    assert "/accounts/password_reset/" not in page


def test_with_mail_the_reset_works_and_is_linked(settings, user):
    settings.PASSWORD_RESET_ENABLED = True
    client = Client()
    assert 'href="/accounts/password_reset/"' in client.get("/accounts/login/").content.decode()
    assert client.get("/accounts/password_reset/").status_code == 200
    response = client.post("/accounts/password_reset/", {"email": "amy@example.com"})
    assert response.status_code == 302 and response["Location"] == "/accounts/password_reset/done/"
    assert len(mail.outbox) == 1 and "amy@example.com" in mail.outbox[0].to
    assert client.get("/accounts/password_reset/done/").status_code == 200


@pytest.mark.parametrize(("environ", "enabled"), [
    ({}, False),
    ({"EMAIL_HOST": "smtp.example.com"}, True),
    ({"EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend"}, True),
])
def test_the_switch_follows_the_environment(monkeypatch, environ, enabled):
    import importlib

    import config.settings as real

    for name in ("EMAIL_HOST", "EMAIL_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    try:
        assert importlib.reload(real).PASSWORD_RESET_ENABLED is enabled
    finally:
        monkeypatch.undo()
        importlib.reload(real)
