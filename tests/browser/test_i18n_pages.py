"""Every page in both languages, with no interface text left in the other one.

English: memory written without Chinese characters, so any CJK character on a page is
an untranslated label. Chinese: memory written without Latin letters, so an English word
or a raw code (``direct``, ``assistant``, ``memory_fact_scope_blocked``) is a leak; a few
names that are the same in both languages (nDCG, BM25, JSON…) are allowed.
"""
from __future__ import annotations

import re

import pytest

from tests.browser import tour

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]+")
#: Latin words allowed in the Chinese interface: proper names, units, metric names.
LATIN_OK = {
    "Memory", "Console", "BM25", "nDCG", "R",  # R@k: recall at k, a metric name like nDCG@k
    "PPR", "JSON", "ID", "SQ8", "API", "top", "k", "ms", "h", "s", "qq",
    "Celery", "Redis", "FTS5", "A", "B", "PageRank", "IDF", "Ctrl", "C", "PORT", "make", "run", "KB", "UTF",
    "desktop",  # data: the platform of the desktop stream, like qq
    "demo", "operator", "reviewer", "staff",  # data: user names
    "seed",  # the name of the built-in retrieval profile (a name, like a profile an operator saves)
}
LATIN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _leaks(text: str, language: str) -> list[str]:
    if language == "en":
        return sorted(set(CJK.findall(text)))
    return sorted({w for w in LATIN.findall(text) if w not in LATIN_OK})


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_every_page_speaks_one_language(login, live_server, frozen_now, language):
    ids = tour.seed(language, now=frozen_now)
    page = login("demo")
    page.context.add_cookies([{"name": "django_language", "value": language, "url": live_server.url}])
    leaks = {}
    for name, path, _perm in tour.pages(ids):
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 200, (name, response.status)
        text = page.evaluate(tour.VISIBLE_TEXT_JS)
        found = _leaks(text, language)
        if found:
            leaks[name] = [(f, text[max(0, text.find(f) - 40):text.find(f) + 20]) for f in found]
    assert not leaks, leaks
