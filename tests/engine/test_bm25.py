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
