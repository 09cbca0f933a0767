"""The read-ahead contract (memory/search/read_ahead.py's docstring), on either backend."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import services
from memory.search import read_ahead

pytestmark = pytest.mark.django_db


def _facts_of(person_id: int) -> read_ahead.Read:
    return read_ahead.Read(("facts_of", person_id), "SELECT id, content FROM facts WHERE person_id = %s ORDER BY id",
                           [person_id])


def test_once_computes_once_inside_a_block_and_every_time_outside():
    calls = []
    compute = lambda: calls.append(1) or len(calls)  # noqa: E731
    assert (read_ahead.once(("k",), compute), read_ahead.once(("k",), compute)) == (1, 2)
    with read_ahead.one_state():
        assert (read_ahead.once(("k",), compute), read_ahead.once(("k",), compute)) == (3, 3)
    with read_ahead.one_state():  # a new block computes again
        assert read_ahead.once(("k",), compute) == 4


def test_within_opens_a_block_only_where_there_is_none():
    calls = []
    compute = lambda: calls.append(1) or len(calls)  # noqa: E731
    with read_ahead.within():  # none around: a block of its own
        assert (read_ahead.once(("k",), compute), read_ahead.once(("k",), compute)) == (1, 1)
    with read_ahead.one_state():
        assert read_ahead.once(("k",), compute) == 2
        with read_ahead.within():  # inside a block: that block's state
            assert read_ahead.once(("k",), compute) == 2
            read_ahead.once(("inner",), compute)
        assert read_ahead.once(("inner",), compute) == 3

def test_a_block_reads_once_and_sees_its_state_until_it_drops_a_read(person):
    first = services.add_fact(person_id=person.pk, content="他喜欢打篮球", at=1).fact_id
    facts = _facts_of(person.pk)
    assert not read_ahead.has(facts)
    with read_ahead.one_state(reads=[facts]):
        with CaptureQueriesContext(connection) as queries:
            assert [row[0] for row in read_ahead.read(facts)] == [first]
            second = services.add_fact(person_id=person.pk, content="他养了一只猫", at=2).fact_id
            assert read_ahead.has(facts)
            assert [row[0] for row in read_ahead.read(facts)] == [first]  # the block's state, not its write
        made = [q for q in queries if "FROM facts WHERE person_id" in q["sql"]]
        assert len(made) == (0 if connection.vendor == "postgresql" else 1)  # PostgreSQL: sent ahead; else once
        read_ahead.drop(facts)
        assert not read_ahead.has(facts)
        assert [row[0] for row in read_ahead.read(facts)] == [first, second]
    assert [row[0] for row in read_ahead.read(facts)] == [first, second]  # outside a block: read now


def test_a_read_sent_before_its_parameters_were_known_serves_the_later_one(person):
    friend = services.resolve_person(platform="qq", external_id="friend", name="小林", at=1)
    mine = services.add_fact(person_id=person.pk, content="他喜欢打篮球", at=1).fact_id
    services.add_fact(person_id=friend.pk, content="她养了一只猫", at=1)
    everyone = read_ahead.Read(("everyone",), "SELECT id, content FROM facts WHERE person_id IN (%s, %s) ORDER BY id",
                               [person.pk, friend.pk])
    target = _facts_of(person.pk)
    with read_ahead.one_state(reads=[everyone]):
        read_ahead.read(everyone)  # PostgreSQL: read ahead already; SQLite: now
        read_ahead.serve_from(everyone, target, keep=lambda row: row[0] == mine)
        with CaptureQueriesContext(connection) as queries:
            assert [row[0] for row in read_ahead.read(target)] == [mine]
        assert not [q for q in queries if "FROM facts" in q["sql"]]
    read_ahead.serve_from(everyone, target)  # outside a block: nothing to serve from, nothing happens
    assert [row[0] for row in read_ahead.read(target)] == [mine]
