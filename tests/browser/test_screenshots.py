"""``make screenshots``: every console page, in both languages, as every role can see it, and
every page on a phone (390 px, as the superuser ``demo``, who sees them all).

Writes ``test-artifacts/screenshots/<language>/<role>/<page>.png`` (``<role>`` = ``phone`` for
390 px; ignored by git) and an ``index.html`` beside them, so a reviewer can look at the whole
console in a minute. Skipped in ordinary test runs (``SCREENSHOTS=1`` turns it on).
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
    for role in (*ROLES, "phone"):
        user = User.objects.get(username="demo" if role == "phone" else role)
        page = login(user.username)
        page.set_viewport_size({"width": 390, "height": 844} if role == "phone" else {"width": 1440, "height": 900})
        for language in LANGUAGES:
            page.context.add_cookies([{"name": "django_language", "value": language, "url": live_server.url}])
            folder = out / language / role
            folder.mkdir(parents=True, exist_ok=True)
            for target in tour.pages(ids):
                if not user.has_perm(target.perm):
                    continue
                response = tour.open_page(page, live_server.url, target)
                assert response.status == target.status, (role, language, target.name, response.status)
                page.wait_for_function(tour.SETTLED_JS)
                page.screenshot(path=str(folder / f"{target.name}.png"), full_page=True)
                rows.append((language, role, target.name))
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
