"""The lexical statements' contract (memory.backends.LexicalStatements): the backend in use — FTS5 on
SQLite, the postings tables on PostgreSQL — answers every statement on the same inputs with the
rows and the bm25 doubles that FTS5's formula gives from the rows' stored tokens, computed here in
Python. The suite runs on both backends (`DATABASE_URL=… make test`), so both implementations meet
the same expectations."""
from __future__ import annotations

import math

import pytest
from django.db import connection

from memory import backends, services
from memory.backends.portable import TOKEN_COLUMNS
from memory.engine.bm25 import K1, B, fts_idf, fts_tokens, phrase_frequency
from memory.engine.tokenize import match_query, terms_of
from memory.models import Episode

from .conftest import NOW, make_person

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("empty_lexical_indexes")]

#: tokens a row's unweighted scope column adds to its length, as FTS5 counts them
EXTRA = {"facts_fts": 1, "cues_fts": 1, "knowledge_fts": 0, "messages_fts": 1}

FACTS = ["他喜欢打篮球", "他养了一只橘猫", "他住在杭州西湖边", "她喜欢在杭州喝龙井茶", "她每天早上跑步",
         "她的猫叫团子", "他周末常去打篮球和游泳"]
KNOWLEDGE = ["龙井茶产自杭州西湖", "篮球起源于美国", "橘猫是一种常见的家猫", "西湖是杭州的名胜"]
MESSAGES = ["周末去打篮球吧", "我的猫今天不吃饭", "杭州下雨了", "篮球场在哪里", "猫粮买好了", "晚上吃什么"]


@pytest.fixture
def store():
    a, b = make_person("c1", "甲"), make_person("c2", "乙")
    facts = [services.add_fact(person_id=(a if i % 2 == 0 else b).pk, content=text, kind="事件", at=NOW + i).fact_id
             for i, text in enumerate(FACTS)]
    services.add_fact(person_id=a.pk, content="他喜欢打排球", kind="偏好", supersedes=facts[0], at=NOW + 20)
    knowledge = [services.add_knowledge(content=text, source="test", at=NOW) for text in KNOWLEDGE]
    streams = [services.resolve_stream(platform="qq", kind="group", external_id=f"cg{i}", name=f"群{i}") for i in (1, 2)]
    messages = [services.append_message(stream_id=streams[i % 2].pk, role="user", content=text,
                                        sender_person_id=a.pk, at=NOW + i)[0].pk
                for i, text in enumerate(MESSAGES)]
    episodes = [services.add_episode(stream_id=streams[i].pk, summary=summary, cues=cues, started_at=NOW, ended_at=NOW + 1,
                                     message_ids=[]).pk
                for i, (summary, cues) in enumerate([("聊篮球", ["打篮球", "篮球场"]), ("聊猫", ["橘猫", "猫粮", "杭州"])])]
    return {"persons": [a.pk, b.pk], "facts": facts, "knowledge": knowledge, "streams": [s.pk for s in streams],
            "messages": messages, "episodes": episodes}


def _docs(table: str) -> dict[int, tuple[list[str], int]]:
    """Every indexed row of ``table``: id → (its tokens as FTS5 splits them, its scope id)."""
    rows, column = TOKEN_COLUMNS[table]
    scope = {"facts_fts": "t.person_id", "knowledge_fts": "0", "messages_fts": "t.stream_id",
             "cues_fts": "(SELECT e.stream_id FROM episodes e WHERE e.id = t.episode_id)"}[table]
    with connection.cursor() as cur:
        cur.execute(f"SELECT t.id, t.{column}, {scope} FROM {rows} t WHERE t.{column} <> ''")
        return {int(i): (fts_tokens(tokens), int(s)) for i, tokens, s in cur.fetchall()}


def _bm25(table: str, match: str) -> dict[int, float]:
    """FTS5's bm25 of every matching row over the whole table (fts5_bm25's order of operations)."""
    docs = _docs(table)
    phrases = [p for p in (fts_tokens(t) for t in terms_of(match)) if p]
    n = len(docs)
    avgdl = sum(len(d) + EXTRA[table] for d, _ in docs.values()) / n
    idfs = [fts_idf(n, sum(1 for d, _ in docs.values() if phrase_frequency(p, d))) for p in phrases]
    out = {}
    for doc_id, (doc, _) in docs.items():
        norm = K1 * ((1.0 - B) + B * float(len(doc) + EXTRA[table]) / avgdl)
        score, matched = 0.0, False
        for phrase, idf in zip(phrases, idfs, strict=True):
            tf = float(phrase_frequency(phrase, doc))
            if tf:
                matched = True
                score += idf * ((tf * (K1 + 1.0)) / (tf + norm))
        if matched:
            out[doc_id] = -1.0 * score
    return out


def _scoped(table: str, scores: dict[int, float], scopes) -> dict[int, float]:
    docs = _docs(table)
    return {i: b for i, b in scores.items() if docs[i][1] in scopes}


def _same(got: dict[int, float], want: dict[int, float]) -> None:
    assert want, "the expectation must hold rows, or the comparison proves nothing"
    assert sorted(got) == sorted(want)
    for i, b in want.items():
        assert math.isclose(got[i], b, rel_tol=1e-12, abs_tol=1e-15), (i, got[i], b)


def _in_order(pairs, want: dict[int, float]) -> None:
    """``(id, bm25)`` pairs best first, each with its expected score."""
    scores = [b for _, b in pairs]
    assert scores == sorted(scores)
    _same(dict(pairs), want)


Q = match_query("杭州 篮球 猫")


def test_whole_table_and_scoped_fact_queries(store):
    statements = backends.lexical()
    want = _bm25("facts_fts", Q)
    valid = {i: b for i, b in want.items() if i in store["facts"][1:]}  # the first was superseded
    rows = statements.fact_candidates(Q, person_ids=None, limit=50, include_invalid=False)
    _in_order([(r[0], r[1]) for r in rows], valid)
    rows = statements.fact_candidates(Q, person_ids=None, limit=50, include_invalid=True)
    _in_order([(r[0], r[1]) for r in rows], want)
    a = store["persons"][0]
    rows = statements.fact_candidates(Q, person_ids=[a], limit=50, include_invalid=False)
    _in_order([(r[0], r[1]) for r in rows], _scoped("facts_fts", valid, {a}))
    assert {r[2] for r in rows} == {a}  # the row's person
    top = statements.fact_candidates(Q, person_ids=None, limit=2, include_invalid=False)
    assert [r[0] for r in top] == [r[0] for r in statements.fact_candidates(Q, person_ids=None, limit=50,
                                                                             include_invalid=False)][:2]
    some = store["facts"][1:4]
    _same(statements.fact_bm25(Q, some), {i: b for i, b in want.items() if i in some})
    similar = statements.similar_facts(Q, person_id=a, limit=50)
    assert [i for i, _ in similar] == [r[0] for r in statements.fact_candidates(Q, person_ids=[a], limit=50,
                                                                                include_invalid=False)]


def test_cue_queries(store):
    statements = backends.lexical()
    want = _bm25("cues_fts", Q)
    hits = statements.cue_candidates(Q, stream_id=None, limit=50)
    _in_order([(cue, b) for _, cue, b in hits], want)
    episode_of = dict(Episode.objects.filter(pk__in=store["episodes"]).values_list("stream_id", "pk"))
    first = store["streams"][0]
    hits = statements.cue_candidates(Q, stream_id=first, limit=50)
    _in_order([(cue, b) for _, cue, b in hits], _scoped("cues_fts", want, {first}))
    assert {e for e, _, _ in hits} == {episode_of[first]}


def test_knowledge_and_whole_table_queries(store):
    statements = backends.lexical()
    want = _bm25("knowledge_fts", Q)
    _in_order(statements.knowledge_candidates(Q, limit=50), want)
    _same(statements.knowledge_bm25(Q, store["knowledge"][:2]), {i: want[i] for i in store["knowledge"][:2] if i in want})
    for table in ("facts_fts", "knowledge_fts", "cues_fts", "messages_fts"):
        want = _bm25(table, Q)
        _in_order(statements.unpruned_top(table, Q, limit=50), want)
        assert statements.rows_containing(table, Q, limit=50) == sorted(want)
        assert statements.document_count(table) == len(_docs(table))


def test_message_queries(store):
    statements = backends.lexical()
    stream = store["streams"][0]
    want = _scoped("messages_fts", _bm25("messages_fts", Q), {stream})
    _in_order(statements.message_candidates(Q, stream_id=stream, before_id=None, limit=50), want)
    before = max(want)
    _in_order(statements.message_candidates(Q, stream_id=stream, before_id=before, limit=50),
              {i: b for i, b in want.items() if i < before})
    _same(statements.message_bm25(Q, stream_id=stream, message_ids=store["messages"]), want)


def test_document_frequencies_and_deletes(store):
    statements = backends.lexical()
    docs = _docs("facts_fts")
    df = {t: sum(1 for d, _ in docs.values() if t in d) for t in ("杭州", "篮球", "火星")}
    assert statements.document_frequencies("facts_fts", list(df)) == {t: n for t, n in df.items() if n}
    gone = store["facts"][2]
    with connection.cursor() as cur:
        cur.execute("SELECT tokens, person_id FROM facts WHERE id = %s", [gone])
        tokens, person = cur.fetchone()
    statements.delete_rows("facts_fts", [(gone, tokens, person)])
    assert gone not in dict(statements.unpruned_top("facts_fts", Q, limit=50))
    assert statements.document_count("facts_fts") == len(docs) - 1
    statements.clear("knowledge_fts")
    assert statements.knowledge_candidates(Q, limit=50) == []
