"""A web process builds the resident structures a turn reads in a thread of its own
(``lexical_index.warm_up_in_background``); until each is built, the turn takes the statements
— FTS5 on SQLite, the postings tables on PostgreSQL, the stored tokens for a scope's own
statistics — and must give the very same turn as the resident index gives once built.

Resident indexes answer outside transactions only: a transactional database, FTS tables
emptied first (their own store).
"""
from __future__ import annotations

import threading

import pytest
from django.db import connection

from memory import recall, selectors, services
from memory.search import lexical, lexical_index
from tests.memory.conftest import NOW

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

FACTS = [
    "Caroline went to an LGBTQ support group", "Caroline researched adoption agencies", "喜欢喝乌龙茶，不喝咖啡",
    "Melanie painted a lake sunrise", "养了一只猫叫咪咪", "住在杭州西湖边", "周末常去爬山", "在一家医院当护士",
    "乌龙茶 乌龙茶 是最爱", "Melanie signed up for a pottery class", "明天要去杭州出差", "猫又把杯子打翻了",
]
CHAT = [
    "晚上喝了乌龙茶", "周末去爬山了，山上好冷", "月球好亮啊今天", "我养的猫叫咪咪", "今天加班到很晚",
    "明天要去杭州出差", "乌龙茶和红茶哪个好喝", "Caroline said the support group helped", "Café au lait please",
    "乌龙茶 乌龙茶 猫", "pottery class on Sunday?", "西湖边散步",
]
TURNS = ["乌龙茶还是咖啡？", "猫怎么样了", "What did Caroline research?", "杭州 出差 爬山", "pottery", "你好", "月球"]


@pytest.fixture(autouse=True)
def _empty_indexes(empty_lexical_indexes):
    """Every test starts from empty FTS tables and no resident index, and leaves no warm-up behind."""
    yield
    lexical_index._warming.clear()


def _store():
    """Three persons with facts (one superseded), two streams with messages and summarised episodes."""
    persons = [services.resolve_person(platform="t", external_id=f"p{i}", name=n, at=NOW)
               for i, n in enumerate(["Caroline", "Melanie", "阿明"])]
    streams = [services.resolve_stream(platform="t", kind=kind, external_id=kind) for kind in ("group", "direct")]
    for i, text in enumerate(FACTS):
        services.add_fact(person_id=persons[i % 3].pk, content=text, kind="偏好", origin_kind="direct", at=NOW + i)
    old = services.add_fact(person_id=persons[2].pk, content="住在上海", kind="身份", slot="居住地",
                            origin_kind="direct", at=NOW).fact_id
    services.add_fact(person_id=persons[2].pk, content="搬到杭州住了", kind="身份", slot="居住地", origin_kind="direct",
                      at=NOW + 1, supersedes=old)
    for k, stream in enumerate(streams):
        for i, text in enumerate(CHAT * 2):
            services.append_message(stream_id=stream.pk, role="user", content=text,
                                    sender_person_id=persons[(i + k) % 3].pk, at=NOW + 10 * i)
        for i in range(0, len(CHAT), 3):
            services.add_episode(stream_id=stream.pk, summary=CHAT[i], cues=CHAT[i:i + 3], started_at=NOW,
                                 ended_at=NOW + 1, message_ids=[], at=NOW)
    return persons, streams


def _turns(persons, streams) -> list:
    """Every turn of :data:`TURNS` in each stream, read-only, and the readers under them."""
    out = []
    for stream in streams:
        for i, text in enumerate(TURNS):
            ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=persons[i % 3].pk, text=text,
                                      at=NOW + 100_000, record=False)
            out.append((ctx.working_memory, ctx.present_person_ids, ctx.pool, ctx.facts, ctx.episodes, ctx.context,
                        ctx.blocked))
            match = lexical.match_for("messages_fts", text)
            out.append(selectors.search_messages(stream_id=stream.pk, query=text, limit=8))
            out.append(lexical.message_bm25(match, stream_id=stream.pk, message_ids=list(range(1, 60))))
            out.append(selectors.recall_episodes(stream_id=stream.pk, query=text, limit=3))
            out.append(lexical.cue_candidates(lexical.match_for("cues_fts", text), stream_id=stream.pk, limit=5))
            facts_match = lexical.match_for("facts_fts", text)
            pids = [p.pk for p in persons[:2]]
            out.append(lexical.fact_candidates(facts_match, person_ids=pids, limit=6))
            out.append(lexical.fact_bm25(facts_match, list(range(1, 20))))
            out.append(selectors.recall_facts_in_scope(person_ids=pids, query=text, now=NOW + 100_000,
                                                       stream_kind=stream.kind, return_candidates=True))
    return out


def _loaded() -> list[bool]:
    return [lexical_index._messages.loaded, *(lexical_index._index(t).loaded for t in ("facts_fts", "cues_fts"))]


def _without_tokens(results: list) -> list:
    """A fact row's stored tokens are read by the resident path only (the other leaves them ``None``)."""
    return [[r._replace(tokens=None) if isinstance(r, lexical.FactRow) else r for r in x] if isinstance(x, list) else x
            for x in results]


def test_a_turn_while_the_warm_up_builds_is_the_turn_once_it_is_built():
    persons, streams = _store()
    lexical_index.reset_all()
    lexical_index._warming.set()  # a warm-up that has built nothing yet
    warming = _turns(persons, streams)
    assert _loaded() == [False, False, False]  # the statements answered: no reader built a whole table
    lexical_index._warming.clear()
    lexical_index.warm_up()
    assert _loaded() == [True, True, True]
    built = _turns(persons, streams)
    assert _without_tokens(warming) == _without_tokens(built)  # the same rows, the same doubles
    assert any(built[1::8]) and any(built[4::8]) and any(built[5::8])  # messages, cues and facts were found
    assert any(turn[2] for turn in built[::8])  # and turns ranked facts (the direct stream's)


def test_the_background_warm_up_builds_them_and_a_turn_meanwhile_does_not_wait(monkeypatch):
    persons, streams = _store()
    lexical_index.reset_all()
    release, building = threading.Event(), threading.Event()
    load = lexical_index.ResidentBM25._load_chunks

    def slow_load(self, chunks):
        building.set()
        assert release.wait(30)
        return load(self, chunks)

    monkeypatch.setattr(lexical_index.ResidentBM25, "_load_chunks", slow_load)
    thread = lexical_index.warm_up_in_background()
    try:
        assert building.wait(30)  # the facts' postings are being built, and will not finish until released
        ctx = recall.prepare_turn(stream_id=streams[1].pk, speaker_id=persons[0].pk, text=TURNS[2],
                                  at=NOW + 100_000, record=False)  # answered meanwhile
        assert ctx.pool and not lexical_index._index("facts_fts").loaded
    finally:
        release.set()
        thread.join(30)
    assert not thread.is_alive() and not lexical_index._warming.is_set()
    assert _loaded() == [True, True, True]
    assert recall.prepare_turn(stream_id=streams[1].pk, speaker_id=persons[0].pk, text=TURNS[2], at=NOW + 100_000,
                               record=False).pool == ctx.pool


def test_no_warm_up_without_the_resident_indexes(settings):
    settings.LEXICAL_RESIDENT_INDEX = False
    assert lexical_index.warm_up_in_background() is None and not lexical_index._warming.is_set()
    assert connection.in_atomic_block is False
