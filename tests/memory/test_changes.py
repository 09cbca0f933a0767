"""The change log: resident indexes see every committed insert once, whatever the commit order."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.db import connection, transaction

from memory import services
from memory.search import lexical, lexical_index, read_ahead
from memory.search.changes import ChangeFeed
from tests.memory.conftest import NOW

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture(autouse=True)
def _empty_indexes(empty_lexical_indexes):
    """Every test starts from empty FTS tables and no resident index."""


@contextmanager
def committed_late(write: Callable[[], object]) -> Iterator[list]:
    """Run ``write`` in a transaction on another thread, held open for the block: yields ``[its result]``
    as soon as it has written; the transaction commits when the block ends (a failure surfaces here)."""
    inserted, release, failure, late = threading.Event(), threading.Event(), [], []

    def slow_writer() -> None:
        try:
            with transaction.atomic():
                late.append(write())
                inserted.set()
                assert release.wait(30)
        except Exception as exc:  # surfaced by the main thread
            failure.append(exc)
            inserted.set()
        finally:
            connection.close()

    writer = threading.Thread(target=slow_writer)
    writer.start()
    try:
        assert inserted.wait(30) and not failure
        yield late
    finally:
        release.set()
        writer.join(30)
    assert not failure


def _ids(query: str) -> set[int]:
    return {i for i, _ in lexical.knowledge_candidates(lexical.match_for("knowledge_fts", query), limit=50)}


def test_a_feed_hands_out_each_insert_once_and_a_rollback_never():
    feed = ChangeFeed("knowledge", "lexical_revision:knowledge")
    feed.start()
    a = services.add_knowledge(content="月球绕着地球转", source="t", at=NOW)
    b = services.add_knowledge(content="火星是红色的", source="t", at=NOW)
    with pytest.raises(RuntimeError), transaction.atomic():
        services.add_knowledge(content="这条会回滚", source="t", at=NOW)
        raise RuntimeError
    assert feed.poll().row_ids == [a, b]
    assert feed.poll().row_ids == []
    c = services.add_knowledge(content="金星很热", source="t", at=NOW)
    assert feed.poll().row_ids == [c]


def test_a_reading_made_elsewhere_is_applied_only_where_the_feed_still_stands():
    """A log read for a feed's position (several feeds in one statement) is used by its poll only when no
    other poll moved the feed since; otherwise the feed reads again and hands out nothing twice."""
    from memory import backends

    feed = ChangeFeed("knowledge", "lexical_revision:knowledge")
    feed.start()
    a = services.add_knowledge(content="月球绕着地球转", source="t", at=NOW)
    at = feed.position
    reading = backends.module().read_changes("knowledge", "lexical_revision:knowledge", at[0])
    assert feed.poll(reading, at).row_ids == [a]  # used: nothing read again
    b = services.add_knowledge(content="火星是红色的", source="t", at=NOW)
    stale_at = feed.position
    stale = backends.module().read_changes("knowledge", "lexical_revision:knowledge", stale_at[0])
    assert feed.poll().row_ids == [b]  # another poll moved the feed
    c = services.add_knowledge(content="金星很热", source="t", at=NOW)
    assert feed.poll(stale, stale_at).row_ids == [c]  # the stale reading (b, not c) is ignored


@pytest.mark.postgresql_only("one statement reads several change logs on PostgreSQL; SQLite reads each in-process")
def test_a_turn_brings_the_fact_and_cue_indexes_up_to_date_in_one_read():
    from django.test.utils import CaptureQueriesContext

    from memory import recall
    from tests.memory.conftest import make_person

    person = make_person("u-one-read")
    stream = services.resolve_stream(platform="qq", kind="direct", external_id="d-one-read")

    def pool() -> set[int]:
        ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=person.pk, text="篮球", at=NOW + 1000, record=False)
        return {f.id for f in ctx.pool}

    friend = make_person("u-one-read-friend")  # present too (a recent speaker); facts of two persons, as
    services.append_message(stream_id=stream.pk, role="user", content="嗨", sender_person_id=friend.pk, at=NOW)
    services.add_fact(person_id=person.pk, content="他喜欢打篮球", kind="偏好", at=NOW)  # a person's are serialised
    pool()  # both indexes loaded

    def fact(who, text: str) -> int:
        return services.add_fact(person_id=who.pk, content=text, kind="偏好", at=NOW).fact_id

    with committed_late(lambda: fact(friend, "他周末打篮球")) as late:
        early = fact(person, "他篮球打得很好")
        with CaptureQueriesContext(connection) as reads:
            seen = pool()
        polls = [q["sql"] for q in reads.captured_queries if "memory_changes" in q["sql"]]
        assert len(polls) == 1 and "lexical_revision:facts" in polls[0] and "lexical_revision:episode_cues" in polls[0]
        assert early in seen and late[0] not in seen
    assert late[0] in pool()  # committed late with the smaller id: found


def test_reads_known_before_a_block_are_made_once_and_answer_the_block():
    """one_state's ``reads``: PostgreSQL sends them with the change logs before the block (one round trip);
    either way a block's :func:`read_ahead.read` of one returns its rows without asking again."""
    from django.test.utils import CaptureQueriesContext

    first = services.add_knowledge(content="月球绕着地球转", source="t", at=NOW)
    count = read_ahead.Read(("knowledge", "count"), "SELECT count(*) FROM knowledge", [], lambda rows: rows[0][0])
    newest = read_ahead.Read(("knowledge", "newest"), "SELECT max(id) FROM knowledge", [], lambda rows: rows[0][0])
    with CaptureQueriesContext(connection) as reads, read_ahead.one_state("facts_fts", "cues_fts", reads=[count, newest]):
        before = len(reads.captured_queries)
        assert (read_ahead.read(count), read_ahead.read(newest)) == (1, first)
        assert read_ahead.read(count) == 1
        assert len(reads.captured_queries) == before + (0 if connection.vendor == "postgresql" else 2)
    assert read_ahead.read(count) == 1  # outside a block: read now


def test_the_present_persons_facts_read_ahead_serve_exactly_the_present_persons(direct_stream, person):
    """A turn reads the present persons and their facts before it knows them (lexical.present_scope_read,
    PostgreSQL: sent ahead, each statement with its snapshot); the scope a turn ranks holds the facts
    of the persons it settled on and of no one else."""
    from memory import selectors
    from tests.memory.conftest import make_person

    stream = direct_stream
    friend = make_person("u-scope-friend")
    services.append_message(stream_id=stream.pk, role="user", content="嗨", sender_person_id=friend.pk, at=NOW)
    mine = services.add_fact(person_id=person.pk, content="他喜欢打篮球", kind="偏好", at=NOW).fact_id
    theirs = services.add_fact(person_id=friend.pk, content="他周末游泳", kind="偏好", at=NOW).fact_id
    speakers = selectors.recent_speakers_read(stream_id=stream.pk, before_id=10**9)
    present = lexical.present_scope_read(speakers, person.pk)
    with read_ahead.one_state("facts_fts", reads=[speakers, present]):
        assert set(read_ahead.read(present)) == {mine, theirs}
        lexical.scope_of([person.pk], present)  # as if the friend's message had not been seen
        assert set(read_ahead.read(lexical.scope_read([person.pk]))) == {mine}
    with read_ahead.one_state("facts_fts", reads=[speakers, present]):
        lexical.scope_of([person.pk, friend.pk], present)
        assert set(read_ahead.read(lexical.scope_read([person.pk, friend.pk]))) == {mine, theirs}


def test_a_pruned_log_makes_a_behind_reader_rebuild():
    from memory.search import changes

    feed = ChangeFeed("knowledge", "lexical_revision:knowledge")
    feed.start()
    for name in "甲乙丙":
        services.add_knowledge(content=f"{name} 月球", source="t", at=NOW)
    assert _ids("月球")  # the resident index read the log before the prune
    dropped = changes.prune(keep=1)
    # SQLite drops all but the newest row; PostgreSQL only what every open snapshot (any database
    # of the cluster) has seen, which another session's open transaction can hold back
    assert dropped >= (2 if connection.vendor == "sqlite" else 0)
    assert feed.poll().rebuild == (dropped > 0)
    assert services.add_knowledge(content="丁 月球", source="t", at=NOW) in _ids("月球")
    assert len(_ids("月球")) == 4


@pytest.mark.postgresql_only("SQLite has one writer at a time: a smaller id cannot commit after a larger one")
def test_a_row_committed_late_with_a_smaller_id_is_not_missed():
    """Transaction A takes the smaller id and commits after B; the resident index reads in between."""
    # one word of two or more characters each: no concept-graph rows the two writers would both lock
    services.add_knowledge(content="月球 甲", source="t", at=NOW)
    assert len(_ids("月球")) == 1  # the resident index is loaded
    rebuilds = lexical_index.resident("knowledge_fts").rebuilds
    with committed_late(lambda: services.add_knowledge(content="月球 乙", source="t", at=NOW)) as late:
        early = services.add_knowledge(content="月球 丙", source="t", at=NOW)
        assert early > late[0]  # B took the larger id and committed first
        seen = _ids("月球")
        assert early in seen and late[0] not in seen  # A is not committed yet
    assert late[0] in _ids("月球")  # the late commit with the smaller id is found
    index = lexical_index.resident("knowledge_fts")
    assert index is not None and index.rebuilds == rebuilds  # appended, not rebuilt
    unpruned = lexical.unpruned_top("knowledge_fts", lexical.match_for("knowledge_fts", "月球"), limit=10)
    got = lexical.knowledge_candidates(lexical.match_for("knowledge_fts", "月球"), limit=10)
    assert got == unpruned


@pytest.mark.postgresql_only("SQLite has one writer at a time: a smaller id cannot commit after a larger one")
def test_a_message_committed_late_with_a_smaller_id_is_searchable():
    """The resident message statistics read inserts from the change log, not "ids above the last one"."""
    person = services.resolve_person(platform="t", external_id="a", name="阿明", at=NOW)
    stream = services.resolve_stream(platform="t", kind="direct", external_id="d")

    def say(text: str, at: int) -> int:
        return services.append_message(stream_id=stream.pk, role="user", content=text, sender_person_id=person.pk,
                                       at=at)[0].pk

    def found(query: str) -> set[int]:
        match = lexical.match_for("messages_fts", query)
        return {i for i, _ in lexical.message_candidates(match, stream_id=stream.pk, limit=50)}

    say("晚上喝了乌龙茶", NOW)
    assert len(found("乌龙茶")) == 1  # the resident statistics and the stream's postings are loaded
    index = lexical_index.resident_messages()
    rebuilds = index.rebuilds
    with committed_late(lambda: say("乌龙茶凉了", NOW + 1)) as late:
        early = say("乌龙茶真香", NOW + 2)
        assert early > late[0]
        seen = found("乌龙茶")
        assert early in seen and late[0] not in seen
    assert late[0] in found("乌龙茶")
    assert index.rebuilds == rebuilds  # appended, not reloaded
    match = lexical.match_for("messages_fts", "乌龙茶 凉")
    with transaction.atomic():  # the postings tables' own answer
        want = lexical.message_candidates(match, stream_id=stream.pk, limit=10)
    got = lexical.message_candidates(match, stream_id=stream.pk, limit=10)
    assert [i for i, _ in got] == [i for i, _ in want]
    assert [b for _, b in got] == pytest.approx([b for _, b in want], rel=1e-12)


@pytest.mark.postgresql_only("SQLite has one writer at a time: a smaller id cannot commit after a larger one")
def test_a_memory_node_committed_late_with_a_smaller_id_holds_its_concepts():
    """Concept spreading's resident node texts read new nodes from the change log (migration 0026)."""
    from memory.models import MemoryNode
    from memory.selectors import graph

    graph.resident_node_texts().reset()
    person = services.resolve_person(platform="t", external_id="n1", name="阿明", at=NOW)

    def fact(text: str) -> int:
        return services.add_fact(person_id=person.pk, content=text, kind="偏好", at=NOW).fact_id

    def node(fact_id: int) -> int:
        return MemoryNode.objects.get(ref_kind="fact", ref_id=fact_id).pk

    anchor = fact("他喜欢下雨天")
    late_fact, early_fact = fact("他有一件光学迷彩外套"), fact("他想要光学迷彩眼镜")
    services.link_together(refs=[("fact", anchor), ("fact", fact("他常去图书馆"))], at=NOW)
    assert graph._nodes_containing({"光学迷彩"}) == {"光学迷彩": []}  # the node texts are loaded
    rebuilds = graph.resident_node_texts().rebuilds
    with committed_late(lambda: services.link_together(refs=[("fact", late_fact), ("fact", anchor)], at=NOW)):
        services.link_together(refs=[("fact", early_fact), ("fact", anchor)], at=NOW)
        assert graph._nodes_containing({"光学迷彩"}) == {"光学迷彩": [node(early_fact)]}  # the late one is not committed
    late, early = node(late_fact), node(early_fact)
    assert late < early  # it took the smaller id and committed last
    assert graph._nodes_containing({"光学迷彩"}) == {"光学迷彩": [late, early]}  # found, in id order
    assert graph._nodes_containing({"外套"}) == {"外套": [late]}
    assert graph.resident_node_texts().rebuilds == rebuilds  # appended, not rebuilt
    graph.resident_node_texts().reset()
