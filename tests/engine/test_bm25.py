"""FTS5's IDF (memory.engine.bm25.fts_idf), checked against SQLite's own bm25()."""
from __future__ import annotations

import math
import sqlite3

import pytest

from memory.engine.bm25 import IDF_FLOOR, K1, B, fts_idf


def test_idf_is_fts5s_with_its_floor() -> None:
    assert fts_idf(10, 2) == math.log(8.5 / 2.5)
    assert fts_idf(2, 1) == IDF_FLOOR  # log(1) = 0 is not positive
    assert fts_idf(10, 6) == IDF_FLOOR  # a term in most rows


@pytest.mark.parametrize(("rows", "term_in"), [(["a b", "c", "d e f", "g"], 1), (["a", "a b", "a c", "d"], 3)])
def test_one_term_bm25_matches_sqlite(rows: list[str], term_in: int) -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5(body)")
    db.executemany("INSERT INTO f(body) VALUES (?)", [(r,) for r in rows])
    got = dict(db.execute("SELECT rowid, bm25(f) FROM f WHERE f MATCH 'a'").fetchall())
    lengths = [len(r.split()) for r in rows]
    avgdl = sum(lengths) / len(rows)
    want = {
        i + 1: -fts_idf(len(rows), term_in) * (1 * (K1 + 1.0)) / (1 + K1 * ((1.0 - B) + B * lengths[i] / avgdl))
        for i, r in enumerate(rows) if "a" in r.split()
    }
    assert got.keys() == want.keys()
    assert [got[k] for k in want] == pytest.approx(list(want.values()), rel=1e-12)


def test_scope_idf_stays_positive() -> None:
    from memory.engine.bm25 import scope_idf

    assert scope_idf(10, 2) == math.log(1.0 + 8.5 / 2.5)
    assert scope_idf(2, 2) == math.log(1.0 + 0.5 / 2.5) > 0  # a term in every fact of a small scope still weighs
    assert scope_idf(2, 1) > scope_idf(2, 2) and scope_idf(5, 0) == 0.0


def test_scope_bm25_reads_the_statistics_of_the_scope_alone() -> None:
    from memory.engine.bm25 import scope_bm25, scope_idf

    docs = {1: ["caroline", "paint", "lake"], 2: ["caroline", "run"], 3: ["melanie", "paint"], 4: ["melanie"]}
    got = scope_bm25([["caroline"], ["paint"]], docs)
    avgdl = 8 / 4

    def part(df: int, length: int) -> float:
        return scope_idf(4, df) * ((1.0 * (K1 + 1.0)) / (1.0 + K1 * ((1.0 - B) + B * length / avgdl)))

    assert got == {1: -(part(2, 3) + part(2, 3)), 2: -(part(2, 2) + 0.0), 3: -(0.0 + part(2, 2))}
    # a phrase counts its consecutive occurrences; a scope column's token lengthens every row
    assert scope_bm25([["lake", "sunrise"]], {1: ["lake", "sunrise", "lake"], 2: ["sunrise", "lake"]}, extra_tokens=1) \
        .keys() == {1}
    assert scope_bm25([["x"]], {}) == {} and scope_bm25([], docs) == {}
