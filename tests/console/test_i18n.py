"""Chinese by default, English through the language switch (Django i18n)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import translation

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


CALL = re.compile(r"\b(gettext|pgettext|ngettext|npgettext)\((u?'(?:[^'\\]|\\.)*'(?:\s*,\s*u?'(?:[^'\\]|\\.)*')*)")
PY_GETTEXT = {"_", "gettext", "gettext_lazy", "pgettext", "pgettext_lazy", "ngettext", "ngettext_lazy"}
CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")


def _template_messages() -> list[tuple[str, str, tuple[str, ...]]]:
    """(where, gettext function, its string arguments) of every translatable string of the templates."""
    from django.utils.translation.template import templatize

    out = []
    for path in sorted((Path(settings.BASE_DIR) / "templates").rglob("*.html")):
        source = templatize(path.read_text(encoding="utf-8"), origin=str(path))
        for name, args in CALL.findall(source):
            out.append((path.name, name, tuple(ast.literal_eval(f"({args},)"))))
    return out


def _python_messages() -> list[tuple[str, str, tuple[str, ...]]]:
    """The same for the Python of the apps: calls of ``_``/``gettext``/``pgettext``/… with literal strings."""
    out = []
    for app in ("console", "curation", "tuning", "memory", "config"):
        for path in sorted((Path(settings.BASE_DIR) / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PY_GETTEXT:
                    args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                    if args:
                        name = "gettext" if node.func.id == "_" else node.func.id.removesuffix("_lazy")
                        out.append((path.name, name, tuple(args)))
    return out


def _english(name: str, args: tuple[str, ...]) -> list[tuple[str, str]]:
    """(Chinese source, its English) for each form of the message."""
    if name == "gettext":
        return [(args[0], translation.gettext(args[0]))]
    if name == "pgettext":
        return [(args[1], translation.pgettext(args[0], args[1]))]
    if name == "ngettext":
        return [(args[0], translation.ngettext(args[0], args[1], 1)), (args[1], translation.ngettext(args[0], args[1], 2))]
    return [(args[1], translation.npgettext(args[0], args[1], args[2], 1)),
            (args[2], translation.npgettext(args[0], args[1], args[2], 2))]


def test_every_translatable_string_has_an_english_translation():
    """Every string the templates and the apps' Python mark for translation — not only those that made it into
    the catalogue — reads in English: a Chinese message left out of django.po fails here."""
    messages = _template_messages() + _python_messages()
    assert len({m for _, _, m in _template_messages()}) > 200 and len(_python_messages()) > 50  # the scan finds them
    with translation.override("en"):
        missing = sorted({(where, zh) for where, name, args in messages for zh, en in _english(name, args)
                          if CJK.search(zh) and en == zh})
    assert not missing, f"{len(missing)} strings without an English translation: {missing[:20]}"
    po = (Path(settings.BASE_DIR) / "locale/en/LC_MESSAGES/django.po").read_text(encoding="utf-8")
    assert "#, fuzzy" not in po
