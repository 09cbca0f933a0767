"""Resident BM25: FTS5's ranking of a whole table without FTS5's per-row cost.

A query over a whole lexical table (knowledge search, facts of every person,
cues of every stream) makes FTS5 compute ``bm25()`` for every row that matches
any term — most of the table for a natural question. This module keeps, per
process, the postings of such a table in numpy arrays and computes the very
same score FTS5 would (``bm25`` with k1 = 1.2, b = 0.75, FTS5's IDF
``log((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, document length over all
columns) for every matching row at once, so the ranking agrees with unpruned
FTS5 while costing about as much as the rarest-term FTS5 query.

Freshness, without scanning: the three tables are append-only apart from
knowledge batch deletion. Inserted rows are read from the change log
(:mod:`memory.changes`: database triggers log every insert; on PostgreSQL with the
inserting transaction's id, so a row committed late with a smaller id is not
missed) and appended on the next query (a cheap tail, merged in batches); triggers
bump ``meta['lexical_revision:<table>']`` on any delete or token change, and a
changed revision rebuilds the table's index. The index only answers queries
made outside a transaction (autocommit reads see committed rows only, so a
rolled-back insert can never linger in it); inside one, callers fall back to
FTS5. Terms that FTS5 would turn into multi-token phrases (``3.14``) fall back
as well.

Tokens come from the rows' stored ``index_tokens`` strings (``tokens_v2`` /
``tokens``), split the way FTS5's ``unicode61`` tokenizer splits them.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
from django.conf import settings
from django.db import connection

from memory.changes import ChangeFeed
from memory.engine.bm25 import IDF_FLOOR, K1, B, fts_tokens

__all__ = ["B", "IDF_FLOOR", "K1", "SOURCES", "ResidentBM25", "Source", "fts_tokens", "reset_all", "resident"]

TAIL_MERGE_ROWS = 512     # appended rows kept aside before they are merged into the arrays



@dataclass(frozen=True)
class Source:
    """Where a lexical table's rows and tokens live."""

    fts: str            # the FTS5 table it mirrors
    table: str          # the rows' table (rowid = its id)
    tokens: str         # column holding the indexed tokens
    extra_tokens: int   # tokens of unweighted scope columns (``person`` / ``stream``): 1 or 0

    @property
    def revision_key(self) -> str:
        return f"lexical_revision:{self.table}"


SOURCES = {
    "facts_fts": Source("facts_fts", "facts", "tokens_v2", 1),
    "cues_fts": Source("cues_fts", "episode_cues", "tokens", 1),
    "knowledge_fts": Source("knowledge_fts", "knowledge", "tokens_v2", 0),
}


class ResidentBM25:
    """The postings of one FTS table, in memory; see the module docstring."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._lock = threading.Lock()
        self.rebuilds = 0
        self._clear()

    def _clear(self) -> None:
        self._revision: str | None = None
        self._feed = ChangeFeed(self.source.table, self.source.revision_key)
        self._loaded: set[int] = set()   # rowids in the index (a logged insert may be read twice)
        self._vocab: dict[str, int] = {}
        self._ids = np.zeros(0, dtype=np.int64)       # rowid per document position (ascending)
        self._lengths = np.zeros(0, dtype=np.float64)  # tokens per document (all columns)
        self._indptr = np.zeros(1, dtype=np.int64)    # term id -> slice of _docs / _tfs
        self._docs = np.zeros(0, dtype=np.int32)
        self._tfs = np.zeros(0, dtype=np.float32)     # term frequencies (exact integers)
        self._tail: dict[str, list[tuple[int, int]]] = {}   # term -> [(position, tf)] of appended rows
        self._tail_ids: list[int] = []
        self._tail_lengths: list[int] = []
        self._total_tokens = 0.0
        self._norm_cache: tuple[tuple[int, float], np.ndarray] | None = None

    # --- loading --------------------------------------------------------------------------------

    def revision(self) -> str:
        """The table's committed lexical revision (moves on a delete or a token change)."""
        return ChangeFeed(self.source.table, self.source.revision_key).poll().revision

    def _rows(self, ids: Sequence[int] | None = None) -> list[tuple[int, str]]:
        src = self.source
        with connection.cursor() as cur:
            if ids is None:
                cur.execute(f"SELECT id, {src.tokens} FROM {src.table} ORDER BY id")
            else:
                cur.execute(
                    f"SELECT id, {src.tokens} FROM {src.table} WHERE id IN ({','.join(['%s'] * len(ids))}) ORDER BY id",
                    list(ids),
                )
            return cur.fetchall()

    def refresh(self) -> None:
        """Bring the arrays up to the committed rows (see the module docstring)."""
        with self._lock:
            poll = self._feed.poll()
            if poll.revision != self._revision or poll.rebuild:
                self._clear()
                self._feed.start()  # the log's position before the rows are read: nothing falls in between
                rows = self._rows()
                self._load(rows)
                self._loaded = {int(r[0]) for r in rows}
                self._revision = poll.revision
                self.rebuilds += 1
                return
            fresh = sorted({i for i in poll.row_ids if i not in self._loaded})
            if fresh:
                rows = self._rows(fresh)
                self._append(rows)
                self._loaded.update(int(r[0]) for r in rows)

    def reset(self) -> None:
        with self._lock:
            self._clear()

    def _load(self, rows: Sequence[tuple[int, str]]) -> None:
        docs = [fts_tokens(tokens or "") for _, tokens in rows]
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        lengths = np.fromiter((len(d) for d in docs), dtype=np.float64, count=len(docs)) + self.source.extra_tokens
        vocab = self._vocab
        term_ids = np.fromiter(
            (vocab.setdefault(t, len(vocab)) for t in chain.from_iterable(docs)), dtype=np.int64,
        )
        positions = np.repeat(np.arange(len(docs), dtype=np.int64), [len(d) for d in docs])
        self._set_arrays(ids, lengths, term_ids, positions, np.ones(len(term_ids)))

    def _set_arrays(self, ids, lengths, term_ids, positions, counts) -> None:
        n = max(1, len(ids))
        keys, inverse = np.unique(term_ids * n + positions, return_inverse=True)
        tfs = np.bincount(inverse, weights=counts) if len(keys) else np.zeros(0)
        terms = keys // n
        self._ids, self._lengths = ids, lengths
        self._docs = (keys % n).astype(np.int32)
        self._tfs = tfs.astype(np.float32)
        self._indptr = np.searchsorted(terms, np.arange(len(self._vocab) + 1)).astype(np.int64)
        self._total_tokens = float(lengths.sum())
        self._norm_cache = None

    def _append(self, rows: Sequence[tuple[int, str]]) -> None:
        base = len(self._ids) + len(self._tail_ids)
        for offset, (rowid, tokens) in enumerate(rows):
            toks = fts_tokens(tokens or "")
            counts: dict[str, int] = {}
            for t in toks:
                counts[t] = counts.get(t, 0) + 1
            for t, c in counts.items():
                self._tail.setdefault(t, []).append((base + offset, c))
            self._tail_ids.append(int(rowid))
            self._tail_lengths.append(len(toks) + self.source.extra_tokens)
            self._total_tokens += len(toks) + self.source.extra_tokens
        self._norm_cache = None
        if len(self._tail_ids) >= TAIL_MERGE_ROWS:
            self._merge_tail()

    def _merge_tail(self) -> None:
        vocab = self._vocab
        term_ids = [np.repeat(np.arange(len(self._indptr) - 1, dtype=np.int64), np.diff(self._indptr))]
        positions = [self._docs.astype(np.int64)]
        counts = [self._tfs]
        for t, postings in self._tail.items():
            tid = vocab.setdefault(t, len(vocab))
            term_ids.append(np.full(len(postings), tid, dtype=np.int64))
            positions.append(np.fromiter((p for p, _ in postings), dtype=np.int64, count=len(postings)))
            counts.append(np.fromiter((c for _, c in postings), dtype=np.float64, count=len(postings)))
        ids = np.concatenate([self._ids, np.asarray(self._tail_ids, dtype=np.int64)])
        lengths = np.concatenate([self._lengths, np.asarray(self._tail_lengths, dtype=np.float64)])
        self._tail, self._tail_ids, self._tail_lengths = {}, [], []
        self._set_arrays(ids, lengths, np.concatenate(term_ids), np.concatenate(positions), np.concatenate(counts))

    # --- ranking --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ids) + len(self._tail_ids)

    def _norms(self) -> np.ndarray:
        """``k1 · (1 − b + b · D / avgdl)`` per document, for the current statistics."""
        n = len(self)
        key = (n, self._total_tokens)
        if self._norm_cache is None or self._norm_cache[0] != key:
            lengths = np.concatenate([self._lengths, np.asarray(self._tail_lengths, dtype=np.float64)])
            avgdl = self._total_tokens / n if n else 1.0
            self._norm_cache = (key, K1 * ((1.0 - B) + B * lengths / avgdl))  # FTS5's order of operations
        return self._norm_cache[1]

    def _postings(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        tid = self._vocab.get(token)
        if tid is None or tid + 1 >= len(self._indptr):
            docs, tfs = np.zeros(0, dtype=np.int64), np.zeros(0)
        else:
            lo, hi = self._indptr[tid], self._indptr[tid + 1]
            docs, tfs = self._docs[lo:hi].astype(np.int64), self._tfs[lo:hi].astype(np.float64)
        tail = self._tail.get(token)
        if tail:
            docs = np.concatenate([docs, np.fromiter((p for p, _ in tail), dtype=np.int64, count=len(tail))])
            tfs = np.concatenate([tfs, np.fromiter((c for _, c in tail), dtype=np.float64, count=len(tail))])
        return docs, tfs

    def scores(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """``(matched rowids, their FTS5 bm25)`` (negative, lower is better) for OR-ed ``terms``.

        ``None`` when a term is a multi-token phrase for FTS5 (the caller asks FTS5).
        Rowids come in ascending order. Safe against a concurrent refresh (threaded servers).
        """
        with self._lock:
            scored = self._scores(terms)
            if scored is None:
                return None
            positions, bm25 = scored
            return self._rowids(positions), bm25

    def _scores(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        tokens = []
        for term in terms:
            toks = fts_tokens(term)
            if len(toks) > 1:
                return None
            if toks:
                tokens.append(toks[0])  # one FTS5 phrase per term, duplicates included
        n = len(self)
        total = np.zeros(n)
        hit = np.zeros(n, dtype=bool)
        if not tokens or not n:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        norms = self._norms()
        for token in tokens:
            docs, tfs = self._postings(token)
            if not len(docs):
                continue
            idf = math.log((n - len(docs) + 0.5) / (len(docs) + 0.5))
            if idf <= 0.0:
                idf = IDF_FLOOR
            total[docs] += idf * ((tfs * (K1 + 1.0)) / (tfs + norms[docs]))  # FTS5's order of operations
            hit[docs] = True
        positions = np.flatnonzero(hit)
        return positions, -total[positions]

    def _rowids(self, positions: np.ndarray) -> np.ndarray:
        if not self._tail_ids:
            return self._ids[positions]
        return np.concatenate([self._ids, np.asarray(self._tail_ids, dtype=np.int64)])[positions]

    def top(self, terms: Sequence[str], limit: int, *, offset: int = 0) -> list[tuple[int, float]] | None:
        """``(rowid, bm25)`` best first (ties: lower rowid first), rows ``offset … offset+limit``."""
        scored = self.scores(terms)
        if scored is None:
            return None
        ids, bm25 = scored
        end = offset + limit
        if end < len(ids):
            cut = np.partition(bm25, end - 1)[end - 1]
            keep = bm25 <= cut  # every row tied with the last one kept: ties go to the lower rowid
            ids, bm25 = ids[keep], bm25[keep]
        order = np.lexsort((ids, bm25))[offset:end]
        return [(int(i), float(b)) for i, b in zip(ids[order], bm25[order], strict=True)]

    def bm25_for(self, terms: Sequence[str], rowids: Sequence[int]) -> dict[int, float] | None:
        """bm25 of specific rows (rows matching no term are absent)."""
        scored = self.scores(terms)
        if scored is None:
            return None
        ids, bm25 = scored
        keep = np.isin(ids, np.fromiter((int(r) for r in rowids), dtype=np.int64))
        return {int(i): float(b) for i, b in zip(ids[keep], bm25[keep], strict=True)}


_indexes: dict[str, ResidentBM25] = {}
_indexes_lock = threading.Lock()


def resident(fts_table: str) -> ResidentBM25 | None:
    """The fresh resident index of ``fts_table``, or ``None`` when FTS5 must answer.

    ``None`` inside a transaction (see the module docstring) and when
    ``settings.LEXICAL_RESIDENT_INDEX`` is off.
    """
    if not getattr(settings, "LEXICAL_RESIDENT_INDEX", True) or connection.in_atomic_block:
        return None
    index = _indexes.get(fts_table)
    if index is None:
        with _indexes_lock:
            index = _indexes.setdefault(fts_table, ResidentBM25(SOURCES[fts_table]))
    index.refresh()
    return index


def reset_all() -> None:
    """Forget every resident index (tests; a restored database file)."""
    for index in list(_indexes.values()):
        index.reset()
