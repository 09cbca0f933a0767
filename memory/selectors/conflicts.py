"""Slot conflicts: groups of active valid facts of one person sharing a slot."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection

from memory import backends
from memory.engine import decay
from memory.models import Identity, Person
from memory.search import read_ahead

#: A fact that can be in a slot-conflict group: active, valid (not superseded), with a slot.
_MEMBER = "active AND superseded_by IS NULL AND slot <> ''"


def _rows(sql: str, params: Sequence[Any]) -> list[tuple]:
    # Plain SQL: conflict_members runs on every turn, and the ORM spent ten times the query's
    # own time building it.
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _group_rows(keys: Iterable[tuple[int, str]], columns: str) -> list[tuple]:
    """``(id, person, slot, *columns)`` of the members of the given ``(person, slot)`` groups, by id.

    One query over the keys' persons and slots (IN lists: an OR per group would outgrow
    SQLite's expression depth with a thousand groups), kept to the exact keys here.
    """
    wanted = {(p, slot) for p, slot in keys if slot}
    if not wanted:
        return []
    persons, slots = sorted({p for p, _ in wanted}), sorted({slot for _, slot in wanted})
    rows = _rows(
        f"SELECT id, person_id, slot, {columns} FROM facts WHERE {_MEMBER}"
        f" AND person_id IN ({backends.in_placeholders(persons)}) AND slot IN ({backends.in_placeholders(slots)})"
        " ORDER BY id",
        [*persons, *slots],
    )
    return [row for row in rows if (row[1], row[2]) in wanted]


def conflict_group_keys(*, person_ids: Iterable[int] | None = None) -> list[tuple[int, str]]:
    """``(person, slot)`` of every group with two or more members, in order (one query).

    ``person_ids`` limits the groups to those persons (none, and no query, for an empty list).
    """
    where, params = _MEMBER, []
    if person_ids is not None:
        params = sorted(set(person_ids))
        if not params:
            return []
        where += f" AND person_id IN ({backends.in_placeholders(params)})"
    sql = f"SELECT person_id, slot FROM facts WHERE {where} GROUP BY person_id, slot HAVING COUNT(*) >= 2"
    return [(p, slot) for p, slot in _rows(sql + " ORDER BY person_id, slot", params)]


#: The columns of a member row (:func:`conflict_members_read`): enough to put a member in a prompt.
MEMBER_COLUMNS = ("id", "person_id", "slot", "content", "kind", "origin_kind", "strength", "updated_at",
                  "half_life_hours", "active")


def conflict_members_read(keys: Iterable[tuple[int, str]]) -> read_ahead.Read | None:
    """The read of :func:`conflict_members`' groups among the ``(person, slot)`` keys: ``{key: member
    rows}`` (:data:`MEMBER_COLUMNS`, by id), groups of two or more only — a value, so a confirm can send
    it with its write (PostgreSQL: one round trip). ``None`` when no key has a slot (nothing to read).
    """
    wanted = frozenset((int(p), slot) for p, slot in keys if slot)
    if not wanted:
        return None
    persons, slots = sorted({p for p, _ in wanted}), sorted({slot for _, slot in wanted})

    def groups(rows: list[tuple]) -> dict[tuple[int, str], list[tuple]]:
        out: dict[tuple[int, str], list[tuple]] = defaultdict(list)
        for row in rows:
            if (row[1], row[2]) in wanted:
                out[(row[1], row[2])].append(row)
        return {key: members for key, members in out.items() if len(members) >= 2}

    return read_ahead.Read(
        ("conflict_members", tuple(sorted(wanted))),
        f"SELECT {', '.join(MEMBER_COLUMNS)} FROM facts WHERE {_MEMBER}"
        f" AND person_id IN ({backends.in_placeholders(persons)}) AND slot IN ({backends.in_placeholders(slots)})"
        " ORDER BY id",
        [*persons, *slots],
        groups,
    )


def conflict_members(keys: Iterable[tuple[int, str]]) -> dict[tuple[int, str], list[tuple[int, str]]]:
    """Members ``(id, content)`` by id of the slot-conflict groups among the given ``(person, slot)`` keys.

    One query; only groups with two or more members are returned.
    """
    read = conflict_members_read(keys)
    groups = read_ahead.read(read) if read is not None else {}
    return {key: [(row[0], row[3]) for row in rows] for key, rows in groups.items()}


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
    columns = "kind, content, origin_kind, strength, half_life_hours, updated_at, created_at, source, hit_count"
    for row in _group_rows(keys, columns):
        fid, pid, slot, kind, content, origin, strength, half_life, updated_at, created_at, source, hits = row
        members[(pid, slot)].append(
            {
                "id": fid, "kind": kind, "content": content, "origin_kind": origin,
                "retention": decay.retention(strength, updated_at, half_life, now),
                "strength": strength, "half_life_hours": half_life, "updated_at": updated_at,
                "created_at": created_at, "source": source, "hit_count": hits,
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
