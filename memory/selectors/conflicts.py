"""Slot conflicts: groups of active valid facts of one person sharing a slot."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import Count, Q, QuerySet

from memory.engine import decay
from memory.models import Fact, Identity, Person


def _members() -> QuerySet[Fact]:
    """Facts that can be in a slot-conflict group: active, valid (not superseded), with a slot."""
    return Fact.objects.filter(active=True, superseded_by__isnull=True).exclude(slot="")


def _of_groups(keys: Iterable[tuple[int, str]]) -> Q:
    """The facts of the given ``(person, slot)`` groups (no fact for no key)."""
    return reduce(or_, (Q(person_id=p, slot=slot) for p, slot in sorted(keys)), Q(pk__in=[]))


def conflict_group_keys(*, person_ids: Iterable[int] | None = None) -> list[tuple[int, str]]:
    """``(person, slot)`` of every group with two or more members, in order (one query).

    ``person_ids`` limits the groups to those persons (none for an empty list).
    """
    rows = _members()
    if person_ids is not None:
        rows = rows.filter(person_id__in=set(person_ids))
    pairs = rows.values("person_id", "slot").annotate(n=Count("id")).filter(n__gte=2).order_by("person_id", "slot")
    return [(p["person_id"], p["slot"]) for p in pairs]


def conflict_members(keys: Iterable[tuple[int, str]]) -> dict[tuple[int, str], list[tuple[int, str]]]:
    """Members ``(id, content)`` by id of the slot-conflict groups among the given ``(person, slot)`` keys.

    One query; only groups with two or more members are returned.
    """
    wanted = {(p, slot) for p, slot in keys if slot}
    if not wanted:
        return {}
    groups: dict[tuple[int, str], list[tuple[int, str]]] = defaultdict(list)
    rows = _members().filter(_of_groups(wanted)).order_by("id").values_list("id", "person_id", "slot", "content")
    for fid, pid, slot, content in rows:
        groups[(pid, slot)].append((fid, content))
    return {key: members for key, members in groups.items() if len(members) >= 2}


@dataclass(frozen=True)
class ConflictGroup:
    person_id: int
    person_name: str
    slot: str
    members: list[dict[str, Any]]


def conflict_groups(
    *, person_id: int | None = None, now: int, keys: Sequence[tuple[int, str]] | None = None
) -> list[ConflictGroup]:
    """Every (person, slot) with two or more active valid members, members by id.

    ``keys`` restricts the result to those groups (a console page loads only its own).
    """
    if keys is None:
        keys = conflict_group_keys(person_ids=None if person_id is None else [person_id])
    keys = {(p, slot) for p, slot in keys if slot}
    if not keys:
        return []
    members: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    persons = {pid for pid, _ in keys}
    for f in _members().filter(_of_groups(keys)).order_by("id").defer("embedding", "embedding_q8", "tokens_v2"):
        members[(f.person_id, f.slot)].append(
            {
                "id": f.id, "kind": f.kind, "content": f.content, "origin_kind": f.origin_kind,
                "retention": decay.retention(f.strength, f.updated_at, f.half_life_hours, now),
                "strength": f.strength, "half_life_hours": f.half_life_hours, "updated_at": f.updated_at,
                "created_at": f.created_at, "source": f.source, "hit_count": f.hit_count,
            }
        )
    keys = {k for k in keys if len(members[k]) >= 2}
    names = dict(
        Identity.objects.filter(person_id__in=persons).order_by("display_name").values_list("person_id", "display_name")
    )
    for pid, name in Person.objects.filter(pk__in=persons).values_list("id", "display_name"):
        names.setdefault(pid, name)
        if name:
            names[pid] = name
    return [
        ConflictGroup(person_id=pid, person_name=names.get(pid) or f"#{pid}", slot=slot, members=members[(pid, slot)])
        for pid, slot in sorted(keys)
    ]
