"""Near-duplicate detection between two fact texts.

Two texts describe the same fact when their normalised forms are equal, or when the
Jaccard index of their character sets is at least ``CHAR_THRESHOLD`` **and** the Jaccard
index of their CJK bigram sets is at least ``BIGRAM_THRESHOLD`` (the bigram check
rejects reorderings that flip the meaning, e.g. 玩家喜欢猫 / 猫喜欢玩家).

Beyond the reference: the second set also holds the non-CJK *words* of each text
(runs of letters and digits). The reference uses CJK bigrams only, so two English
sentences — whose letter sets always overlap above 0.85 and whose (empty) bigram
sets count as identical — were merged into one fact. Pure Chinese text has no
such words, so its behaviour is exactly the reference's.
"""

from __future__ import annotations

import re

from .tokenize import bigrams

__all__ = ["CHAR_THRESHOLD", "BIGRAM_THRESHOLD", "exact_key", "similarity", "is_same_fact"]

CHAR_THRESHOLD: float = 0.85
BIGRAM_THRESHOLD: float = 0.55

# Anything that is neither a word character nor CJK: punctuation, spaces, symbols.
_DROP_RE = re.compile("[^\\w\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# A run of word characters that are not CJK: an English word, a number, a code.
_WORD_RE = re.compile("[^\\W\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def exact_key(text: str) -> str:
    """Normalised text: every char that is neither ``\\w`` nor CJK removed, then lower-cased."""
    return _DROP_RE.sub("", text or "").lower()


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _units(text: str, normalised: str) -> set[str]:
    """CJK bigrams of the normalised text plus the non-CJK words of the text."""
    return set(bigrams(normalised)) | set(_WORD_RE.findall((text or "").lower()))


def similarity(a: str, b: str) -> dict[str, float]:
    """Both Jaccard indices of the normalised texts: ``{'char': ..., 'bigram': ...}``."""
    na, nb = exact_key(a), exact_key(b)
    return {
        "char": _jaccard(set(na), set(nb)),
        "bigram": _jaccard(_units(a, na), _units(b, nb)),
    }


def is_same_fact(a: str, b: str) -> bool:
    """True iff ``a`` and ``b`` are the same fact (see module docstring)."""
    na, nb = exact_key(a), exact_key(b)
    if na == nb:
        return True
    if _jaccard(set(na), set(nb)) < CHAR_THRESHOLD:
        return False
    return _jaccard(_units(a, na), _units(b, nb)) >= BIGRAM_THRESHOLD
