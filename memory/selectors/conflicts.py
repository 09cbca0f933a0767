"""Slot conflicts: groups of active valid facts of one person sharing a slot."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count

from memory.engine import decay
from memory.models import Fact, Identity


def slot_conflicts(*, person_id: int, fact_ids: Iterable[int]) -> dict[int, tuple[str, list[tuple[int, str]]]]:
    """For each requested fact in a slot-conflict group: ``(slot, [(member id, content), ...])``.

    Groups are active valid facts of the person sharing a non-empty slot, with
    ≥ 2 members; the whole group is returned (members not requested included).
    """
    wanted = set(fact_ids)
    rows = Fact.objects.filter(person_id=person_id, active=True, superseded_by__isnull=True).exclude(slot="")
    groups: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for fid, slot, content in rows.order_by("id").values_list("id", "slot", "content"):
        groups[slot].append((fid, content))
    out = {}
    for slot, members in groups.items():
        if len(members) < 2:
            continue
        for fid, _ in members:
            if fid in wanted:
                out[fid] = (slot, members)
    return out


def conflict_members(pairs: Iterable[tuple[int, str]]) -> dict[tuple[int, str], list[tuple[int, str]]]:
    """Members (id, content) of the slot-conflict groups of the given (person, slot) pairs.

    One query; only groups with two or more active valid members are returned.
    """
    wanted = {(p, slot) for p, slot in pairs if slot}
    if not wanted:
        return {}
    clause = " OR ".join(["(person_id = %s AND slot = %s)"] * len(wanted))
    params = [v for pair in sorted(wanted) for v in pair]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT id, person_id, slot, content FROM facts WHERE active = 1 AND superseded_by IS NULL"
            f" AND ({clause}) ORDER BY id",
            params,
        )
        rows = cur.fetchall()
    groups: dict[tuple[int, str], list[tuple[int, str]]] = defaultdict(list)
    for fid, pid, slot, content in rows:
        groups[(pid, slot)].append((fid, content))
    return {key: members for key, members in groups.items() if len(members) >= 2}


@dataclass(frozen=True)
class ConflictGroup:
    person_id: int
    person_name: str
    slot: str
    members: list[dict[str, Any]]


def conflict_group_keys(*, person_id: int | None = None) -> list[tuple[int, str]]:
    """(person, slot) of every group with two or more active valid members, in order."""
    rows = Fact.objects.filter(active=True, superseded_by__isnull=True).exclude(slot="")
    if person_id is not None:
        rows = rows.filter(person_id=person_id)
    pairs = rows.values("person_id", "slot").annotate(n=Count("id")).filter(n__gte=2).order_by("person_id", "slot")
    return [(p["person_id"], p["slot"]) for p in pairs]


def conflict_groups(
    *, person_id: int | None = None, now: int, keys: Sequence[tuple[int, str]] | None = None
) -> list[ConflictGroup]:
    """Every (person, slot) with two or more active valid members, members by id.

    ``keys`` restricts the result to those groups (a console page loads only its own).
    """
    keys = set(conflict_group_keys(person_id=person_id) if keys is None else keys)
    if not keys:
        return []
    rows = Fact.objects.filter(active=True, superseded_by__isnull=True).exclude(slot="")
    members: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    persons = {pid for pid, _ in keys}
    slots = {slot for _, slot in keys}
    for f in rows.filter(person_id__in=persons, slot__in=slots).order_by("id").defer("embedding", "embedding_q8"):
        if (f.person_id, f.slot) in keys:
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
    from memory.models import Person

    for pid, name in Person.objects.filter(pk__in=persons).values_list("id", "display_name"):
        names.setdefault(pid, name)
        if name:
            names[pid] = name
    return [
        ConflictGroup(person_id=pid, person_name=names.get(pid) or f"#{pid}", slot=slot, members=members[(pid, slot)])
        for pid, slot in sorted(keys)
    ]
