"""What a fact shows beside its text on every page that lists facts (console and curation pages)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memory import selectors
from memory.models import Fact, FactState


def decorate_facts(facts: Iterable[Fact], *, now: int, breakdown: dict[int, Any] | None = None) -> None:
    """Set ``retention``, ``conflicted`` and (for search hits) ``breakdown`` on facts."""
    facts = list(facts)
    conflicted = set(selectors.conflict_group_keys(person_ids={f.person_id for f in facts if f.slot}))
    for f in facts:
        f.retention = f.retention_at(now)
        f.conflicted = f.state == FactState.ACTIVE and (f.person_id, f.slot) in conflicted
        hit = (breakdown or {}).get(f.pk)
        f.breakdown = hit
