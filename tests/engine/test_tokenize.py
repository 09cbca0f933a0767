"""Tokeniser — docs/REFERENCE.md §2."""

from __future__ import annotations

import sqlite3

import jieba
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.engine.tokenize import (
    STOP_CHARS,
    bigrams,
    english,
    index_tokens,
    is_cjk,
    match_expression,
    match_query,
    query_terms,
    words,
)


def test_stop_set() -> None:
    assert len(STOP_CHARS) == 48
    assert all(is_cjk(c) for c in STOP_CHARS)


def test_cjk_ranges() -> None:
    assert is_cjk("\u3400") and is_cjk("\u4dbf") and is_cjk("\u4e00") and is_cjk("\u9fff")
    assert is_cjk("\uf900") and is_cjk("\ufaff")
    assert not is_cjk("a") and not is_cjk("，") and not is_cjk("\u3000") and not is_cjk("\ufb00")


def test_bigrams() -> None:  # 14, 15
    assert bigrams("香菜") == ["香菜"]
    assert bigrams("abc香菜def") == ["香菜"]
    assert bigrams("写Rust代码") == ["代码"]
    assert bigrams("月璃今天") == ["月璃", "璃今", "今天"]
    assert bigrams("！？。，") == []
    assert bigrams("猫") == []
    assert bigrams("") == []
    assert bigrams("哈哈哈") == ["哈哈", "哈哈"]


def test_words_drop_stop_chars() -> None:  # 16
    w = words("我把饭都吃了")
    assert "饭" in w and "把" not in w and "都" not in w


def test_words_shapes() -> None:
    assert words("") == []
    assert words("！？。，  ") == []
    assert "rust" in words("写Rust代码")
    assert "144hz" in words("144Hz")
    assert "我们" in words("我们去吃饭")
    assert words("猫") == ["猫"]
    assert words("x") == ["x"]
    assert words("a") == []  # an English stop word
    assert "*" not in words("x*y")


def test_english_words_are_stemmed_and_stop_words_dropped() -> None:
    assert words("painting painted paints") == ["paint", "paint", "paint"]
    assert words("What did Caroline paint?") == ["carolin", "paint"]
    assert words("I'm going to the museums") == ["go", "museum"]
    assert words("Café Crème") == ["cafe", "creme"]  # folded as unicode61 folds, then stemmed
    assert index_tokens("She adopted two dogs") == "adopt two dog"


def test_english_analyser_leaves_other_tokens_alone() -> None:
    assert "144hz" in words("144Hz")  # letters and digits: not an English word
    # Chinese words are jieba's, only the stop characters dropped: the analyser does not touch them
    assert words("我最近想去杭州玩") == [w for w in jieba.cut("我最近想去杭州玩") if w not in STOP_CHARS]
    assert "杭州" in words("我最近想去杭州玩")
    assert english("running") == "run" and english("the") is None and english("杭州") == "杭州"
    assert english("2023") == "2023"


@pytest.mark.parametrize("text", [
    "月璃今天穿了一条新的连衣裙，玩家最近在学写代码", "我的上司就只有高中学历。", "下午一起去打球吗？当然是篮球啊",
    "金融科技精英论坛的规模是三千人。", "哈哈哈，早上好！在吗",
])
def test_chinese_tokens_unchanged_by_the_english_analyser(text: str) -> None:
    before = [t.strip().lower() for t in jieba.cut(text, cut_all=False)]  # the tokenizer without the analyser
    before = [t for t in before if t and any(c.isalnum() for c in t) and not (len(t) == 1 and t in STOP_CHARS)]
    assert words(text) == before


def test_match_query_empty() -> None:  # 17
    assert match_query("") == ""
    assert match_query("！？。，") == ""
    assert match_query("   \n\t") == ""


def test_match_query_operators_are_quoted() -> None:  # 18
    q = match_query("x*b NEAR c")
    assert q == '"x" OR "b" OR "near" OR "c"'
    assert "OR" in q


def test_match_query_dedupes_but_index_keeps() -> None:  # 19
    assert match_query("香菜") == '"香菜"'
    assert index_tokens("香菜") == "香菜 香菜"


def test_stop_only_query_still_has_bigrams() -> None:
    assert match_query("的了和") == '"的了" OR "了和"'


def test_query_terms_and_expression() -> None:
    text = "我上次说的那个香菜是什么"
    terms = query_terms(text)
    assert len(terms) == len(set(terms))
    assert match_query(text) == match_expression(terms)
    assert match_expression([]) == ""
    assert match_expression(['a"b', "c", "c", ""]) == '"a""b" OR "c"'


def _fts() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(tokens, content='', tokenize='unicode61')")
    return db


FACTS = [
    "玩家不喜欢吃香菜",
    "月璃今天穿了一条新的连衣裙",
    "玩家习惯在深夜写代码",
    "玩家养了一只猫",
    "玩家最近在学Rust",
    "玩家的显示器是144Hz的",
]


@pytest.fixture(scope="module")
def fact_index() -> sqlite3.Connection:
    db = _fts()
    for i, text in enumerate(FACTS, start=1):
        db.execute("INSERT INTO f(rowid, tokens) VALUES (?, ?)", (i, index_tokens(text)))
    return db


def _search(db: sqlite3.Connection, text: str) -> list[str]:
    q = match_query(text)
    if not q:
        return []
    rows = db.execute("SELECT rowid FROM f WHERE f MATCH ? ORDER BY bm25(f)", (q,)).fetchall()
    return [FACTS[r[0] - 1] for r in rows]


def test_fts_recall(fact_index: sqlite3.Connection) -> None:  # 20
    assert _search(fact_index, "香菜")[0] == "玩家不喜欢吃香菜"
    assert _search(fact_index, "月璃")[0] == "月璃今天穿了一条新的连衣裙"
    assert _search(fact_index, "连衣裙")[0] == "月璃今天穿了一条新的连衣裙"
    assert _search(fact_index, "深夜写代码")[0] == "玩家习惯在深夜写代码"
    assert _search(fact_index, "猫")[0] == "玩家养了一只猫"
    assert _search(fact_index, "Rust")[0] == "玩家最近在学Rust"
    assert _search(fact_index, "我上次说的那个香菜是什么")[0] == "玩家不喜欢吃香菜"
    assert _search(fact_index, "量子力学薛定谔") == []
    assert _search(fact_index, "！？") == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_match_query_always_valid_fts5(text: str) -> None:  # property (1)
    db = _FTS_DB
    q = match_query(text)
    if q:
        db.execute("SELECT rowid FROM f WHERE f MATCH ?", (q,)).fetchall()
    db.execute("INSERT INTO f(rowid, tokens) VALUES (NULL, ?)", (index_tokens(text),))


_FTS_DB = _fts()
_FTS_DB.execute("INSERT INTO f(rowid, tokens) VALUES (1, 'a b near 香菜')")


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list('"*()-:^+ ANDORNEARandnot,.{}[]_%#&香菜的了a1 \t\n\x00\u3000')), max_size=30)
)
def test_match_query_valid_fts5_on_syntax_heavy_text(text: str) -> None:
    q = match_query(text)
    if q:
        _FTS_DB.execute("SELECT rowid FROM f WHERE f MATCH ?", (q,)).fetchall()
