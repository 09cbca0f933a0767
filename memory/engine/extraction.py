"""Parsing of model output for fact/knowledge extraction and episode summaries.

Pure functions: no Django, no I/O. Events are reported through an optional
``emit(kind, payload)`` callback so callers decide where they go.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from .decay import DEFAULT_FACT_KIND, FACT_KINDS


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


# --- parsing ---------------------------------------------------------------------------

#: The known-facts list in the extraction prompt: at most this many lines in total …
KNOWN_FACT_LIMIT = 30
#: … and at most this many per participant.
KNOWN_FACT_PER_PERSON = 6
#: A rendered dialogue shorter than this is not sent to the model.
MIN_DIALOGUE_CHARS = 40
#: Accepted slot lengths (characters, after stripping).
SLOT_MIN_CHARS = 2
SLOT_MAX_CHARS = 6
#: Event kinds reported through ``emit``.
EVENT_KIND_NORMALIZED = "memory_fact_kind_normalized"
EVENT_SUPERSEDE_DROPPED = "memory_fact_supersede_dropped"

EmitFn = Callable[[str, dict[str, Any]], None]

_FENCE_RE = re.compile(r"```(?:json)?", re.IGNORECASE)
_SUPERSEDES_RE = re.compile(r"#?\s*([0-9]+)")


def _json_object(raw: str | None) -> dict[str, Any] | None:
    """Strip code fences, take the text from the first ``{`` to the last ``}`` and parse it."""
    text = _FENCE_RE.sub("", raw or "").strip()
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        payload = json.loads(text[start : end + 1])
    except (ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def _parse_supersedes(raw: object) -> int:
    """``supersedes`` as a fact id: a positive int, or a string ``"#12"`` / ``"12"``; else 0."""
    if isinstance(raw, bool):
        return 0
    if isinstance(raw, int):
        return raw if raw > 0 else 0
    if isinstance(raw, str):
        match = _SUPERSEDES_RE.fullmatch(raw.strip())
        if match:
            value = int(match.group(1))
            return value if value > 0 else 0
    return 0


def parse_extraction(
    raw: str | None,
    known_fact_ids: Collection[int] = (),
    emit: EmitFn | None = None,
) -> Extraction | None:
    """Validate a model's extraction output.

    The output must contain a JSON object (code fences and surrounding prose are
    tolerated; the text between the first ``{`` and the last ``}`` is parsed) holding at
    least one of the keys ``facts`` / ``knowledge``; each of them, when present and not
    null, must be a list. Returns ``None`` (whole batch rejected) for invalid JSON, a
    non-object, neither key present (this also rejects the old bare-array contract),
    a non-list value, or any fact item that is not an object with non-blank string
    ``person`` and ``content``. Otherwise, per fact:

    * ``kind`` outside ``FACT_KINDS`` (also missing/blank) becomes ``事件`` and emits
      ``memory_fact_kind_normalized {rawKind ('<空>' if blank), normalizedKind}``;
    * ``slot`` is stripped; a length outside 2..6 becomes ``''``;
    * ``supersedes`` accepts a positive int or ``"#12"``/``"12"`` (bools, floats, other text → 0);
      an id not in ``known_fact_ids`` becomes 0 and emits
      ``memory_fact_supersede_dropped {supersededId, reason: 'not_in_known_list'}``.

    Knowledge items that are non-blank strings are kept (stripped); anything else is
    skipped individually. Two empty lists are a valid result ("nothing to remember").
    ``emit(kind, payload)`` is optional.
    """
    payload = _json_object(raw)
    if payload is None:
        return None
    if "facts" not in payload and "knowledge" not in payload:
        return None
    raw_facts = payload.get("facts")
    raw_knowledge = payload.get("knowledge")
    raw_facts = [] if raw_facts is None else raw_facts
    raw_knowledge = [] if raw_knowledge is None else raw_knowledge
    if not isinstance(raw_facts, list) or not isinstance(raw_knowledge, list):
        return None

    known = set(known_fact_ids)
    events: list[tuple[str, dict[str, Any]]] = []
    facts: list[ExtractedFact] = []
    for item in raw_facts:
        if not isinstance(item, dict):
            return None
        person = item.get("person")
        content = item.get("content")
        if not isinstance(person, str) or not person.strip():
            return None
        if not isinstance(content, str) or not content.strip():
            return None
        raw_kind = item.get("kind")
        kind = raw_kind.strip() if isinstance(raw_kind, str) else ""
        if kind not in FACT_KINDS:
            events.append((EVENT_KIND_NORMALIZED, {"rawKind": kind or "<空>", "normalizedKind": DEFAULT_FACT_KIND}))
            kind = DEFAULT_FACT_KIND
        raw_slot = item.get("slot")
        slot = raw_slot.strip() if isinstance(raw_slot, str) else ""
        if slot and not SLOT_MIN_CHARS <= len(slot) <= SLOT_MAX_CHARS:
            slot = ""
        supersedes = _parse_supersedes(item.get("supersedes"))
        if supersedes and supersedes not in known:
            events.append((EVENT_SUPERSEDE_DROPPED, {"supersededId": supersedes, "reason": "not_in_known_list"}))
            supersedes = 0
        facts.append(
            ExtractedFact(
                person_ref=person.strip(),
                kind=kind,
                content=content.strip(),
                slot=slot,
                supersedes=supersedes,
            )
        )

    knowledge = [item.strip() for item in raw_knowledge if isinstance(item, str) and item.strip()]
    # Events only for batches that are accepted: a rejected batch is retried as a whole.
    if emit is not None:
        for kind_name, event_payload in events:
            emit(kind_name, event_payload)
    return Extraction(facts=facts, knowledge=knowledge)


def parse_episode(raw: str | None) -> EpisodeDraft | None:
    """Validate a model's episode summary output.

    Same JSON extraction as :func:`parse_extraction`; the object needs a non-blank string
    ``summary`` (else ``None``). ``recall_cues`` keeps the non-blank strings (stripped,
    de-duplicated in order; a single string counts as one cue; other values are ignored).
    If no cue survives, the summary itself becomes the only cue.
    """
    payload = _json_object(raw)
    if payload is None:
        return None
    summary = payload.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        return None
    summary = summary.strip()
    raw_cues = payload.get("recall_cues")
    if isinstance(raw_cues, str):
        raw_cues = [raw_cues]
    elif not isinstance(raw_cues, list):
        raw_cues = []
    cues = list(dict.fromkeys(c.strip() for c in raw_cues if isinstance(c, str) and c.strip()))
    return EpisodeDraft(summary=summary, cues=cues or [summary])
