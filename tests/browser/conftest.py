"""Playwright against pytest-django's live server, with the system Chromium.

Playwright's sync API keeps an event loop running in the test thread, which has
two consequences for Django:

* Django refuses ORM calls in a thread with a running loop ("async unsafe"); the
  tests only touch the ORM between browser steps, so the guard is lifted while the
  browser is up (one browser per test module, the variable restored afterwards).
* ``django.db.connections`` is then context-local instead of thread-local, so the
  test thread gets a second connection object (same shared-cache in-memory test
  database) without the ``_test_serialized_contents`` that serialized rollback
  needs; :func:`_serialized_contents_follow_the_loop` carries it over, otherwise the
  flush after each test would re-run ``post_migrate`` and break later
  serialized-rollback tests.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.console.conftest import _console_settings, frozen_now, memory_set  # noqa: F401  (shared fixtures)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser/" in str(item.fspath):
            item.add_marker(pytest.mark.browser)


_SERIALIZED: dict[str, str | None] = {}


@pytest.fixture(scope="module")
def browser(django_db_setup, django_db_blocker):
    from django.db import connections

    with django_db_blocker.unblock():
        contents = getattr(connections["default"], "_test_serialized_contents", None)
    if contents is not None:  # a later module's connection object may have lost it: keep the first capture
        _SERIALIZED["default"] = contents
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        # `make test` needs it (.ci/run installs it); `make test-fast` leaves browser tests out.
        pytest.fail("the system Chromium is not installed: apt-get install chromium fonts-wqy-microhei "
                    "(or run `make test-fast`)")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            instance = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            yield instance
            instance.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(autouse=True)
def _serialized_contents_follow_the_loop(request):
    if "browser" not in request.fixturenames and "login" not in request.fixturenames:
        return
    request.getfixturevalue("browser")
    from django.db import connections

    contents = _SERIALIZED.get("default")
    connection = connections["default"]
    if contents is not None and not hasattr(connection, "_test_serialized_contents"):
        connection._test_serialized_contents = contents


@pytest.fixture
def users(transactional_db):
    """The three role users and a superuser, as ``seed_demo`` creates them."""
    from django.contrib.auth.models import User

    from memory.management.commands.ensure_roles import ensure_roles

    groups = ensure_roles()
    for name in ("operator", "reviewer", "staff"):
        user = User.objects.create_user(name, password=f"{name}-password")
        user.groups.add(groups[name])
    User.objects.create_superuser("demo", "demo@example.com", "demo-password")


@pytest.fixture
def login(browser, live_server, users):
    """``login('operator')`` → a logged-in page (Chinese locale) of a fresh browser context."""
    contexts = []
    errors: list[str] = []

    def make(username: str, *, javascript: bool = True):
        context = browser.new_context(locale="zh-CN", viewport={"width": 1400, "height": 900},
                                      java_script_enabled=javascript)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(10_000)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm dialogs
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", "demo-password" if username == "demo" else f"{username}-password")
        page.click("form button.primary")
        page.wait_for_url(f"{live_server.url}/")
        return page

    make.errors = errors
    yield make
    for context in contexts:
        context.close()
    assert not errors, errors


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
