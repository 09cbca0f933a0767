"""``IN`` lists of parameters are built by :func:`memory.backends.in_placeholders`, valid SQL for any length
on both backends (PostgreSQL has no empty ``IN ()``; SQLite accepts one)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

from memory import backends, selectors, services
from memory.search import lexical, read_ahead

ROOT = Path(__file__).resolve().parents[2]
#: a list of ``%s`` joined by hand: ``",".join(["%s"] * len(x))`` in either quoting
HAND_BUILT = re.compile(r"""\.join\(\[\s*(['"])%s\1\s*\]\s*\*""")


@pytest.mark.parametrize("values, expected", [([], "NULL"), ([7], "%s"), ((1, 2, 3), "%s,%s,%s")])
def test_in_placeholders(values, expected):
    assert backends.in_placeholders(values) == expected


@pytest.mark.parametrize("ids", [[], [1], [1, 2]])
def test_the_list_is_valid_sql_for_any_length(db, person, ids):
    fact = services.add_fact(person_id=person.pk, content="喜欢爬山", at=1).fact_id
    wanted = [fact if i == 1 else fact + 1000 for i in ids]
    with connection.cursor() as cur:
        cur.execute(f"SELECT id FROM facts WHERE id IN ({backends.in_placeholders(wanted)})", wanted)
        assert [r[0] for r in cur.fetchall()] == ([fact] if ids else [])


def test_reads_and_writes_of_nothing_touch_nothing(db, person):
    """The public entry points that take a list of ids, called with none."""
    services.touch_knowledge(ids=[])
    assert lexical.document_frequencies("facts_fts", []) == {}
    assert lexical.fact_bm25("爬山", []) == {}
    assert read_ahead.read(lexical.scope_read([])) == {}
    assert selectors.conflict_group_keys(person_ids=[]) == []
    assert selectors.conflict_members([]) == {}
    assert selectors.node_texts([]) == {}


def test_no_in_list_is_built_by_hand():
    """Outside :mod:`memory.backends.portable`, placeholders joined by hand are ``VALUES`` rows only."""
    offenders = []
    for package in ("memory", "tuning", "console", "config"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts or path.name == "portable.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if HAND_BUILT.search(line) and "VALUES" not in line and "SELECT {" not in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
