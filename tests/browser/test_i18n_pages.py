"""Every page in both languages, on a phone: no interface text left in the other language, and
no page wider than the screen.

English: memory written without Chinese characters, so any CJK character on a page (its title,
its text, hidden or not, and what people read in attributes: tooltips, placeholders, dialog
questions) is an untranslated label — fact kinds, operations, jobs and forget titles included,
since the tour stores one of each the way the system stores them. Chinese: memory written
without Latin letters, so an English word or a raw code (``direct``, ``extract:stream4``,
``seed_demo``, ``fact #2``) is a leak; a few names that are the same in both languages (nDCG,
BM25, JSON…) are allowed. Every page is opened at 390 px: the page itself must not scroll
sideways (a wide table scrolls inside its own box or stacks its rows).
"""
from __future__ import annotations

import json
import re

import pytest

from tests.browser import tour
from tests.browser.conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PHONE = {"width": 390, "height": 844}
CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]+")
#: Latin words allowed in the Chinese interface: proper names, units, metric names.
LATIN_OK = {
    "Memory", "Console", "BM25", "nDCG", "JSON", "ID", "API", "top", "k", "ms", "h", "s", "QQ", "JavaScript",
    "R",  # R@k: recall at k, a metric name like nDCG@k
    "Celery", "Redis", "FTS5", "A", "B", "PageRank", "IDF", "Ctrl", "C", "PORT", "make", "run", "KB", "UTF",
    "demo", "operator", "reviewer", "staff",  # data: user names
    "reference",  # the name of the built-in retrieval profile (a name, like a profile an operator saves)
    "admin",  # the name of the token scope the warning asks to narrow (scopes are names, shown as code elsewhere)
}
LATIN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _leaks(text: str, language: str) -> list[str]:
    if language == "en":
        return sorted(set(CJK.findall(text)))
    return sorted({w for w in LATIN.findall(text) if w not in LATIN_OK})


def _context(text: str, word: str) -> str:
    at = text.find(word)
    return text[max(0, at - 40):at + len(word) + 20].replace("\n", " | ")


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_every_page_speaks_one_language_and_fits_a_phone(browser, login, live_server, frozen_now, language):
    ids = tour.seed(language, now=frozen_now)
    page = login("demo")
    page.set_viewport_size(PHONE)
    page.context.add_cookies([{"name": "django_language", "value": language, "url": live_server.url}])
    leaks, wide, statuses = {}, {}, {}
    for target in tour.pages(ids):
        response = tour.open_page(page, live_server.url, target)
        if response.status != target.status:
            statuses[target.name] = response.status
        page.wait_for_function(tour.SETTLED_JS)  # panels that load themselves (the worker card)
        text = page.evaluate(tour.INTERFACE_TEXT_JS)
        found = _leaks(text, language)
        if found:
            leaks[target.name] = [(f, _context(text, f)) for f in found]
        overflow = page.evaluate(tour.OVERFLOW_JS)
        if overflow > 0:
            wide[target.name] = overflow
    # the login page, signed out
    guest = browser.new_context(locale="zh-CN", viewport=PHONE)
    guest.add_cookies([{"name": "django_language", "value": language, "url": live_server.url}])
    anonymous = guest.new_page()
    anonymous.goto(f"{live_server.url}/accounts/login/")
    text = anonymous.evaluate(tour.INTERFACE_TEXT_JS)
    if _leaks(text, language):
        leaks["login"] = _leaks(text, language)
    if anonymous.evaluate(tour.OVERFLOW_JS) > 0:
        wide["login"] = anonymous.evaluate(tour.OVERFLOW_JS)
    guest.close()
    if leaks:  # the whole list, for the one who fixes them (an assertion message is cut short)
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / f"i18n-leaks-{language}.json").write_text(json.dumps(leaks, ensure_ascii=False, indent=1))
    assert not statuses, statuses
    assert not leaks, leaks
    assert not wide, f"wider than a 390 px screen (px too wide): {wide}"
