"""``make screenshots``: every console page, in both languages, as every role can see it.

Writes ``test-artifacts/screenshots/<language>/<role>/<page>.png`` (ignored by git) and an
``index.html`` beside them, so a reviewer can look at the whole console in a minute.
Skipped in ordinary test runs (``SCREENSHOTS=1`` turns it on).
"""
from __future__ import annotations

import os

import pytest

from tests.browser import tour
from tests.browser.conftest import ARTIFACTS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
    pytest.mark.skipif(not os.environ.get("SCREENSHOTS"), reason="make screenshots (SCREENSHOTS=1)"),
]

ROLES = ("operator", "reviewer", "staff", "demo")
LANGUAGES = ("zh-hans", "en")


def test_screenshots_of_every_page_per_language_and_role(login, live_server, frozen_now):
    from django.contrib.auth.models import User

    ids = tour.seed("zh-hans", now=frozen_now)
    out = ARTIFACTS / "screenshots"
    rows = []
    for role in ROLES:
        user = User.objects.get(username=role)
        page = login(role)
        page.set_viewport_size({"width": 1440, "height": 900})
        for language in LANGUAGES:
            page.context.add_cookies([{"name": "django_language", "value": language, "url": live_server.url}])
            folder = out / language / role
            folder.mkdir(parents=True, exist_ok=True)
            for name, path, perm in tour.pages(ids):
                if not user.has_perm(perm):
                    continue
                response = page.goto(f"{live_server.url}{path}")
                assert response.status == 200, (role, language, name, response.status)
                page.wait_for_load_state("networkidle")
                page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
                rows.append((language, role, name))
    links = "\n".join(
        f'<figure><figcaption>{lang} · {role} · {name}</figcaption>'
        f'<a href="{lang}/{role}/{name}.png"><img src="{lang}/{role}/{name}.png" loading="lazy" width="360"></a></figure>'
        for lang, role, name in rows
    )
    (out / "index.html").write_text(
        "<!doctype html><meta charset=utf-8><title>Memory Console screenshots</title>"
        "<style>body{display:flex;flex-wrap:wrap;gap:8px;font:12px sans-serif}figure{margin:0}</style>\n"
        + links, encoding="utf-8")
    assert len(rows) > 40
