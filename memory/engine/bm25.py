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

K1 = 1.2
B = 0.75
IDF_FLOOR = 1e-6          # FTS5 replaces a non-positive IDF by this


def fts_idf(n_rows: int, df: int) -> float:
    """FTS5's IDF of a term that ``df`` of ``n_rows`` rows hold (a non-positive one is :data:`IDF_FLOOR`)."""
    value = math.log((n_rows - df + 0.5) / (df + 0.5))
    return value if value > 0.0 else IDF_FLOOR

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
