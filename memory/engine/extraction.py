"""Parsing of model output for fact/knowledge extraction and episode summaries.

Pure functions: no Django, no I/O. Events are reported through an optional
``emit(kind, payload)`` callback so callers decide where they go.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ExtractedFact:
    person_ref: str          # the participant's external id, as written by the model
    kind: str
    content: str
    slot: str = ""
    supersedes: int = 0


@dataclass(frozen=True)
class Extraction:
    facts: list[ExtractedFact] = field(default_factory=list)
    knowledge: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EpisodeDraft:
    summary: str
    cues: list[str]
