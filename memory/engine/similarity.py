"""Near-duplicate detection between two fact texts.

Two texts describe the same fact when their normalised forms are equal, or when the
Jaccard index of their character sets is at least ``CHAR_THRESHOLD`` **and** the Jaccard
index of their CJK bigram sets is at least ``BIGRAM_THRESHOLD`` (the bigram check
rejects reorderings that flip the meaning, e.g. 玩家喜欢猫 / 猫喜欢玩家).
"""

from __future__ import annotations

import re

from .tokenize import bigrams

__all__ = ["CHAR_THRESHOLD", "BIGRAM_THRESHOLD", "exact_key", "similarity", "is_same_fact"]

CHAR_THRESHOLD: float = 0.85
BIGRAM_THRESHOLD: float = 0.55

# Anything that is neither a word character nor CJK: punctuation, spaces, symbols.
_DROP_RE = re.compile("[^\\w\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def exact_key(text: str) -> str:
    """Normalised text: every char that is neither ``\\w`` nor CJK removed, then lower-cased."""
    return _DROP_RE.sub("", text or "").lower()


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def similarity(a: str, b: str) -> dict[str, float]:
    """Both Jaccard indices of the normalised texts: ``{'char': ..., 'bigram': ...}``."""
    na, nb = exact_key(a), exact_key(b)
    return {
        "char": _jaccard(set(na), set(nb)),
        "bigram": _jaccard(set(bigrams(na)), set(bigrams(nb))),
    }


def is_same_fact(a: str, b: str) -> bool:
    """True iff ``a`` and ``b`` are the same fact (see module docstring)."""
    na, nb = exact_key(a), exact_key(b)
    if na == nb:
        return True
    if _jaccard(set(na), set(nb)) < CHAR_THRESHOLD:
        return False
    return _jaccard(set(bigrams(na)), set(bigrams(nb))) >= BIGRAM_THRESHOLD
