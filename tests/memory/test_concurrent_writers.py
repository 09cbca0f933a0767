"""Two writers at once on PostgreSQL (read committed): what SQLite's one write lock gives for free.

A worker extracts several streams at once; two of its transactions must not both miss
each other's fact about the same person, and must not lose each other's cursor in the
one meta row that holds every stream's extraction cursor. Each test holds the first
transaction open until the second is seen waiting on a lock, then commits it.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from memory import pipeline, services
from memory.dispatch import triggers
from memory.meta import meta_set
from memory.models import EXTRACT_CURSOR_KEY, Fact
from tests.memory.conftest import NOW, make_person

pytestmark = [
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
    pytest.mark.postgresql_only("SQLite has one writer at a time: the second transaction cannot begin before the first ends"),
]


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
        return cur.fetchone()[0] > 0


def _overlapped(first: Callable[[], object], second: Callable[[], object]) -> tuple[object, object]:
    """Run ``first`` in a transaction held open until ``second`` (its own transaction) waits on a lock."""
    results: dict[str, object] = {}
    failures: list[BaseException] = []
    wrote, release = threading.Event(), threading.Event()

    def run(name: str, work: Callable[[], object], hold: bool) -> None:
        try:
            with transaction.atomic():
                results[name] = work()
                if hold:
                    wrote.set()
                    assert release.wait(30)
        except BaseException as exc:  # surfaced by the main thread
            failures.append(exc)
            wrote.set()
        finally:
            connection.close()

    a = threading.Thread(target=run, args=("first", first, True))
    a.start()
    assert wrote.wait(30) and not failures, failures
    b = threading.Thread(target=run, args=("second", second, False))
    b.start()
    try:
        deadline = time.monotonic() + 10
        while not _waiting_on_a_lock() and b.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert b.is_alive(), "the second writer did not wait for the first"
    finally:
        release.set()
        a.join(30)
        b.join(30)
    assert not failures, failures
    return results["first"], results["second"]


def test_the_same_fact_written_by_two_transactions_at_once_is_stored_once():
    person = make_person("u-concurrent")

    def write() -> services.FactWrite:
        return services.add_fact(person_id=person.pk, content="我住在杭州西湖区", kind="地点", at=NOW)

    first, second = _overlapped(write, write)
    assert first.created and not second.created
    assert second.fact_id == first.fact_id
    assert Fact.objects.filter(person_id=person.pk).count() == 1
    assert Fact.objects.get(pk=first.fact_id).hit_count == 1  # the second write reinforced it


def test_two_streams_cursors_committed_at_once_are_both_kept():
    meta_set(EXTRACT_CURSOR_KEY, {})

    def advance(stream_id: int, message_id: int) -> Callable[[], bool]:
        def work() -> bool:
            moved = pipeline.cursor_moved(stream_id, 0)
            if not moved:
                pipeline.advance_cursor(stream_id, message_id)
            return moved

        return work

    first, second = _overlapped(advance(1, 10), advance(2, 20))
    assert first is False and second is False
    assert triggers.cursor_map() == {"1": 10, "2": 20}
    with connection.cursor() as cur:
        cur.execute("SELECT value FROM meta WHERE key = %s", [EXTRACT_CURSOR_KEY])
        assert json.loads(cur.fetchone()[0]) == {"1": 10, "2": 20}


def test_bm25_with_statistics_behind_the_postings_still_scores():
    """Statistics and postings are read by separate statements: rows committed in between hit more than are counted."""
    from memory.backends import postgresql  # PostgreSQL-only module: imported where the test runs there

    person = make_person("u-stats")
    for content in ("我住在杭州西湖区", "杭州的冬天很冷", "下周去杭州出差"):
        services.add_fact(person_id=person.pk, content=content, kind="地点", at=NOW)
    with connection.cursor() as cur:  # as if two of the three were committed after the statistics were read
        cur.execute("INSERT INTO lexical_stats(source, docs, tokens) VALUES (%s, -2, 0)",
                    [postgresql.SOURCES["facts_fts"].code])
    scores = postgresql.fact_bm25('"杭州"', list(Fact.objects.values_list("id", flat=True)))
    assert len(scores) == 3 and all(score < 0 for score in scores.values())


def test_a_message_stored_outside_a_transaction_is_indexed_as_a_rebuild_would_index_it():
    """On PostgreSQL a message outside a transaction is one statement (row, postings, doc, statistics)."""
    from memory.backends import postgresql  # PostgreSQL-only module: imported where the test runs there

    stream = services.resolve_stream(platform="qq", kind="group", external_id="g-one-statement")
    sender = make_person("u-one-statement")
    assert not connection.in_atomic_block
    stored = [services.append_message(stream_id=stream.pk, role="user", content=text, sender_person_id=sender.pk,
                                      external_message_id=f"m{i}", at=NOW)[0]
              for i, text in enumerate(["我住在杭州西湖区，每天骑车上班", "3.14 是圆周率", "……", "我住在杭州西湖区"])]
    again, created = services.append_message(stream_id=stream.pk, role="user", content="重复", sender_person_id=sender.pk,
                                             external_message_id="m0", at=NOW)
    assert not created and again.pk == stored[0].pk

    def index() -> tuple[list, list, tuple]:
        with connection.cursor() as cur:
            cur.execute("SELECT doc_id, scope, length FROM lexical_docs WHERE source = 4 ORDER BY doc_id")
            docs = cur.fetchall()
            cur.execute("SELECT term, doc_id, scope, tf, length, positions FROM lexical_postings WHERE source = 4"
                        " ORDER BY doc_id, term")
            postings = cur.fetchall()
            cur.execute("SELECT sum(docs), sum(tokens) FROM lexical_stats WHERE source = 4")
            return docs, postings, cur.fetchone()

    written = index()
    assert [d[0] for d in written[0]] == [m.pk for m in stored if m.tokens]
    assert stored[2].tokens == "" and all(m.tokens for m in (stored[0], stored[1], stored[3]))
    with connection.cursor() as cur:
        postgresql.reindex_all(cur)
    assert index() == written


def test_a_turn_confirmed_by_two_transactions_at_once_reinforces_once():
    """The confirm's one statement locks the turn first: the second waits, then finds it confirmed."""
    from memory import recall
    from memory.models import Turn

    person = make_person("u-confirm-twice")
    stream = services.resolve_stream(platform="qq", kind="direct", external_id="d-confirm-twice")
    fact = services.add_fact(person_id=person.pk, content="他喜欢喝咖啡", kind="偏好", at=NOW).fact_id
    turn_id = recall.prepare_turn(stream_id=stream.pk, speaker_id=person.pk, text="咖啡", at=NOW + 1000).turn_id

    def confirm(at: int) -> Callable[[], object]:
        def work() -> object:
            try:
                return recall.confirm_turn(turn_id=turn_id, at=at).reinforced
            except recall.TurnStateError as exc:
                return exc

        return work

    first, second = _overlapped(confirm(NOW + 2000), confirm(NOW + 3000))
    assert first == [fact]
    assert isinstance(second, recall.TurnStateError)
    assert Fact.objects.get(pk=fact).hit_count == 1
    turn = Turn.objects.get(pk=turn_id)
    assert turn.confirmed_at == NOW + 2000 and turn.reinforced_fact_ids == [fact]


def test_a_turns_one_round_trip_write_that_fails_leaves_nothing_and_the_connection_usable():
    """The write is one statement, its own transaction: when it fails nothing of it stays."""
    from django.db.utils import IntegrityError

    from memory.backends import postgresql  # PostgreSQL-only module: imported where the test runs there
    from memory.models import PipelineEvent

    assert not connection.in_atomic_block
    before = PipelineEvent.objects.count()
    with pytest.raises(IntegrityError):  # the event is written, then the second row fails its NOT NULL
        postgresql.run_unflushed(
            f"WITH {postgresql.UNFLUSHED},"
            " e AS (INSERT INTO pipeline_events (at, stage, kind, payload) VALUES (1, '', 'probe', '{}') RETURNING seq)"
            " INSERT INTO pipeline_events (at, stage, kind, payload) SELECT NULL, '', 'probe', '{}' FROM e, unflushed"
            " RETURNING seq",
            [],
        )
    assert PipelineEvent.objects.count() == before
    with connection.cursor() as cur:  # not left inside a transaction: synchronous_commit is back to the default
        cur.execute("SHOW synchronous_commit")
        assert cur.fetchone()[0] == "on"
    rows = postgresql.run_unflushed(
        f"WITH {postgresql.UNFLUSHED} INSERT INTO pipeline_events (at, stage, kind, payload)"
        " SELECT 2, '', 'probe', '{}' FROM unflushed RETURNING seq", []
    )
    assert PipelineEvent.objects.filter(seq=rows[0][0], kind="probe").exists()  # committed: another read sees it
