"""FTS5's bm25 constants and its ``unicode61`` tokenizer, in plain Python (no Django).

Both lexical backends rank with these: the resident index (``memory/search/lexical_index.py``)
and PostgreSQL's postings (``memory/backends/postgresql.py``) compute the very score FTS5's
``bm25()`` gives, from the tokens ``unicode61`` (remove_diacritics=1) makes of the stored
``index_tokens`` strings.
"""
from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence

K1 = 1.2
B = 0.75
IDF_FLOOR = 1e-6          # FTS5 replaces a non-positive IDF by this


def fts_idf(n_rows: int, df: int) -> float:
    """FTS5's IDF of a term that ``df`` of ``n_rows`` rows hold (a non-positive one is :data:`IDF_FLOOR`)."""
    value = math.log((n_rows - df + 0.5) / (df + 0.5))
    return value if value > 0.0 else IDF_FLOOR

def scope_idf(n_rows: int, df: int) -> float:
    """The IDF of a term that ``df`` of the ``n_rows`` rows of a ranked scope hold (:func:`scope_bm25`):
    ``ln(1 + (N - df + 0.5) / (df + 0.5))``, BM25's IDF kept positive. FTS5's (:func:`fts_idf`) is
    floored at nothing for a term in half the rows or more — in a scope of two or three facts, every
    term — while a scope's common words must still weigh a little: a person's name is in half of
    their facts, and still tells theirs from another person's."""
    if df <= 0:
        return 0.0
    return math.log(1.0 + (max(n_rows, df) - df + 0.5) / (df + 0.5))


def phrase_frequency(phrase: Sequence[str], doc: Sequence[str]) -> int:
    """Occurrences of ``phrase`` (consecutive tokens) in ``doc`` (its tokens in order)."""
    if len(phrase) == 1:
        return doc.count(phrase[0])
    width = len(phrase)
    first = phrase[0]
    return sum(1 for i, t in enumerate(doc) if t == first and list(doc[i:i + width]) == list(phrase))


def scope_bm25(phrases: Sequence[Sequence[str]], docs: Mapping[int, Sequence[str]], extra_tokens: int = 0) -> dict[int, float]:
    """bm25 (negative, lower is better) of the OR-ed ``phrases`` for each document of ``docs`` (id →
    its unicode61 tokens) that holds one, with the statistics of ``docs`` themselves: their count,
    each phrase's document frequency among them (:func:`scope_idf`) and their average length
    (``extra_tokens`` per document for unweighted scope columns, as FTS5 counts them).

    A person-scoped query ranks the facts of the persons it is about: a word that is rare in the
    whole table but in half of these facts (the person's name) says little about which of them
    is meant. Otherwise FTS5's formula and order of operations (k1 = 1.2, b = 0.75, phrases in
    query order); the resident index computes the same numbers
    (:meth:`memory.search.lexical_index.ResidentBM25.scores_for` with ``scope``).
    """
    n = len(docs)
    if n == 0 or not phrases:
        return {}
    freqs = {pid: {} for pid in range(len(phrases))}
    wanted = {t for p in phrases for t in p}
    total = 0.0
    for doc_id, doc in docs.items():
        total += float(len(doc) + extra_tokens)
        if wanted.isdisjoint(doc):
            continue
        for k, phrase in enumerate(phrases):
            f = phrase_frequency(phrase, doc)
            if f:
                freqs[k][doc_id] = f
    avgdl = total / n
    idfs = [scope_idf(n, len(freqs[k])) for k in range(len(phrases))]
    scores: dict[int, float] = {}
    for doc_id in sorted({d for f in freqs.values() for d in f}):
        norm = K1 * ((1.0 - B) + B * float(len(docs[doc_id]) + extra_tokens) / avgdl)  # fts5_bm25's order of operations
        score = 0.0
        for k in range(len(phrases)):
            tf = float(freqs[k].get(doc_id, 0))
            score += idfs[k] * ((tf * (K1 + 1.0)) / (tf + norm))
        scores[doc_id] = -1.0 * score
    return scores


_TOKEN = re.compile(r"[^\W_]+")
FOLDABLE = re.compile("[\u0080-\u024f\u1e00-\u1eff]")  # the characters _fold may change


def _fold(text: str) -> str:
    """Lower-case and drop Latin diacritics, as ``unicode61`` (remove_diacritics=1) does."""
    text = text.lower()
    if text.isascii() or FOLDABLE.search(text) is None:  # nothing a diacritic could sit on (CJK text)
        return text
    return "".join(
        unicodedata.normalize("NFD", ch)[0] if ch < "\u0250" or "\u1e00" <= ch <= "\u1eff" else ch for ch in text
    )


def fts_tokens(text: str) -> list[str]:
    """The tokens ``unicode61`` makes of ``text`` (runs of letters and digits)."""
    return _TOKEN.findall(_fold(text))
