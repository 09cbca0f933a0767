"""The resident BM25 index ranks whole tables exactly like unpruned FTS5, and stays fresh.

It answers only outside transactions, so these tests use a transactional database;
FTS5 tables are not flushed between such tests, so each test empties them first.
"""
from __future__ import annotations

import pytest
from django.db import connection, transaction

from memory import selectors, services
from memory.models import Fact, ImportBatch, Knowledge, Message
from memory.search import lexical, lexical_index
from memory.search.lexical_index import fts_tokens, resident
from tests.memory.conftest import NOW

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

KNOWLEDGE = [
    "月球是地球唯一的天然卫星，月球表面有很多陨石坑",
    "火星有两颗卫星：火卫一和火卫二",
    "地球的大气层主要由氮气和氧气组成",
    "熊猫主要吃竹子，也会吃一些水果",
    "长城始建于春秋战国时期，秦朝把各段连起来",
    "光合作用需要光、水和二氧化碳",
    "二十四节气是根据太阳在黄道上的位置划分的",
    "The Moon is Earth's only natural satellite and has many craters",
    "Café au lait is coffee with hot milk; café crème is similar",
    "月球 月球 月球 的引力让地球产生潮汐",
    "木星是太阳系最大的行星，卫星很多",
    "地球绕太阳公转一周大约三百六十五天",
]
QUERIES = [
    "月球和地球有什么关系", "火星的卫星叫什么", "熊猫喜欢吃什么", "光合作用需要什么", "长城是什么时候修的",
    "moon craters satellite", "CAFÉ with milk", "太阳系最大的行星", "地球 卫星 太阳", "完全无关的问题",
]


@pytest.fixture(autouse=True)
def _empty_indexes(empty_lexical_indexes):
    """Every test starts from empty FTS tables and no resident index."""


def _people_and_stream():
    a = services.resolve_person(platform="t", external_id="a", name="阿明", at=NOW)
    b = services.resolve_person(platform="t", external_id="b", name="小红", at=NOW)
    stream = services.resolve_stream(platform="t", kind="group", external_id="g")
    return a, b, stream


def _assert_same_ranking(table: str, got: list[tuple[int, float]], query: str, limit: int = 10) -> None:
    want = lexical.unpruned_top(table, lexical.match_for(table, query), limit=limit)
    assert [i for i, _ in got] == [i for i, _ in want], query
    assert [b for _, b in got] == pytest.approx([b for _, b in want], rel=1e-9, abs=1e-12), query


def test_knowledge_scores_equal_unpruned_fts5():
    for text in KNOWLEDGE:
        services.add_knowledge(content=text, source="t", at=NOW)
    index = resident("knowledge_fts")
    assert index is not None and len(index) == len(KNOWLEDGE)
    for query in QUERIES:
        got = lexical.knowledge_candidates(lexical.match_for("knowledge_fts", query), limit=10)
        _assert_same_ranking("knowledge_fts", got, query)


def test_facts_and_cues_scores_equal_unpruned_fts5_over_every_person_and_stream():
    a, b, stream = _people_and_stream()
    other = services.resolve_stream(platform="t", kind="direct", external_id="d")
    for i, text in enumerate(KNOWLEDGE):
        services.add_fact(person_id=(a, b)[i % 2].pk, content=text, kind="偏好", origin_kind="direct", at=NOW + i)
    for i in range(0, len(KNOWLEDGE), 3):
        services.add_episode(
            stream_id=(stream, other)[i % 2].pk, summary="s", cues=KNOWLEDGE[i : i + 3], started_at=NOW,
            ended_at=NOW + 1, message_ids=[], at=NOW,
        )
    for query in QUERIES:
        match = lexical.match_for("facts_fts", query)
        facts = lexical.fact_candidates(match, person_ids=None, limit=10)
        _assert_same_ranking("facts_fts", [(r[0], r[1]) for r in facts], query)
        cues = lexical.cue_candidates(match, stream_id=None, limit=10)
        _assert_same_ranking("cues_fts", [(cue, b) for _, cue, b in cues], query)


def test_appended_rows_are_found_and_merged_in_batches(monkeypatch):
    monkeypatch.setattr(lexical_index, "TAIL_MERGE_ROWS", 3)
    for text in KNOWLEDGE[:4]:
        services.add_knowledge(content=text, source="t", at=NOW)
    index = resident("knowledge_fts")
    rebuilds = index.rebuilds
    for i, text in enumerate(KNOWLEDGE[4:], start=4):
        services.add_knowledge(content=text, source="t", at=NOW)
        for query in QUERIES[:6]:
            got = lexical.knowledge_candidates(lexical.match_for("knowledge_fts", query), limit=10)
            _assert_same_ranking("knowledge_fts", got, query)
        assert len(index) == i + 1
    assert index.rebuilds == rebuilds  # appends never rebuild


def test_a_row_logged_again_is_not_appended_twice_before_or_after_its_ids_are_merged(monkeypatch):
    monkeypatch.setattr(lexical_index, "TAIL_MERGE_ROWS", 3)
    for text in KNOWLEDGE[:4]:
        services.add_knowledge(content=text, source="t", at=NOW)
    index = resident("knowledge_fts")
    ids = [services.add_knowledge(content=text, source="t", at=NOW) for text in KNOWLEDGE[4:]]
    resident("knowledge_fts")
    assert len(index) == len(KNOWLEDGE) and not index._loaded_tail  # the appended ids merged into the sorted ones
    loaded = sorted(Knowledge.objects.values_list("id", flat=True))
    assert index._not_loaded([*loaded, *ids]) == [] and index._not_loaded([loaded[-1] + 7, ids[0]]) == [loaded[-1] + 7]
    extra = services.add_knowledge(content="火星 月球", source="t", at=NOW)
    resident("knowledge_fts")
    assert index._loaded_tail == {extra} and index._not_loaded([extra, *ids]) == []  # appended, not merged yet


def test_deleted_rows_leave_the_index():
    batch = ImportBatch.objects.create(kind="paste", created_at=NOW)
    kept = services.add_knowledge(content="月球是地球唯一的天然卫星", source="t", at=NOW)
    gone = services.add_knowledge(content="月球上有水冰", source="t", at=NOW, batch_id=batch.pk)
    assert {i for i, _ in lexical.knowledge_candidates(lexical.match_for("knowledge_fts", "月球"), limit=5)} == {kept, gone}
    rebuilds = resident("knowledge_fts").rebuilds
    from memory import pipeline

    pipeline.delete_batch(batch.pk, at=NOW)
    got = lexical.knowledge_candidates(lexical.match_for("knowledge_fts", "月球"), limit=5)
    assert [i for i, _ in got] == [kept]
    assert resident("knowledge_fts").rebuilds == rebuilds + 1
    _assert_same_ranking("knowledge_fts", got, "月球")


def test_inside_a_transaction_fts5_answers_and_a_rollback_leaves_nothing_behind():
    services.add_knowledge(content="月球是地球唯一的天然卫星", source="t", at=NOW)
    assert resident("knowledge_fts") is not None
    with pytest.raises(RuntimeError), transaction.atomic():
        phantom = services.add_knowledge(content="月球背面的陨石坑更多", source="t", at=NOW)
        assert resident("knowledge_fts") is None
        hits = lexical.knowledge_candidates(lexical.match_for("knowledge_fts", "陨石坑"), limit=5)
        assert [i for i, _ in hits] == [phantom]  # FTS5 sees the transaction's own row
        raise RuntimeError("roll back")
    assert lexical.knowledge_candidates(lexical.match_for("knowledge_fts", "陨石坑"), limit=5) == []
    assert len(resident("knowledge_fts")) == 1


def test_a_phrase_term_is_left_to_fts5():
    services.add_knowledge(content="圆周率约等于 3.14", source="t", at=NOW)
    index = resident("knowledge_fts")
    assert index.top(["3.14"], 5) is None  # FTS5 makes "3.14" a two-token phrase
    got = lexical.knowledge_candidates(lexical.match_for("knowledge_fts", "3.14"), limit=5)
    assert len(got) == 1


def test_superseded_facts_are_skipped_but_still_counted():
    a, _b, _stream = _people_and_stream()
    old = services.add_fact(person_id=a.pk, content="我住在杭州", kind="身份", origin_kind="direct", at=NOW).fact_id
    new = services.add_fact(
        person_id=a.pk, content="我搬到上海住了", kind="身份", origin_kind="direct", at=NOW + 1, supersedes=old,
    ).fact_id
    rows = lexical.fact_candidates(lexical.match_for("facts_fts", "住在 杭州 上海"), person_ids=None, limit=5)
    assert [r[0] for r in rows] == [new]
    everything = lexical.fact_candidates(
        lexical.match_for("facts_fts", "住在 杭州 上海"), person_ids=None, limit=5, include_invalid=True
    )
    _assert_same_ranking("facts_fts", [(r[0], r[1]) for r in everything], "住在 杭州 上海", limit=5)


def test_search_knowledge_and_console_search_use_it():
    for text in KNOWLEDGE:
        services.add_knowledge(content=text, source="t", at=NOW)
    hits = selectors.search_knowledge(query="火星的卫星", limit=3)
    assert hits and hits[0].content.startswith("火星")
    assert resident("knowledge_fts").rebuilds >= 1


def test_switched_off_by_setting(settings):
    settings.LEXICAL_RESIDENT_INDEX = False
    assert resident("knowledge_fts") is None


@pytest.mark.parametrize(
    "text",
    ["hello world", "Café CRÈME brûlée", "c++ 3.14 a_b", "月球 月球的 引力", "naïve résumé ÀÉÎÕÜ", "x1y2 ９９ ｆｕｌｌ"],
)
@pytest.mark.sqlite_only("compares with FTS5's own unicode61 tokenizer")
def test_fts_tokens_split_like_unicode61(text):
    with connection.cursor() as cur:
        cur.execute("CREATE VIRTUAL TABLE IF NOT EXISTS tok_probe USING fts5(t, tokenize='unicode61')")
        cur.execute("CREATE VIRTUAL TABLE IF NOT EXISTS tok_probe_i USING fts5vocab(tok_probe, 'instance')")
        cur.execute("DELETE FROM tok_probe")
        cur.execute("INSERT INTO tok_probe(rowid, t) VALUES (1, %s)", [text])
        cur.execute("SELECT term FROM tok_probe_i ORDER BY offset")
        want = [r[0] for r in cur.fetchall()]
        cur.execute("DROP TABLE tok_probe_i")
        cur.execute("DROP TABLE tok_probe")
    assert fts_tokens(text) == want


def test_ties_at_the_cut_go_to_the_lower_rowid_like_fts5():
    ids = [services.add_knowledge(content=f"{name} 月球", source="t", at=NOW) for name in "甲乙丙丁戊己庚辛"]
    got = lexical.knowledge_candidates(lexical.match_for("knowledge_fts", "月球"), limit=3)
    assert [i for i, _ in got] == sorted(ids)[:3]
    assert len({b for _, b in got}) == 1
    _assert_same_ranking("knowledge_fts", got, "月球", limit=3)


def test_revision_moves_on_token_change_and_delete_but_not_on_insert():
    from memory.models import Knowledge

    def revision() -> str:
        return resident("knowledge_fts").revision()

    before = revision()
    kid = services.add_knowledge(content="月球是地球唯一的天然卫星", source="t", at=NOW)
    assert revision() == before  # the writer fills the tokens inside the insert's transaction
    Knowledge.objects.filter(pk=kid).update(tokens="月球 卫星")
    changed = revision()
    assert changed != before
    Knowledge.objects.filter(pk=kid).delete()
    assert revision() not in (before, changed)


@pytest.mark.parametrize(("stored", "counter"), [("41-abc", 42), ("garbage", 1), ("", 1), ("-x", 1), ("7", 8)])
def test_a_revision_bump_reads_a_non_numeric_counter_as_zero(stored, counter):
    from memory import backends
    from memory.models import Meta

    Meta.objects.update_or_create(key="test_revision", defaults={"value": stored})
    with connection.cursor() as cur:
        backends.bump_revision(cur, "test_revision")
    assert Meta.objects.get(key="test_revision").value.split("-")[0] == str(counter)


@pytest.mark.postgresql_only("the revision triggers call a PostgreSQL function (SQLite's triggers CAST in place)")
def test_a_delete_bumps_a_non_numeric_revision_instead_of_failing():
    from memory.models import Knowledge, Meta

    kid = services.add_knowledge(content="月球是地球唯一的天然卫星", source="t", at=NOW)
    Meta.objects.update_or_create(key="lexical_revision:knowledge", defaults={"value": "hand-edited"})
    Knowledge.objects.filter(pk=kid).delete()  # the delete trigger bumps the revision
    assert Meta.objects.get(key="lexical_revision:knowledge").value.startswith("1-")


def _fts5(fn, *args, **kwargs):
    """The same call answered by FTS5 alone (the path taken without the resident index)."""
    from django.test import override_settings

    with override_settings(LEXICAL_RESIDENT_INDEX=False):
        return fn(*args, **kwargs)


def _same_rows(got: list[tuple], want: list[tuple], score_at: int) -> None:
    """Rows alike, scores to the last bit; a fact row's stored tokens (read by the resident path only) aside."""
    for r in got:
        if isinstance(r, lexical.FactRow) and r.tokens is not None:
            assert r.tokens == Fact.objects.get(pk=r.id).tokens
    got = [r._replace(tokens=None) if isinstance(r, lexical.FactRow) else r for r in got]
    want = [r._replace(tokens=None) if isinstance(r, lexical.FactRow) else r for r in want]
    assert [r[:score_at] for r in got] == [tuple(r[:score_at]) for r in want]
    assert [r[score_at] for r in got] == pytest.approx([r[score_at] for r in want], rel=1e-12, abs=1e-15)
    assert [r[score_at + 1:] for r in got] == [tuple(r[score_at + 1:]) for r in want]


def test_person_and_stream_scoped_queries_rank_like_fts5_ties_included(monkeypatch):
    calls = []
    scores_for = lexical_index.ResidentBM25.scores_for
    monkeypatch.setattr(lexical_index.ResidentBM25, "scores_for",
                        lambda self, *args: calls.append(self.source.fts) or scores_for(self, *args))
    a, b, stream = _people_and_stream()
    c = services.resolve_person(platform="t", external_id="c", name="阿强", at=NOW)
    other = services.resolve_stream(platform="t", kind="direct", external_id="d")
    people = (a, b, c)
    for i, text in enumerate(KNOWLEDGE):
        services.add_fact(person_id=people[i % 3].pk, content=text, kind="偏好", origin_kind="direct", at=NOW + i)
    for i, name in enumerate("甲乙丙丁戊己"):  # equal bm25 within a person: ties go to the lower id in both
        services.add_fact(person_id=people[i % 2].pk, content=f"{name}喜欢月球", kind="偏好", origin_kind="direct", at=NOW)
    old = services.add_fact(person_id=a.pk, content="我住在杭州", kind="身份", origin_kind="direct", at=NOW).fact_id
    services.add_fact(person_id=a.pk, content="我搬到杭州西湖边住了", kind="身份", origin_kind="direct", at=NOW + 1,
                      supersedes=old)
    for i in range(0, len(KNOWLEDGE), 2):
        services.add_episode(
            stream_id=(stream, other)[i % 4 // 2].pk, summary="s", cues=[*KNOWLEDGE[i : i + 2], "月球"],
            started_at=NOW, ended_at=NOW + 1, message_ids=[], at=NOW,
        )
    scoped = [[a.pk], [b.pk, c.pk], [a.pk, b.pk, c.pk]]
    for query in [*QUERIES, "月球", "住在杭州"]:
        match = lexical.match_for("facts_fts", query)
        for persons in scoped:
            for limit, invalid in ((2, False), (30, False), (30, True)):
                got = lexical.fact_candidates(match, person_ids=persons, limit=limit, include_invalid=invalid)
                want = _fts5(lexical.fact_candidates, match, person_ids=persons, limit=limit, include_invalid=invalid)
                _same_rows(got, want, 1)
                assert all(type(r) is lexical.FactRow for r in got)  # named rows whichever index answered
        for sid in (stream.pk, other.pk):
            got = lexical.cue_candidates(match, stream_id=sid, limit=4)
            _same_rows(got, _fts5(lexical.cue_candidates, match, stream_id=sid, limit=4), 2)
            assert all(type(r) is lexical.CueHit for r in got)
    assert {"facts_fts", "cues_fts"} <= set(calls)  # the resident index answered (FTS5 only for want)


def test_scoped_queries_see_new_rows_and_changed_tokens():
    a, _b, stream = _people_and_stream()
    services.add_fact(person_id=a.pk, content="阿明喜欢火锅", kind="偏好", origin_kind="direct", at=NOW)
    match = lexical.match_for("facts_fts", "月球")
    assert lexical.fact_candidates(match, person_ids=[a.pk], limit=5) == []
    index = resident("facts_fts")
    rebuilds = index.rebuilds
    fid = services.add_fact(person_id=a.pk, content="阿明想去月球", kind="偏好", origin_kind="direct", at=NOW).fact_id
    got = lexical.fact_candidates(match, person_ids=[a.pk], limit=5)
    assert [r[0] for r in got] == [fid] and index.rebuilds == rebuilds  # appended, not rebuilt
    _same_rows(got, _fts5(lexical.fact_candidates, match, person_ids=[a.pk], limit=5), 1)
    with connection.cursor() as cur:  # the row's indexed tokens change: the revision trigger rebuilds
        cur.execute("SELECT tokens FROM facts WHERE id = %s", [fid])
        tokens = cur.fetchone()[0]
    lexical.delete_fact_rows([(fid, tokens, a.pk)])
    with connection.cursor() as cur:
        cur.execute("UPDATE facts SET tokens = '' WHERE id = %s", [fid])
    lexical.index_fact(fid, "阿明想去火星", a.pk)
    assert lexical.fact_candidates(match, person_ids=[a.pk], limit=5) == []
    assert [r[0] for r in lexical.fact_candidates(lexical.match_for("facts_fts", "火星"), person_ids=[a.pk], limit=5)] == [fid]
    assert index.rebuilds > rebuilds
    services.add_episode(stream_id=stream.pk, summary="s", cues=["聊到月球"], started_at=NOW, ended_at=NOW + 1,
                         message_ids=[], at=NOW)
    assert len(lexical.cue_candidates(match, stream_id=stream.pk, limit=3)) == 1
    episode = services.add_episode(stream_id=stream.pk, summary="s2", cues=["又聊到月球"], started_at=NOW,
                                   ended_at=NOW + 2, message_ids=[], at=NOW)
    got = lexical.cue_candidates(match, stream_id=stream.pk, limit=3)
    assert episode.pk in [e for e, _c, _b in got] and len(got) == 2


def test_document_frequencies_come_from_the_index_like_the_vocab_table():
    a, b, _stream = _people_and_stream()
    for i, text in enumerate(KNOWLEDGE):
        services.add_fact(person_id=(a, b)[i % 2].pk, content=text, kind="偏好", origin_kind="direct", at=NOW + i)
    terms = ["月球", "地球", "卫星", "the", "CAFÉ", "café", "不存在的词", "3.14"]
    scope = [*terms, f"p{a.pk}"]  # a person column's token: the vocab counts that column too
    assert lexical.document_frequencies("facts_fts", scope) == _fts5(lexical.document_frequencies, "facts_fts", scope)
    want = _fts5(lexical.document_frequencies, "facts_fts", terms)
    assert lexical.document_frequencies("facts_fts", terms) == want and want["月球"] >= 2


# --- messages: one stream scored with the whole table's statistics -------------------------------

CHAT = [
    "晚上喝了乌龙茶", "周末去爬山了，山上好冷", "月球好亮啊今天", "我养的猫叫咪咪", "今天加班到很晚",
    "明天要去杭州出差", "乌龙茶和红茶哪个好喝", "猫又把杯子打翻了", "Café au lait please", "3.14 是圆周率",
]


def _messages(stream, sender, texts, at=NOW):
    return [
        services.append_message(stream_id=stream.pk, role="user", content=t, sender_person_id=sender.pk, at=at + i)[0].pk
        for i, t in enumerate(texts)
    ]


def _same_messages(stream_id: int, query: str, **kw) -> list[tuple[int, float]]:
    match = lexical.match_for("messages_fts", query)
    got = lexical.message_candidates(match, stream_id=stream_id, **kw)
    want = _fts5(lexical.message_candidates, match, stream_id=stream_id, **kw)
    _same_rows(got, want, 1)
    return got


def test_stream_scoped_message_search_ranks_like_fts5(monkeypatch):
    a, b, stream = _people_and_stream()
    other = services.resolve_stream(platform="t", kind="direct", external_id="d")
    ids = _messages(stream, a, CHAT * 2) + _messages(other, b, CHAT[::-1])
    calls = []
    scores = lexical_index.ResidentMessages.scores
    monkeypatch.setattr(lexical_index.ResidentMessages, "scores",
                        lambda self, *args, **kw: calls.append(1) or scores(self, *args, **kw))
    for query in [*QUERIES, *CHAT, "乌龙茶", "猫", "s2"]:
        for sid in (stream.pk, other.pk):
            _same_messages(sid, query, limit=5)
            _same_messages(sid, query, limit=30, before_id=ids[7])
            match = lexical.match_for("messages_fts", query)
            some = ids[::3]
            assert lexical.message_bm25(match, stream_id=sid, message_ids=some) == pytest.approx(
                _fts5(lexical.message_bm25, match, stream_id=sid, message_ids=some), rel=1e-12)
    assert calls  # the resident statistics answered (FTS5 only for want)
    tied = _same_messages(stream.pk, "乌龙茶", limit=10)
    assert [i for i, _ in tied][:2] == [ids[10], ids[0]]  # the same line twice: newer first, as FTS5 orders them


def test_message_statistics_follow_appends_edits_and_deletes():
    a, _b, stream = _people_and_stream()
    _messages(stream, a, CHAT)
    _same_messages(stream.pk, "乌龙茶", limit=5)  # loads the statistics and the stream's postings
    index = lexical_index.resident_messages()
    rebuilds = index.rebuilds
    fresh = _messages(stream, a, ["乌龙茶真香"] * 3, at=NOW + 100)
    got = _same_messages(stream.pk, "乌龙茶", limit=10)
    assert set(fresh) <= {i for i, _ in got} and index.rebuilds == rebuilds  # appended, not reloaded
    placeholder = _messages(stream, a, [""], at=NOW + 200)[0]
    _same_messages(stream.pk, "乌龙茶", limit=10)
    services.update_message_content(message_id=placeholder, content="这杯乌龙茶太浓了")  # first FTS row at an old id
    got = _same_messages(stream.pk, "乌龙茶", limit=10)
    assert placeholder in {i for i, _ in got} and index.rebuilds == rebuilds  # logged, applied (0025)
    Message.objects.filter(pk=fresh[0]).delete()
    got = _same_messages(stream.pk, "乌龙茶", limit=10)
    assert fresh[0] not in {i for i, _ in got} and index.rebuilds == rebuilds
    for k in range(lexical_index.STREAM_TAIL_MERGE_ROWS + 3):  # a long tail is merged into the stream's arrays
        _messages(stream, a, [f"第{k}杯乌龙茶"], at=NOW + 300 + k)
        if k % 20 == 0:
            _same_messages(stream.pk, "乌龙茶", limit=10)
    _same_messages(stream.pk, "乌龙茶 第三杯", limit=30)


def test_search_messages_inside_a_transaction_is_fts5s():
    a, _b, stream = _people_and_stream()
    _messages(stream, a, CHAT)
    with transaction.atomic():
        assert lexical_index.resident_messages() is None
        mine = _messages(stream, a, ["乌龙茶喝完了"], at=NOW + 50)[0]
        assert mine in [m.pk for m in selectors.search_messages(stream_id=stream.pk, query="乌龙茶", limit=6)]


def test_fact_bm25_of_given_facts_is_fts5s():
    a, b, _stream = _people_and_stream()
    ids = [
        services.add_fact(person_id=(a, b)[i % 2].pk, content=t, kind="偏好", origin_kind="direct", at=NOW + i).fact_id
        for i, t in enumerate(KNOWLEDGE)
    ]
    matched = 0
    for query in QUERIES:
        match = lexical.match_for("facts_fts", query)
        got = lexical.fact_bm25(match, ids[::2])
        assert got == pytest.approx(_fts5(lexical.fact_bm25, match, ids[::2]), rel=1e-12)
        assert set(got) <= set(ids[::2])
        matched += len(got)
    assert matched  # else both sides were empty and nothing was compared


def test_a_streams_tokens_split_at_once_like_unicode61():
    import random
    from itertools import chain

    rng = random.Random(7)
    for alphabet in ("ab你好世界 _.-é\u3000\t²ﬁİΣ3^\x00", "你好 世界_ab.3^~", "月球 的 引力 ab 12"):
        for _ in range(3000):
            texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(rng.randrange(1, 7))]
            docs = [fts_tokens(t) for t in texts]
            parted = list(chain.from_iterable([lexical_index._DOC_BREAK, *d] if k else d for k, d in enumerate(docs)))
            assert lexical_index._split_all(texts) == parted, texts


def test_a_streams_postings_are_its_terms_counted(monkeypatch):
    """The hashed postings of a stream give each term's messages and counts as unicode61's terms of the
    rows do: terms longer than the batched check, characters beyond UTF-16's one unit, rows not
    stored as terms (re-tokenised), a tail of appended rows and its merge."""
    import random
    from collections import Counter

    monkeypatch.setattr(lexical_index, "STREAM_TAIL_MERGE_ROWS", 3)
    rng = random.Random(5)
    words = ["a", "b", "ab", "a" * 15, "a" * 16, "ab" * 9, "你", "你好", "x" * 30, "é", "Ab", "\U00020000", "q_r", "3"]
    for _ in range(300):
        rows = [(i + 1, " ".join(rng.choice(words) for _ in range(rng.randrange(1, 8))))
                for i in range(rng.randrange(1, 12))]
        cut = rng.randrange(len(rows) + 1)
        stream = lexical_index._StreamPostings(rows[:cut])
        stream.extend(rows[cut:])
        docs = [Counter(fts_tokens(t)) for _, t in rows]
        assert stream.all_ids().tolist() == [i for i, _ in rows]
        assert stream.all_lengths().tolist() == [sum(d.values()) + 1 for d in docs]
        terms = sorted({t for d in docs for t in d} | {"zz", "a" * 14})
        found = stream.postings(terms)
        for term in terms:
            want = [(k, d[term]) for k, d in enumerate(docs) if d[term]]
            got = list(zip(*(x.tolist() for x in found[term]), strict=True)) if term in found else []
            assert got == want, (term, rows)


@pytest.mark.sqlite_only("compares the resident message index with FTS5's (PostgreSQL ranks messages from its postings)")
def test_a_stream_with_rows_stored_before_tokens_were_terms_ranks_like_fts5():
    """Rows stored before ``index_tokens`` wrote unicode61's terms (``Li _ Ming``, ``Café``) send the
    stream's postings through the re-tokenising path; the scores stay FTS5's."""
    a, _b, stream = _people_and_stream()
    ids = _messages(stream, a, [*CHAT, "邮箱是 li_ming0530@example.com", "Café OLÉ"])
    old_forms = {ids[-2]: "邮箱 li _ ming0530 exampl com 邮箱 箱是", ids[-1]: "Cafe OLE"}
    for mid, old in old_forms.items():  # the same terms to FTS5, another string on the row
        assert fts_tokens(old) == Message.objects.get(pk=mid).tokens.split()
        Message.objects.filter(pk=mid).update(tokens=old)
    for query, hit in [("ming0530 的邮箱", ids[-2]), ("café olé", ids[-1]), ("乌龙茶", ids[0]), ("猫", ids[7])]:
        lexical_index.reset_all()
        assert hit in [i for i, _ in _same_messages(stream.pk, query, limit=12)]


def test_index_tokens_are_unicode61_terms():
    from memory.engine.tokenize import bigrams, index_tokens, words

    for text in [*CHAT, *KNOWLEDGE, "邮箱是 li_ming0530@example.com", "C++ 和 Ça va?", "___", ""]:
        stored = index_tokens(text)
        assert stored.split() == fts_tokens(" ".join(words(text) + bigrams(text)))
        assert stored == " ".join(fts_tokens(stored))  # splitting the stored string is tokenising it


@pytest.mark.parametrize("loaded", [400, 0])  # 0: every row appended since an empty load (a new store)
def test_scoped_scores_are_the_whole_tables_bit_for_bit_with_appended_rows(loaded):
    # scores_for looks every (term, row) pair up at once; its sums must be scores' (no database involved)
    import random

    import numpy as np

    rng = random.Random(5)
    words = [f"w{i}" for i in range(120)]

    def doc() -> str:
        return " ".join(rng.choice(words[: rng.choice([10, 120])]) for _ in range(rng.randint(1, 20)))

    index = lexical_index.ResidentBM25(lexical_index.SOURCES["facts_fts"])
    index._load([(3 * i + 1, doc()) for i in range(loaded)])
    index._append([(5000 + i, doc()) for i in range(30)])  # a tail, not merged
    rowids = index._rowids(np.arange(len(index)))
    for _ in range(300):
        terms = [rng.choice([*words, "absent"]) for _ in range(rng.randint(1, 30))]  # a turn's query: ~20 tokens
        wanted = sorted(rng.sample(rowids.tolist(), rng.randint(1, min(60, len(rowids)))))
        ids, bm25 = index.scores_for(terms, wanted)
        all_ids, all_bm25 = index.scores(terms)
        keep = np.isin(all_ids, wanted)
        assert ids.tolist() == all_ids[keep].tolist()
        assert bm25.tolist() == all_bm25[keep].tolist()  # equal floats, not approximately
        # bm25_for: the same numbers by the rows' own cost, and by the whole table's when a row is not loaded
        expected = dict(zip(all_ids[keep].tolist(), all_bm25[keep].tolist(), strict=True))
        assert index.bm25_for(terms, wanted) == expected
        assert index.bm25_for(terms, [*wanted, 10**9]) == expected


@pytest.mark.parametrize("loaded", [400, 0])
def test_scope_scores_are_the_engines_bit_for_bit_with_appended_rows(loaded):
    # a person-scoped query ranks with the scope's own statistics: the resident index (numpy) and the
    # engine's scope_bm25 (plain Python, the path inside a transaction and on PostgreSQL's fallback)
    # give the same doubles, and the same document frequencies
    import random

    from memory.engine.bm25 import scope_bm25

    rng = random.Random(7)
    words = [f"w{i}" for i in range(120)]

    def doc() -> str:
        return " ".join(rng.choice(words[: rng.choice([10, 120])]) for _ in range(rng.randint(1, 20)))

    texts = {3 * i + 1: doc() for i in range(loaded)} | {5000 + i: doc() for i in range(30)}
    index = lexical_index.ResidentBM25(lexical_index.SOURCES["facts_fts"])
    index._load([(i, t) for i, t in texts.items() if i < 5000])
    index._append([(i, t) for i, t in texts.items() if i >= 5000])  # a tail, not merged
    for _ in range(300):
        terms = list(dict.fromkeys(rng.choice([*words, "absent"]) for _ in range(rng.randint(1, 30))))
        scope = sorted(rng.sample(sorted(texts), rng.randint(1, min(60, len(texts)))))
        ids, bm25 = index.scope_scores(terms, scope)
        want = scope_bm25([[t] for t in terms], {i: texts[i].split() for i in scope}, extra_tokens=1)
        assert ids.tolist() == sorted(want)
        assert bm25.tolist() == [want[i] for i in sorted(want)]  # equal floats, not approximately
        held = {t: sum(t in texts[i].split() for i in scope) for t in terms}
        assert index.scope_frequencies(terms, scope) == {t: k for t, k in held.items() if k}
    assert index.scope_scores(["w1"], [999_999]) is None  # a row the index has not loaded: the caller computes


def test_a_table_loaded_a_chunk_at_a_time_is_the_table_loaded_at_once(monkeypatch):
    # the load tokenises LOAD_CHUNK_ROWS rows at a time (its peak memory bounded); chunk borders change nothing
    import random

    rng = random.Random(11)
    words = [f"w{i}" for i in range(300)]
    rows = [(2 * i + 1, " ".join(rng.choice(words) for _ in range(rng.randint(0, 25)))) for i in range(1000)]
    whole = lexical_index.ResidentBM25(lexical_index.SOURCES["knowledge_fts"])
    whole._load_chunks([rows])
    monkeypatch.setattr(lexical_index, "LOAD_CHUNK_ROWS", 37)
    chunked = lexical_index.ResidentBM25(lexical_index.SOURCES["knowledge_fts"])
    chunked._load(rows)
    assert chunked._vocab == whole._vocab
    for name in ("_ids", "_lengths", "_indptr", "_keys", "_tfs"):
        assert getattr(chunked, name).tolist() == getattr(whole, name).tolist(), name
    for _ in range(50):
        terms = [rng.choice(words) for _ in range(rng.randint(1, 8))]
        assert [a.tolist() for a in chunked.scores(terms)] == [a.tolist() for a in whole.scores(terms)]
    empty = lexical_index.ResidentBM25(lexical_index.SOURCES["knowledge_fts"])
    empty._load([])
    assert len(empty) == 0 and empty.scores(["w1"])[0].tolist() == []
