"""The resident message statistics follow message edits and deletes without reloading.

An edit or delete is logged with the row's tokens before it (migration 0025); the resident
statistics take that share out and add the row as it is now. After any mix of appends,
edits, placeholder fills, emptied bodies and deletes they must hold exactly what a fresh
load holds (so every stream-scoped score is the same double), rank like FTS5 / the
postings tables, and never have reloaded.
"""
from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest
from django.db import connection, transaction
from django.test import override_settings

from memory import services
from memory.models import Message
from memory.search import lexical, lexical_index
from tests.memory.conftest import NOW

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

CHAT = [
    "晚上喝了乌龙茶", "周末去爬山了，山上好冷", "月球好亮啊今天", "我养的猫叫咪咪", "今天加班到很晚",
    "明天要去杭州出差", "乌龙茶和红茶哪个好喝", "猫又把杯子打翻了", "Café au lait please", "乌龙茶 乌龙茶 猫",
]
QUERIES = ["乌龙茶", "猫", "乌龙茶 猫 月球", "红茶 咖啡", "café", "杭州 出差 爬山", "今天", "普洱", "新"]


@pytest.fixture(autouse=True)
def _empty_indexes(empty_lexical_indexes):
    """Every test starts from empty FTS tables and no resident index."""


@pytest.fixture
def streams():
    person = services.resolve_person(platform="t", external_id="a", name="阿明", at=NOW)
    a = services.resolve_stream(platform="t", kind="group", external_id="g")
    b = services.resolve_stream(platform="t", kind="direct", external_id="d")

    def say(stream, texts, at=NOW):
        return [services.append_message(stream_id=stream.pk, role="user", content=t, sender_person_id=person.pk,
                                        at=at + i)[0].pk for i, t in enumerate(texts)]

    return a.pk, b.pk, say, {"a": a, "b": b}


def _search(stream_id: int, query: str, limit: int = 10) -> list[tuple[int, float]]:
    return lexical.message_candidates(lexical.match_for("messages_fts", query), stream_id=stream_id, limit=limit)


def _own_answer(stream_id: int, query: str, limit: int = 10) -> list[tuple[int, float]]:
    """FTS5 on SQLite, the postings tables on PostgreSQL: the answer without resident statistics."""
    with override_settings(LEXICAL_RESIDENT_INDEX=False):
        return _search(stream_id, query, limit)


def _plain(df: dict[str, int]) -> dict[str, int]:
    # the stream column's tokens: FTS5's vocabulary counts them, PostgreSQL's postings do not (never
    # scored by the resident statistics: such a query term goes to FTS5)
    return {t: n for t, n in df.items() if not lexical_index._STREAM_TOKEN.fullmatch(t)}


def _same_as_a_fresh_load(index: lexical_index.ResidentMessages, stream_ids) -> None:
    assert lexical_index.resident_messages() is index  # refreshed, as before every search
    fresh = lexical_index.ResidentMessages()
    fresh.refresh()
    assert (index._rows, index._total_tokens) == (fresh._rows, fresh._total_tokens)
    assert _plain(index._df) == _plain(fresh._df)
    for sid in stream_ids:
        for query in QUERIES:
            terms = lexical.terms_of(lexical.match_for("messages_fts", query))
            got, want = index.scores(sid, terms), fresh.scores(sid, terms)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (sid, query)
            searched = _search(sid, query)
            own = _own_answer(sid, query)
            assert [i for i, _ in searched] == [i for i, _ in own], (sid, query)
            assert [b for _, b in searched] == pytest.approx([b for _, b in own], rel=1e-12, abs=1e-15)


def test_edits_and_deletes_are_applied_not_reloaded(streams):
    a, b, say, named = streams
    ids_a = say(named["a"], CHAT)
    ids_b = say(named["b"], CHAT[::-1], at=NOW + 100)
    placeholder = say(named["a"], [""], at=NOW + 200)[0]
    for sid in (a, b):
        _search(sid, "乌龙茶")  # loads the statistics and both streams' postings
    index = lexical_index.resident_messages()
    rebuilds = index.rebuilds

    services.update_message_content(message_id=ids_a[0], content="晚上改喝普洱了，不喝乌龙茶")  # an edit
    _same_as_a_fresh_load(index, (a, b))
    services.update_message_content(message_id=placeholder, content="新来的猫很乖")  # a placeholder filled in
    assert placeholder in {i for i, _ in _search(a, "猫")}
    _same_as_a_fresh_load(index, (a, b))
    services.update_message_content(message_id=ids_a[3], content="")  # a body emptied: no FTS row any more
    Message.objects.filter(pk=ids_b[2]).delete()  # a delete
    assert ids_b[2] not in {i for i, _ in _search(b, "猫")}
    _same_as_a_fresh_load(index, (a, b))
    fresh = say(named["b"], ["新的乌龙茶", "新的红茶"], at=NOW + 300)
    services.update_message_content(message_id=fresh[0], content="新的普洱")  # appended, then edited, one poll
    Message.objects.filter(pk=fresh[1]).delete()  # the newest message goes
    _same_as_a_fresh_load(index, (a, b))
    Message.objects.filter(stream_id=b).delete()  # a whole stream in one statement
    say(named["a"], ["还是乌龙茶好"], at=NOW + 400)
    _same_as_a_fresh_load(index, (a, b))
    assert index.rebuilds == rebuilds  # not one reload


def test_a_pruned_change_log_still_reloads(streams):
    from memory.search import changes

    a, _b, say, named = streams
    ids = say(named["a"], CHAT)
    _search(a, "乌龙茶")
    index = lexical_index.resident_messages()
    rebuilds = index.rebuilds
    Message.objects.filter(pk=ids[0]).delete()
    services.add_knowledge(content="月球绕着地球转", source="t", at=NOW)  # a newer log row to keep
    # SQLite drops all but the newest row; PostgreSQL only what every open snapshot (any database of
    # the cluster) has seen, which another session's open transaction can hold back: it may then drop
    # nothing, or only changes this reader had read already — a reload is due only when the prune
    # passed the reader's position (its horizon)
    horizon = index._feed.horizon if connection.vendor == "postgresql" else None
    dropped = changes.prune(keep=1)
    assert dropped >= (1 if connection.vendor == "sqlite" else 0)
    _search(a, "乌龙茶")
    if connection.vendor == "sqlite":
        passed = dropped > 0
    else:
        from memory.models import Meta

        through = Meta.objects.filter(key="changes_pruned_through").values_list("value", flat=True).first()
        passed = through is not None and horizon is not None and int(through) >= horizon
    assert index.rebuilds == rebuilds + (1 if passed else 0)
    _same_as_a_fresh_load(index, (a,))


@pytest.mark.postgresql_only("SQLite has one writer at a time: a smaller transaction id cannot commit later")
def test_an_edit_committed_late_is_applied_once(streams):
    """Transaction A edits a message first (the smaller xid) and commits after B's edits, delete and
    append, and while C waits to edit A's row too; the statistics are read in between and after,
    and never reload."""
    a, b, say, named = streams
    ids_a = say(named["a"], CHAT)
    ids_b = say(named["b"], CHAT[::-1], at=NOW + 100)
    for sid in (a, b):
        _search(sid, "乌龙茶")
    index = lexical_index.resident_messages()
    rebuilds = index.rebuilds
    edited, release, failure = threading.Event(), threading.Event(), []

    def slow_editor() -> None:
        try:
            with transaction.atomic():
                services.update_message_content(message_id=ids_a[6], content="红茶好喝，乌龙茶也行")
                edited.set()
                assert release.wait(30)
        except Exception as exc:  # surfaced by the main thread
            failure.append(exc)
            edited.set()
        finally:
            connection.close()

    second_started = threading.Event()

    def same_row() -> None:
        try:
            second_started.set()
            services.update_message_content(message_id=ids_a[6], content="红茶换成了月球形状的杯子")
        except Exception as exc:  # surfaced by the main thread
            failure.append(exc)
        finally:
            connection.close()

    writer, second = threading.Thread(target=slow_editor), threading.Thread(target=same_row)
    writer.start()
    try:
        assert edited.wait(30) and not failure
        services.update_message_content(message_id=ids_b[0], content="乌龙茶 乌龙茶 普洱")
        Message.objects.filter(pk=ids_a[9]).delete()
        say(named["a"], ["又一杯乌龙茶"], at=NOW + 300)
        _same_as_a_fresh_load(index, (a, b))  # A's edit is not visible yet, to either
        services.update_message_content(message_id=ids_b[0], content="普洱")  # the same row again, later
        _same_as_a_fresh_load(index, (a, b))
        second.start()  # waits for A's row lock, commits after A
        second_started.wait(30)
        time.sleep(0.2)
    finally:
        release.set()
        writer.join(30)
    if second.ident is not None:
        second.join(30)
    assert not failure
    assert ids_a[6] in {i for i, _ in _search(a, "月球")}
    _same_as_a_fresh_load(index, (a, b))
    services.update_message_content(message_id=ids_a[6], content="只喝白开水")  # A's row, edited after its commit
    _same_as_a_fresh_load(index, (a, b))
    assert index.rebuilds == rebuilds


def test_a_random_run_of_appends_edits_and_deletes_ends_where_a_fresh_load_is(streams):
    rng = random.Random(11)
    a, b, say, named = streams
    words = ["乌龙茶", "猫", "月球", "红茶", "普洱", "杭州", "出差", "今天", "新", "café", "爬山", ""]
    live = say(named["a"], CHAT[:5]) + say(named["b"], CHAT[5:], at=NOW + 50)
    for sid in (a, b):
        _search(sid, "猫")
    index = lexical_index.resident_messages()
    rebuilds = index.rebuilds
    for step in range(60):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 4))).strip()
        op = rng.random()
        if op < 0.4 or not live:
            live += say(named[rng.choice("ab")], [text], at=NOW + 100 + step)
        elif op < 0.75:
            services.update_message_content(message_id=rng.choice(live), content=text)
        else:
            gone = rng.choice(live)
            live.remove(gone)
            Message.objects.filter(pk=gone).delete()
        if step % 3 == 0:
            _search(rng.choice((a, b)), rng.choice(words[:-1]))  # a refresh, with a stream's postings cached
        if step % 10 == 9:
            _same_as_a_fresh_load(index, (a, b))
    _same_as_a_fresh_load(index, (a, b))
    assert index.rebuilds == rebuilds


def test_word_weights_take_the_statistics_as_they_stood_for_a_few_seconds(streams, monkeypatch):
    """Where a fact was told only weighs words by their document frequency: a reader takes the statistics
    as last brought up to date (no poll of the change log) while they are young, and brings them up to
    date once they are older than MESSAGE_WEIGHTS_MAX_AGE_S — the same numbers FTS5 / the postings give."""
    a, _b, say, _ = streams
    say(streams[3]["a"], CHAT[:4])
    fresh = lexical_index.resident_messages()
    assert fresh is not None and lexical.message_statistics(["乌龙茶", "月球"]) == ({"乌龙茶": 1, "月球": 1}, 4)
    say(streams[3]["a"], ["乌龙茶真好喝"], at=NOW + 100)
    assert lexical.message_statistics(["乌龙茶"]) == ({"乌龙茶": 1}, 4)  # young: as they stood
    clock = time.monotonic() + lexical_index.MESSAGE_WEIGHTS_MAX_AGE_S + 1
    monkeypatch.setattr(lexical_index.time, "monotonic", lambda: clock)
    assert lexical.message_statistics(["乌龙茶"]) == ({"乌龙茶": 2}, 5)  # old: brought up to date
    with override_settings(LEXICAL_RESIDENT_INDEX=False):  # no resident index: the backend's numbers
        assert lexical.message_statistics(["乌龙茶", "普洱"]) == ({"乌龙茶": 2}, 5)
