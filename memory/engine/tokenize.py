"""Tokenisation for the FTS5 indexes (``tokenize='unicode61'``).

Index text = jieba words (precise mode) + CJK character bigrams, space-joined, so that
unicode61 indexes each produced token (bigrams give recall for names jieba does not know).
Latin-script words are analysed as English (:func:`english`): folded like ``unicode61``,
English stop words (:data:`EN_STOP_WORDS`) dropped, the rest reduced to their Snowball stem
(PyStemmer), so "painting", "painted" and "paints" are one term. Chinese words, digits and
mixed tokens (``144hz``) are left as they are. Every index (FTS5 rows, the resident BM25,
PostgreSQL's postings, inspect) and every query goes through :func:`words`, so a change here
needs a migration that re-tokenises the stored rows (``0028_english_analyser``).
Queries go through :func:`match_query`, which quotes every term and joins them with
``OR``: no FTS5 syntax (``*``, ``NEAR``, ``-``, ``AND``, parentheses, column filters)
coming from user text can ever reach the FTS5 parser unquoted.

jieba is imported once at module import; its logger is silenced and its dictionary
cache is written to ``$JIEBA_CACHE`` or ``<tmp>/memory-console-jieba.cache``. The
dictionary itself loads lazily on first use; call :func:`warm_up` at process start to
pay that cost (1–3 s) up front.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import tempfile
import threading
from collections.abc import Iterable

import jieba
import Stemmer

from memory.engine.bm25 import _fold, fts_tokens

__all__ = [
    "STOP_CHARS",
    "EN_STOP_WORDS",
    "english",
    "CJK_RE",
    "is_cjk",
    "warm_up",
    "words",
    "bigrams",
    "index_tokens",
    "query_terms",
    "match_expression",
    "match_query",
    "terms_of",
]

jieba.setLogLevel(60)
logging.getLogger("jieba").setLevel(60)
jieba.dt.cache_file = os.environ.get("JIEBA_CACHE") or os.path.join(tempfile.gettempdir(), "memory-console-jieba.cache")

#: 48 single CJK characters dropped when jieba emits them as a one-character word.
STOP_CHARS: frozenset[str] = frozenset(
    "的了和是在我你他她它们也就都而及与着过把被给让从到对为以之其于啊呀吗呢吧哦嗯这那有个不很会要说一"
)
#: One CJK character: Extension A, Unified Ideographs, Compatibility Ideographs.
CJK_RE = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN_RE = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD_CHAR_RE = re.compile(r"\w")

#: English function words dropped from Latin-script text (our own list: articles, pronouns,
#: auxiliaries, prepositions, conjunctions, the pieces jieba cuts contractions into).
EN_STOP_WORDS: frozenset[str] = frozenset("""
a an the and or but if then than so as of to in on at by for with from into onto about over under up down out off
is am are was were be been being do does did doing have has had having will would shall should can could may might must
i me my mine myself we us our ours ourselves you your yours yourself he him his himself she her hers herself it its
itself they them their theirs themselves this that these those there here what which who whom whose when where why how
not no nor too very just also any all each some such own same other only both few more most once again further
s t d ll m re ve don doesn didn isn aren wasn weren hasn haven hadn won wouldn shouldn couldn
""".split())
_LATIN_WORD_RE = re.compile("[a-z]+")
_stemmers = threading.local()  # a PyStemmer object is not to be shared between threads


def english(token: str) -> str | None:
    """A lower-cased Latin-script token analysed as English: ``None`` for a stop word, else its
    Snowball stem. Tokens that are not purely Latin letters (after folding) come back as they are."""
    folded = _fold(token)
    if _LATIN_WORD_RE.fullmatch(folded) is None:
        return token
    if folded in EN_STOP_WORDS:
        return None
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = Stemmer.Stemmer("english")
    return stemmer.stemWord(folded)


def is_cjk(char: str) -> bool:
    """True iff ``char`` (one character) lies in one of the three CJK ranges."""
    return CJK_RE.fullmatch(char) is not None


def warm_up() -> None:
    """Load jieba's dictionary now (idempotent, thread-safe)."""
    jieba.initialize()


def words(text: str) -> list[str]:
    """jieba precise-mode words of ``text``, stripped and lower-cased.

    Dropped: empty tokens, tokens without any ``\\w`` character (punctuation, symbols,
    whitespace), single-character CJK tokens in :data:`STOP_CHARS` and English stop words;
    Latin-script words become their English stem (:func:`english`). Order is kept and
    duplicates are kept (BM25 needs term frequency).
    """
    if not text:
        return []
    if len(text) > _CACHED_TEXT_CHARS:
        return list(_words(text))
    return list(_cached_words(text))


def _words(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for raw in jieba.cut(_fold(text), cut_all=False):  # folded first: jieba cuts "café" after the "f"
        token = raw.strip().lower()
        if not token or _WORD_CHAR_RE.search(token) is None:
            continue
        if len(token) == 1 and token in STOP_CHARS:
            continue
        token = english(token)
        if token is not None:
            out.append(token)
    return tuple(out)


# A turn cuts the same short texts several times (its match expression, the IDF coverage of
# each candidate pool, the context lines of the next turns): the words of recent short texts
# are remembered. jieba's dictionary is never changed at run time (no add_word / user dict).
_CACHED_TEXT_CHARS = 500
_cached_words = functools.lru_cache(maxsize=4096)(_words)


def bigrams(text: str) -> list[str]:
    """Adjacent character pairs inside maximal runs of CJK characters.

    Any non-CJK character (Latin, digits, spaces, full-width punctuation) ends a run;
    runs of length 1 yield nothing; duplicates are kept.
    """
    out: list[str] = []
    if not text:
        return out
    for match in _CJK_RUN_RE.finditer(text):
        run = match.group()
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def index_tokens(text: str) -> str:
    """Text to store in an FTS5 row: ``words(text) + bigrams(text)`` (duplicates kept) as the
    terms FTS5's ``unicode61`` makes of them, space-separated.

    Storing the terms themselves (``li_ming`` as ``li ming``, ``Café`` as ``cafe``) gives FTS5
    the very tokens it would index anyway, and lets a reader split the stored string with
    ``str.split`` instead of re-tokenising it.
    """
    return " ".join(fts_tokens(" ".join(words(text) + bigrams(text))))


def query_terms(text: str) -> list[str]:
    """The de-duplicated query terms of ``text`` (``words + bigrams``, first occurrence kept)."""
    return list(dict.fromkeys(words(text) + bigrams(text)))


def match_expression(terms: Iterable[str]) -> str:
    """Quote every term (internal ``"`` doubled) and join with ``' OR '``; no terms → ``''``.

    Terms are de-duplicated preserving order; empty strings are skipped.
    """
    quoted = ['"' + term.replace('"', '""') + '"' for term in dict.fromkeys(terms) if term]
    return " OR ".join(quoted)


_QUOTED = re.compile(r'"((?:[^"]|"")*)"')


def terms_of(match: str) -> list[str]:
    """The terms of a ``MATCH`` expression built by :func:`match_expression` (quotes undone)."""
    return [t.replace('""', '"') for t in _QUOTED.findall(match)]


def match_query(text: str) -> str:
    """FTS5 ``MATCH`` expression for free user text: ``match_expression(query_terms(text))``.

    ``''`` means "nothing to search" — callers must return no hits without querying.
    """
    return match_expression(query_terms(text))
