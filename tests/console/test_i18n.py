"""Chinese by default, English through the language switch (Django i18n)."""
from __future__ import annotations

import pytest
from django.conf import settings
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_chinese_is_the_default(operator, memory_set):
    html = operator.get(reverse("console:facts")).content.decode()
    assert '<html lang="zh-hans">' in html and "永久保留" in html and "全部人物" in html


def test_the_switch_turns_the_console_english(operator, memory_set):
    page = operator.get(reverse("console:facts")).content.decode()
    assert f'action="{reverse("set_language")}"' in page and 'value="en"' in page
    response = operator.post(reverse("set_language"), {"language": "en", "next": reverse("console:facts")})
    assert response.status_code == 302
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "en"
    html = operator.get(reverse("console:facts")).content.decode()
    assert '<html lang="en">' in html
    assert "All persons" in html and ">Pin<" in html and "Invalidate" in html and "Dashboard" in html
    assert "小林住在杭州" in html  # memory text itself is never translated


def test_browsers_asking_for_english_get_english(operator):
    html = operator.get(reverse("console:dashboard"), headers={"Accept-Language": "en"}).content.decode()
    assert "Background queues" in html


def test_every_translatable_string_has_an_english_translation():
    from pathlib import Path

    po = (Path(settings.BASE_DIR) / "locale/en/LC_MESSAGES/django.po").read_text(encoding="utf-8")
    assert 'msgstr ""\n\n' not in po.split("\n\n", 1)[1]  # no empty translation after the header
    assert "#, fuzzy" not in po
    assert (Path(settings.BASE_DIR) / "locale/en/LC_MESSAGES/django.mo").exists()
