"""Model providers: chat models, embedders, summarisers and fact extractors.

Nothing in this package imports Django at import time except ``config.py``,
the factory module that reads ``django.conf.settings`` lazily.

This module holds the three provider protocols the memory code is typed with
(:class:`Embedder`, :class:`Summariser`, :class:`Extractor`; chat models are
``chat.ChatModel``), the plain input types shared by the LLM and heuristic
summarisers/extractors, and the dialogue cleaning both of them apply, so the
"body shorter than 40 characters" contract means the same thing for each.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from memory.engine.extraction import MIN_DIALOGUE_CHARS, EpisodeDraft, Extraction

__all__ = [
    "DialogueLine",
    "Embedder",
    "Emit",
    "Extractor",
    "KnownFact",
    "MIN_DIALOGUE_CHARS",
    "Participant",
    "Summariser",
    "clean_content",
    "usable_lines",
]

Emit = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class DialogueLine:
    """One message of a batch, as the summariser/extractor sees it."""

    role: Literal["user", "assistant"]
    speaker_ref: str | None  # the participant's external id; None if unknown
    speaker_name: str
    content: str


@dataclass(frozen=True)
class Participant:
    external_id: str
    name: str
    person_id: int | None = None


@dataclass(frozen=True)
class KnownFact:
    """A fact already remembered, offered to the extractor for de-dup/supersede."""

    id: int
    person_ref: str  # the participant's external id
    content: str
    slot: str = ""


class Embedder(Protocol):
    """Turns texts into unit vectors of one space (``name``, ``dim``); ``None`` where one failed."""

    name: str
    label: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[np.ndarray | None]: ...


class Summariser(Protocol):
    label: str

    def summarise(
        self, lines: Sequence[DialogueLine], participants: Sequence[Participant] = ()
    ) -> EpisodeDraft | None: ...


class Extractor(Protocol):
    label: str

    def extract(
        self,
        lines: Sequence[DialogueLine],
        participants: Sequence[Participant],
        known_facts: Sequence[KnownFact] = (),
        *,
        emit: Emit | None = None,
    ) -> Extraction | None: ...


# Assistant side-channel markup that never belongs in a memory (docs/REFERENCE.md §15).
_BLOCK_TAGS = re.compile(r"<(memory|mood|think|thinking)\b[^>]*>.*?</\1\s*>", re.S | re.I)
_SELF_CLOSING = re.compile(r"<(?:memory|mood)\b[^>]*/>", re.I)
_SAY_TAGS = re.compile(r"</?say\b[^>]*>", re.I)


def clean_content(line: DialogueLine) -> str:
    """Return the line's text on one line, assistant markup removed."""
    text = line.content or ""
    if line.role == "assistant":
        text = _BLOCK_TAGS.sub("", text)
        text = _SELF_CLOSING.sub("", text)
        text = _SAY_TAGS.sub("", text)
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def usable_lines(lines: Iterable[DialogueLine], *, min_chars: int = 1) -> list[tuple[DialogueLine, str]]:
    """Pair each line with its cleaned text, dropping lines shorter than ``min_chars``."""
    out = []
    for line in lines:
        text = clean_content(line)
        if len(text) >= min_chars:
            out.append((line, text))
    return out
