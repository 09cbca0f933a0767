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
(:mod:`memory.search.changes`: database triggers log every insert; on PostgreSQL with the
inserting transaction's id, so a row committed late with a smaller id is not
missed) and appended on the next query (a cheap tail, merged in batches); triggers
bump ``meta['lexical_revision:<table>']`` on any delete or token change, and a
changed revision rebuilds the table's index (the message statistics,
:class:`ResidentMessages`, read edits and deletes from the log instead). The index only answers queries
made outside a transaction (autocommit reads see committed rows only, so a
rolled-back insert can never linger in it); inside one, callers fall back to
FTS5. Terms that FTS5 would turn into multi-token phrases (``3.14``) fall back
as well.

Tokens come from the rows' stored ``index_tokens`` strings (their
``tokens`` column), split the way FTS5's ``unicode61`` tokenizer splits them.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, compress
from operator import itemgetter

import numpy as np
from django.conf import settings
from django.db import connection, transaction

from memory import backends
from memory.engine.bm25 import FOLDABLE as _FOLDABLE
from memory.engine.bm25 import IDF_FLOOR, K1, B, fts_idf, fts_tokens, scope_idf
from memory.search import read_ahead, residency
from memory.search.changes import ChangeFeed

logger = logging.getLogger(__name__)

__all__ = ["B", "IDF_FLOOR", "K1", "SOURCES", "ResidentBM25", "Source", "fts_tokens", "reset_all", "resident"]

TAIL_MERGE_ROWS = 512     # appended rows kept aside before they are merged into the arrays
LOAD_CHUNK_ROWS = 4096    # rows tokenised at a time when a table is loaded (bounds the load's peak memory)


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
    "facts_fts": Source("facts_fts", "facts", "tokens", 1),
    "cues_fts": Source("cues_fts", "episode_cues", "tokens", 1),
    "knowledge_fts": Source("knowledge_fts", "knowledge", "tokens", 0),
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
        # rowids in the index (a logged insert may be read twice): sorted, and those appended since
        # (a set of the whole table's ints cost ~75 bytes a row, 13 MB for the cues at 3×)
        self._loaded = np.zeros(0, dtype=np.int64)
        self._loaded_tail: set[int] = set()
        self._vocab: dict[str, int] = {}
        self._ids = np.zeros(0, dtype=np.int64)       # rowid per document position (ascending)
        self._lengths = np.zeros(0, dtype=np.float64)  # tokens per document (all columns)
        self._indptr = np.zeros(1, dtype=np.int64)    # term id -> slice of _keys / _tfs
        self._keys = np.zeros(0, dtype=np.int64)      # per posting: term id · stride + document position, ascending
        self._stride = 1
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
                    f"SELECT id, {src.tokens} FROM {src.table} WHERE id IN ({backends.in_placeholders(ids)}) ORDER BY id",
                    list(ids),
                )
            return cur.fetchall()

    def refresh(self, reading: tuple | None = None, read_at: tuple | None = None) -> None:
        """Bring the arrays up to the committed rows (see the module docstring); ``reading`` — the
        change log read elsewhere for the feed's position ``read_at`` (:func:`memory.search.read_ahead.one_state`)."""
        with self._lock:
            poll = self._feed.poll(reading, read_at)
            if poll.revision != self._revision or poll.rebuild:
                self._clear()
                self._feed.start()  # the log's position before the rows are read: nothing falls in between
                self._load_chunks(self._row_chunks())
                self._loaded = np.sort(self._ids)
                self._revision = poll.revision
                self.rebuilds += 1
                residency.settle()
                return
            fresh = self._not_loaded(poll.row_ids)
            if fresh:
                rows = self._rows(fresh)
                self._append(rows)
                self._loaded_tail.update(int(r[0]) for r in rows)
                if len(self._loaded_tail) >= TAIL_MERGE_ROWS:
                    self._loaded = np.union1d(self._loaded, np.fromiter(self._loaded_tail, dtype=np.int64))
                    self._loaded_tail = set()

    def _not_loaded(self, row_ids: Iterable[int]) -> list[int]:
        """The distinct ``row_ids`` not in the index, ascending."""
        ids = np.unique(np.fromiter((int(i) for i in row_ids), dtype=np.int64))
        if not len(ids):
            return []
        at = np.minimum(np.searchsorted(self._loaded, ids), max(len(self._loaded) - 1, 0))
        known = self._loaded[at] == ids if len(self._loaded) else np.zeros(len(ids), dtype=bool)
        return [i for i in ids[~known].tolist() if i not in self._loaded_tail]

    def reset(self) -> None:
        with self._lock:
            self._clear()

    @property
    def loaded(self) -> bool:
        """Whether the arrays hold the table (a first load, or a rebuild, has finished)."""
        return self._revision is not None

    def _row_chunks(self) -> Iterator[list[tuple[int, str]]]:
        """Every row ``(id, tokens)`` in id order, :data:`LOAD_CHUNK_ROWS` at a time (one statement)."""
        src = self.source
        with connection.cursor() as cur:
            cur.execute(f"SELECT id, {src.tokens} FROM {src.table} ORDER BY id")
            while rows := cur.fetchmany(LOAD_CHUNK_ROWS):
                yield rows

    def _load(self, rows: Sequence[tuple[int, str]]) -> None:
        self._load_chunks([rows[k:k + LOAD_CHUNK_ROWS] for k in range(0, len(rows), LOAD_CHUNK_ROWS)])

    def _load_chunks(self, chunks: Iterable[Sequence[tuple[int, str]]]) -> None:
        """The arrays of every row, tokenised a chunk at a time: only one chunk's token strings are alive
        at once (the whole table's, as Python objects, were ~14× the arrays, a peak the process kept)."""
        vocab = self._vocab
        ids, lengths, term_ids, positions = [], [], [], []
        base = 0
        for rows in chunks:
            docs = [fts_tokens(tokens or "") for _, tokens in rows]
            sizes = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
            ids.append(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)))
            lengths.append(sizes.astype(np.float64) + self.source.extra_tokens)
            term_ids.append(np.fromiter((vocab.setdefault(t, len(vocab)) for t in chain.from_iterable(docs)),
                                        dtype=np.int64, count=int(sizes.sum())))
            positions.append(np.repeat(np.arange(base, base + len(docs), dtype=np.int64), sizes))
            base += len(docs)
        if not ids:
            ids = lengths = term_ids = positions = [np.zeros(0, dtype=np.int64)]
        terms = np.concatenate(term_ids)
        self._set_arrays(np.concatenate(ids), np.concatenate(lengths).astype(np.float64), terms,
                         np.concatenate(positions), np.ones(len(terms)))

    def _set_arrays(self, ids, lengths, term_ids, positions, counts) -> None:
        n = max(1, len(ids))
        keys, inverse = np.unique(term_ids * n + positions, return_inverse=True)
        tfs = np.bincount(inverse, weights=counts) if len(keys) else np.zeros(0)
        terms = keys // n
        self._ids, self._lengths = ids, lengths
        self._keys, self._stride = keys.astype(np.int64), n
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
        term_ids = [self._keys // self._stride]
        positions = [self._keys % self._stride]
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
            docs, tfs = self._keys[lo:hi] - tid * self._stride, self._tfs[lo:hi].astype(np.float64)
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

    @staticmethod
    def _tokens(terms: Sequence[str]) -> list[str] | None:
        tokens = []
        for term in terms:
            toks = fts_tokens(term)
            if len(toks) > 1:
                return None
            if toks:
                tokens.append(toks[0])  # one FTS5 phrase per term, duplicates included
        return tokens

    def _scores(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        tokens = self._tokens(terms)
        if tokens is None:
            return None
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
            total[docs] += fts_idf(n, len(docs)) * ((tfs * (K1 + 1.0)) / (tfs + norms[docs]))  # FTS5's order of operations
            hit[docs] = True
        positions = np.flatnonzero(hit)
        return positions, -total[positions]

    def scores_for(self, terms: Sequence[str], rowids: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rowids, bm25)`` of those of ``rowids`` that match a term — the numbers :meth:`scores`
        gives them (same statistics of the whole table, same operations), at the cost of the
        given rows only: a scoped query (one person's facts, one stream's cues) ranks a few
        dozen rows, while FTS5 reads every query term's whole doclist for its IDF.

        ``None`` when a term is a multi-token phrase for FTS5, or when a rowid is not in the
        index (committed after the last refresh): the caller asks FTS5. Rowids come in
        ascending order.
        """
        return self._rows_scored(terms, rowids, self._table_weights)

    def scope_scores(self, terms: Sequence[str], rowids: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rowids, bm25)`` of those of ``rowids`` that match a term, with the statistics of ``rowids``
        themselves — :func:`memory.engine.bm25.scope_bm25`'s numbers (the same operations on each
        number), at the cost of the given rows only. ``None`` as :meth:`scores_for`."""
        return self._rows_scored(terms, rowids, self._scope_weights)

    def _table_weights(self, found: np.ndarray, df: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """IDF of each term and length norms of the rows, with the statistics of the whole table."""
        n = len(self)
        return np.array([fts_idf(n, k) if k else 0.0 for k in df]), self._norms()[at]

    def _scope_weights(self, found: np.ndarray, df: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """IDF of each term and length norms of the rows, with the statistics of the rows themselves."""
        n = len(at)
        lengths = self._all_lengths()[at]
        avgdl = float(lengths.sum()) / n
        return np.array([scope_idf(n, int(k)) for k in found.sum(axis=1)]), K1 * ((1.0 - B) + B * lengths / avgdl)

    def _rows_scored(self, terms: Sequence[str], rowids: Sequence[int], weights) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`scores_for` and :meth:`scope_scores`, ``weights`` giving the terms' IDF and the rows' norms."""
        with self._lock:
            tokens = self._tokens(terms)
            if tokens is None:
                return None
            wanted = np.unique(np.fromiter((int(r) for r in rowids), dtype=np.int64))
            at = self._positions(wanted)
            if at is None:
                return None
            if not tokens or not len(at):
                return np.zeros(0, dtype=np.int64), np.zeros(0)
            found, tf, df = self._lookup(tokens, at)
            idf, norms = weights(found, df, at)
            # as in _scores (the same operations on each number), summed term by term in query order:
            # a reduction over axis 0 adds row after row, and a term missing from a row adds 0.0
            total = np.add.reduce(idf[:, None] * ((tf * (K1 + 1.0)) / (tf + norms)), axis=0)
            hit = found.any(axis=0)
            return wanted[hit], -total[hit]

    def scope_frequencies(self, terms: Sequence[str], rowids: Sequence[int]) -> dict[str, int] | None:
        """Rows among ``rowids`` holding each single-token term (others are absent); ``None`` when a rowid
        is not in the index."""
        with self._lock:
            single = [t for t in dict.fromkeys(terms) if fts_tokens(t) == [t]]
            wanted = np.unique(np.fromiter((int(r) for r in rowids), dtype=np.int64))
            at = self._positions(wanted)
            if at is None:
                return None
            if not single or not len(at):
                return {}
            found, _, _ = self._lookup(single, at)
            return {t: int(k) for t, k in zip(single, found.sum(axis=1).tolist(), strict=True) if k}

    def _all_lengths(self) -> np.ndarray:
        """Tokens per document position (all columns), appended rows included."""
        if not self._tail_lengths:
            return self._lengths
        return np.concatenate([self._lengths, np.asarray(self._tail_lengths, dtype=np.float64)])

    def _lookup(self, tokens: Sequence[str], at: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """``(found, tf, df)``: whether each token (row) occurs in each document position ``at``
        (column), its frequency there (0 where not) and each token's document frequency — every
        pair of the main arrays in one binary search of ``_keys``, the tail token by token."""
        vocab, indptr, stride = self._vocab, self._indptr, self._stride
        tids = np.fromiter(
            (t if t is not None and t + 1 < len(indptr) else -1 for t in map(vocab.get, tokens)),
            dtype=np.int64, count=len(tokens),
        )
        known = tids >= 0
        df = np.zeros(len(tokens), dtype=np.int64)
        df[known] = indptr[tids[known] + 1] - indptr[tids[known]]
        in_main = at < len(self._ids)
        wanted = np.where(known[:, None] & in_main[None, :], tids[:, None] * stride + at[None, :], -1)
        tf = np.zeros(wanted.shape)
        if len(self._keys):
            k = np.minimum(np.searchsorted(self._keys, wanted), len(self._keys) - 1)
            found = self._keys[k] == wanted
            tf[found] = self._tfs[k[found]]
        else:
            found = np.zeros(wanted.shape, dtype=bool)
        df = df.tolist()
        for row, token in enumerate(tokens):
            tail = self._tail.get(token)
            if not tail:  # appended rows, not merged yet
                continue
            df[row] += len(tail)
            tp = np.fromiter((p for p, _ in tail), dtype=np.int64, count=len(tail))
            j = np.searchsorted(at, tp)
            ok = j < len(at)
            ok[ok] = at[j[ok]] == tp[ok]
            found[row, j[ok]] = True
            tf[row, j[ok]] = np.fromiter((c for _, c in tail), dtype=np.float64, count=len(tail))[ok]
        return found, tf, df

    def _positions(self, rowids: np.ndarray) -> np.ndarray | None:
        """Document positions of ascending unique ``rowids``; ``None`` if one is not loaded."""
        main = np.searchsorted(self._ids, rowids)
        inside = main < len(self._ids)
        ok = inside.copy()
        ok[inside] = self._ids[main[inside]] == rowids[inside]
        if ok.all():
            return main
        tail_ids = np.asarray(self._tail_ids, dtype=np.int64)
        rest = np.searchsorted(tail_ids, rowids[~ok])
        if (rest >= len(tail_ids)).any() or not np.array_equal(tail_ids[rest], rowids[~ok]):
            return None
        main[~ok] = len(self._ids) + rest
        return main

    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """Rows holding each term, for the terms the index knows (as the ``*_vocab`` table gives them)."""
        with self._lock:
            out = {}
            for term in dict.fromkeys(terms):
                df = len(self._postings(term)[0]) if term in self._vocab or term in self._tail else 0
                if df:
                    out[term] = df
            return out

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
        """bm25 of specific rows (rows matching no term are absent): :meth:`scores_for`'s numbers, at the
        cost of those rows; when one of them is not loaded yet, the whole table's scores of the others."""
        scored = self.scores_for(terms, rowids)
        if scored is None:
            scored = self.scores(terms)
            if scored is None:
                return None
            ids, bm25 = scored
            keep = np.isin(ids, np.fromiter((int(r) for r in rowids), dtype=np.int64))
            scored = ids[keep], bm25[keep]
        ids, bm25 = scored
        return {int(i): float(b) for i, b in zip(ids, bm25, strict=True)}


_indexes: dict[str, ResidentBM25] = {}
_indexes_lock = threading.Lock()


def _changes_ahead(tables: Sequence[str]) -> tuple[list[read_ahead.Statement], Callable[[list], None]]:
    """The change-log polls of ``tables``' resident indexes as one statement a block sends with its
    reads (:func:`memory.search.read_ahead.one_state`, PostgreSQL), and how their rows refresh the indexes."""
    if not resident_enabled():
        return [], lambda results: None
    # an index the process's warm-up is still building is not polled: the block's readers that can
    # take the exact statements do (``resident(…, wait=False)``), the others wait for the build
    indexes = [index for index in (_index(table) for table in dict.fromkeys(tables)) if not _building(index)]
    if not indexes:
        return [], lambda results: None
    positions = [index._feed.position for index in indexes]
    statement = (*backends.postgresql.changes_statement(
        [(index._feed.source, index._feed.revision_key, horizon) for index, (horizon, _) in zip(indexes, positions, strict=True)]
    ), False)

    def apply(results: list) -> None:
        readings = backends.postgresql.parse_changes(results[0][0])
        for index, reading, position in zip(indexes, readings, positions, strict=True):
            index.refresh(reading, position)  # a feed another thread moved meanwhile reads again itself
            read_ahead.once(("refreshed", index.source.fts), lambda: True)

    return [statement], apply


read_ahead.register_tables_ahead(_changes_ahead)


def _refresh_once(name: str, refresh: Callable[[], None]) -> None:
    """``refresh()`` once per read-ahead block (every time outside one)."""
    read_ahead.once(("refreshed", name), refresh)


def resident_enabled() -> bool:
    """Whether resident indexes answer: ``settings.LEXICAL_RESIDENT_INDEX`` is on and no transaction is open
    (inside one, a read must see the transaction's own writes: FTS5 answers; see the module docstring)."""
    return settings.LEXICAL_RESIDENT_INDEX and not connection.in_atomic_block


def resident(fts_table: str, *, wait: bool = True) -> ResidentBM25 | None:
    """The fresh resident index of ``fts_table``, or ``None`` when FTS5 must answer.

    ``None`` inside a transaction (see the module docstring) and when
    ``settings.LEXICAL_RESIDENT_INDEX`` is off. ``wait=False``: also ``None`` while the process's
    warm-up (:func:`warm_up_in_background`) has not built it yet — for a caller whose statements give
    the same numbers (a scoped query), which then need not wait for a whole table to load.
    """
    if not resident_enabled():
        return None
    index = _index(fts_table)
    if not wait and _building(index):
        return None
    _refresh_once(fts_table, index.refresh)
    return index


def _index(fts_table: str) -> ResidentBM25:
    index = _indexes.get(fts_table)
    if index is None:
        with _indexes_lock:
            index = _indexes.setdefault(fts_table, ResidentBM25(SOURCES[fts_table]))
    return index


def reset_all() -> None:
    """Forget every resident index (tests; a restored database file)."""
    for index in list(_indexes.values()):
        index.reset()
    _messages.reset()
    _messages_polled[0] = 0.0


# --- messages: one stream at a time, with the whole table's statistics ---------------------------

MESSAGE_REVISION_KEY = "lexical_revision:messages"
STREAMS_CACHED = 256          # streams whose postings stay resident (least recently searched dropped first)
STREAM_TAIL_MERGE_ROWS = 64   # a stream's appended rows kept aside before its arrays are rebuilt
_STREAM_TOKEN = re.compile(r"s\d+")  # the ``stream`` column's token shape (see below)


class _StreamPostings:
    """One stream's indexed messages: rowids, lengths (all columns) and the places of their terms.

    The messages' terms follow one another in one string (`` t t … t ``, a space before and
    after every term; ``_starts``: where each message begins). Every term is keyed by a
    32-bit hash of its characters, computed for all of them at once with numpy (a
    polynomial hash from prefix sums over the code points), and the terms' places are
    sorted by key: the postings of a query term are the places under its key, each checked
    against the string (a hash is only a shortcut, the characters decide) and mapped to its
    message by a binary search over the starts. Building it is a few numpy passes and one
    sort, with no Python object per term (~0.37 MB for a 1,000-message stream of chat: 32-bit keys and
    places, the text as UTF-16).

    Stored tokens are the terms themselves (``index_tokens``; migration 0022) and are taken as
    they are when the text passes a few C-level checks (lower case, letters and digits,
    nothing a diacritic could sit on, single spaces); a stored string that does not (none
    should) is replaced by unicode61's terms of it. Rows appended later wait in a short tail
    (term counts per row) until :data:`STREAM_TAIL_MERGE_ROWS` of them are merged.
    """

    def __init__(self, rows: Sequence[tuple[int, str]]) -> None:
        self._build([int(r) for r in map(itemgetter(0), rows)], [t or "" for t in map(itemgetter(1), rows)])

    def _build(self, ids: list[int], texts: list[str]) -> None:
        joined = " ".join(texts)
        text = f" {joined} "
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        if not (all(texts) and "  " not in joined and joined[:1] != " " and joined[-1:] != " "
                and (_simple_points(points) or _plain_terms(joined))):
            texts = [t.strip(" ") for t in " ".join(_split_all(texts)).split(_DOC_BREAK)]  # unicode61's terms
            joined = " ".join(texts)
            text = f" {joined} "
            points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        narrow = not len(points) or int(points.max()) < 0xD800  # no surrogate: UTF-16 is one unit a character
        self._points = points.astype(np.uint16) if narrow else points.copy()
        self.ids = np.asarray(ids, dtype=np.int64)
        sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        self._starts = 1 + np.concatenate([[0], np.cumsum(sizes + 1)[:-1]]) if len(texts) else sizes
        spaces = np.flatnonzero(points == 32)
        begin, end = spaces[:-1] + 1, spaces[1:]
        if len(begin) and not (end > begin).all():  # an empty message (re-tokenised to nothing)
            begin, end = begin[end > begin], end[end > begin]
        first = np.searchsorted(begin, self._starts)  # each message's first term
        self.lengths = (np.diff(np.append(first, len(begin))) + 1).astype(np.float64)  # + the stream column's token
        keys = _keys(points, begin, end)
        order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")  # two 16-bit radix passes
        order = order[np.argsort((keys[order] >> 16).astype(np.uint16), kind="stable")]
        self._keys = keys[order]
        self._places = begin[order].astype(np.uint32 if len(text) < 2**32 else np.int64)
        self.max_id = int(self.ids.max()) if len(self.ids) else 0
        self._tail: list[tuple[int, str, dict[str, int]]] = []  # (rowid, terms, term counts) appended since

    def extend(self, rows: Sequence[tuple[int, str]]) -> None:
        """Append rows committed since; past :data:`STREAM_TAIL_MERGE_ROWS` of them the tail is merged."""
        for rowid, tokens in rows:
            toks = fts_tokens(tokens or "")
            counts: dict[str, int] = {}
            for t in toks:
                counts[t] = counts.get(t, 0) + 1
            self._tail.append((int(rowid), " ".join(toks), counts))
            self.max_id = max(self.max_id, int(rowid))
        if len(self._tail) >= STREAM_TAIL_MERGE_ROWS:
            text = self._points.tobytes().decode("utf-16-le" if self._points.dtype == np.uint16 else "utf-32-le")
            ends = [*(self._starts[1:] - 1).tolist(), len(text) - 1][: len(self._starts)]
            texts = [text[a:b] for a, b in zip(self._starts.tolist(), ends, strict=True)]
            self._build([*self.ids.tolist(), *(r for r, _t, _c in self._tail)], [*texts, *(t for _r, t, _c in self._tail)])

    def postings(self, tokens: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``token -> (document positions ascending, term frequencies)`` of those of ``tokens`` this
        stream holds (tail included), looked up together."""
        wanted = list(dict.fromkeys(tokens))
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if wanted and len(self._keys):
            keys = np.fromiter(map(_key, wanted), dtype=np.uint32, count=len(wanted))
            lo, hi = self._keys.searchsorted(keys, "left"), self._keys.searchsorted(keys, "right")
            counts = hi - lo
            total = int(counts.sum())
            if total:
                which = np.repeat(np.arange(len(wanted)), counts)
                places = self._places[np.arange(total) + np.repeat(lo - (np.cumsum(counts) - counts), counts)]
                ok = self._same(wanted, which, places.astype(np.int64))
                which, places = which[ok], places[ok]
                n = len(self.ids)
                pairs = which * n + (np.searchsorted(self._starts, places, side="right") - 1)
                pairs.sort()
                if len(pairs):
                    first = np.flatnonzero(np.concatenate([[True], pairs[1:] != pairs[:-1]]))
                    tfs = np.diff(np.append(first, len(pairs))).astype(np.float64)
                    pairs = pairs[first]
                    bounds = np.searchsorted(pairs // n, np.arange(len(wanted) + 1)).tolist()
                    for k, token in enumerate(wanted):
                        if bounds[k + 1] > bounds[k]:
                            out[token] = (pairs[bounds[k]:bounds[k + 1]] - k * n, tfs[bounds[k]:bounds[k + 1]])
        if self._tail:
            base = len(self.ids)
            for token in wanted:
                extra = [(base + k, c[token]) for k, (_r, _t, c) in enumerate(self._tail) if token in c]
                if extra:
                    docs, tfs = out.get(token, (np.zeros(0, dtype=np.int64), np.zeros(0)))
                    out[token] = (np.concatenate([docs, np.fromiter((p for p, _ in extra), dtype=np.int64, count=len(extra))]),
                                  np.concatenate([tfs, np.fromiter((c for _, c in extra), dtype=np.float64, count=len(extra))]))
        return out

    def _same(self, wanted: list[str], which: np.ndarray, places: np.ndarray) -> np.ndarray:
        """Whether the text at each place is ``wanted[which]`` followed by a space (the key only
        narrowed the places down): the characters compared at once for terms of up to
        :data:`_GRID_CHARS` characters, place by place for longer ones."""
        points, last = self._points, len(self._points) - 1
        width = min(max(map(len, wanted)), _GRID_CHARS) + 1
        grid = np.full((len(wanted), width), -1, dtype=np.int64)  # each term's points, a space, -1: not compared
        for k, token in enumerate(wanted):
            if len(token) < width:
                grid[k, : len(token) + 1] = [*map(ord, token), 32]
        expected = grid[which]
        got = points[np.minimum(places[:, None] + np.arange(width), last)].astype(np.int64)
        ok = ((got == expected) | (expected < 0)).all(axis=1)
        for j in np.flatnonzero(np.fromiter((len(wanted[k]) >= width for k in which.tolist()), dtype=bool,
                                            count=len(which))).tolist():
            token = wanted[int(which[j])]
            at = int(places[j])
            ok[j] = np.array_equal(points[at: at + len(token) + 1], [*map(ord, token), 32])
        return ok

    def all_ids(self) -> np.ndarray:
        if not self._tail:
            return self.ids
        return np.concatenate([self.ids, np.fromiter((r for r, _t, _c in self._tail), dtype=np.int64)])

    def all_lengths(self) -> np.ndarray:
        if not self._tail:
            return self.lengths
        return np.concatenate([self.lengths, np.fromiter((sum(c.values()) + 1 for _r, _t, c in self._tail),
                                                         dtype=np.float64)])


_GRID_CHARS = 15  # terms up to this long are checked against the text together (see _StreamPostings._same)
_HASH_BASE = 0x9E3779B97F4A7C15  # odd: invertible modulo 2**64
_HASH_INVERSE = pow(_HASH_BASE, -1, 2**64)
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
_powers: list[np.ndarray] = [np.ones(1, dtype=np.uint64), np.ones(1, dtype=np.uint64)]  # base**i, inverse**i


def _power_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``base**i`` and ``inverse**i`` modulo 2**64 for ``i < n`` (grown by doubling, kept)."""
    if len(_powers[0]) < n:
        size = max(n, 2 * len(_powers[0]))
        with np.errstate(over="ignore"):
            for k, factor in enumerate((_HASH_BASE, _HASH_INVERSE)):
                steps = np.full(size, factor, dtype=np.uint64)
                steps[0] = 1
                _powers[k] = np.cumprod(steps, dtype=np.uint64)
    return _powers[0][:n], _powers[1][:n]


def _keys(points: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The 32-bit key of each term ``points[begin:end]`` (see :func:`_key`), all at once."""
    power, inverse = _power_tables(len(points) + 1)
    with np.errstate(over="ignore"):
        prefix = np.zeros(len(points) + 1, dtype=np.uint64)
        np.cumsum(points.astype(np.uint64) * power[: len(points)], dtype=np.uint64, out=prefix[1:])
        h = (prefix[end] - prefix[begin]) * inverse[begin]
        h = (h ^ (h >> np.uint64(30))) * np.uint64(_MIX[0])
        h = (h ^ (h >> np.uint64(27))) * np.uint64(_MIX[1])
        return ((h ^ (h >> np.uint64(31))) >> np.uint64(32)).astype(np.uint32)


def _key(term: str) -> int:
    """``sum(ord(c) · base**j) mod 2**64`` over the term's characters, mixed (splitmix64's
    finaliser: every bit of the sum reaches the top ones), top 32 bits."""
    h, p = 0, 1
    for c in term:
        h = (h + ord(c) * p) % 2**64
        p = (p * _HASH_BASE) % 2**64
    h = ((h ^ (h >> 30)) * _MIX[0]) % 2**64
    h = ((h ^ (h >> 27)) * _MIX[1]) % 2**64
    return (h ^ (h >> 31)) >> 32


def _simple_points(points: np.ndarray) -> bool:
    """Every character a space, ``a-z``, ``0-9`` or a CJK ideograph of the original block (letters with
    no case and nothing to fold): the text is plain without the string checks of :func:`_plain_terms`."""
    cjk = (points >= 0x4E00) & (points <= 0x9FA5)
    return bool((cjk | (points == 32) | ((points >= 97) & (points <= 122)) | ((points >= 48) & (points <= 57))).all())


def _plain_terms(joined: str) -> bool:
    """Whether ``joined.split(' ')`` is :func:`fts_tokens` of it: lower case, letters and digits
    parted by single spaces, no character unicode61 would fold."""
    return (
        bool(joined) and joined[0] != " " and joined[-1] != " " and "  " not in joined
        and joined.replace(" ", "").isalnum() and joined.lower() == joined
        and (joined.isascii() or _FOLDABLE.search(joined) is None)
    )


_DOC_BREAK = "\x00"  # never a token character, never in stored tokens


_NOT_PLAIN = re.compile("[^\\w\\s\x00]|_")  # a character that makes unicode61 split other than str.split()


def _split_all(texts: Sequence[str]) -> list[str]:
    """All of ``texts``' :func:`fts_tokens` in one list, with a :data:`_DOC_BREAK` token between
    consecutive texts, in a few C-level passes: once every character that is neither a letter,
    a digit nor whitespace (``_`` included) is made a space, ``str.split`` cuts exactly the
    runs the regex finds (stored tokens are almost always plain already, so that pass is
    usually skipped). Texts with a diacritic to drop (or a NUL) go through :func:`fts_tokens`
    one by one."""
    folded = f" {_DOC_BREAK} ".join(texts).lower()
    if (not folded.isascii() and _FOLDABLE.search(folded) is not None) or folded.count(_DOC_BREAK) != len(texts) - 1:
        flat: list[str] = []
        for k, text in enumerate(texts):
            flat.extend([_DOC_BREAK, *fts_tokens(text)] if k else fts_tokens(text))
        return flat
    if _NOT_PLAIN.search(folded) is not None:
        folded = _NOT_PLAIN.sub(" ", folded)
    return folded.split()


class ResidentMessages:
    """FTS5's bm25 of one stream's messages, without FTS5 reading whole doclists.

    A stream-scoped ``messages_fts`` query (``tokens : (…) AND stream : "s<id>"``) is
    cheap to match but not to rank: FTS5 computes each term's IDF by counting the rows of
    its doclist over *every* stream. This keeps, per process, the table's statistics —
    each term's document frequency, the row count and the token total (FTS5's own
    numbers, read from ``messages_fts_vocab`` / ``messages_fts_docsize`` in one
    statement) — and the postings of the most recently searched streams
    (:data:`STREAMS_CACHED`), and computes the very score FTS5 would for that stream's
    rows (same IDF, k1, b, document lengths over both columns, order of operations).

    Freshness without reloading: rows above the last id loaded are appended to the statistics
    (and to a cached stream's postings). Edits and deletes are logged by triggers in the
    change log (:mod:`memory.search.changes`, migration 0025) with the row's stream and tokens
    before the change — a message with tokens deleted, its stored tokens changed (from ``''``
    too: a placeholder body filled in gets its first FTS row at an old id; SQLite, whose
    appends store their tokens with such an UPDATE, logs the content edit instead) — and read in
    one statement together with each row as that snapshot shows it: the old row's share
    (document frequency of its terms and its stream token, one row, its tokens) comes out,
    the present row's goes in, and the cached postings of its stream are dropped (read again
    on its next search). A reload is left for what the log cannot tell: a pruned log, a
    moved ``meta['lexical_revision:messages']``, rows gone unlogged (a restored file). Used
    only outside a transaction. A query term shaped like the ``stream`` column's tokens
    (``s123``) is left to FTS5: the vocabulary counts it in both columns, FTS5's IDF only in
    ``tokens``.

    PostgreSQL commits in any order, so "above the last id" would miss a message committed
    late with a smaller id: there the statistics come from the postings tables (one
    repeatable-read snapshot: document frequencies, lengths, the ids counted) and every
    change — inserts too — from the change log read by transaction id
    (:func:`memory.backends.postgresql.read_message_changes`); a row's changes since the last
    read telescope (the old tokens of its first one out, its present tokens in), so they
    add up to the snapshot's statistics whatever the commit order. A stream's postings keep
    only the ids the statistics count, the others arrive with the next poll.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rebuilds = 0
        self._clear()

    def _clear(self) -> None:
        self._revision: str | None = None
        self._max_id = 0
        self._df: dict[str, int] = {}
        self._rows = 0
        self._total_tokens = 0.0
        self._streams: dict[int, _StreamPostings] = {}  # insertion order = least recently used first
        # PostgreSQL only: the change log, and the ids the statistics count (sorted array, less those
        # edited or deleted since, plus those added since)
        self._feed = ChangeFeed("messages", MESSAGE_REVISION_KEY, _read_message_changes)
        self._known = np.zeros(0, dtype=np.int64)
        self._known_tail: set[int] = set()
        self._known_gone: set[int] = set()
        self._log_at = 0  # SQLite only: one past the last change-log id read

    def reset(self) -> None:
        with self._lock:
            self._clear()

    @property
    def loaded(self) -> bool:
        """Whether the statistics are loaded."""
        return self._revision is not None

    def _load_postgresql(self) -> None:
        """The statistics and the change log's position in one snapshot (see the class docstring)."""
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            self._clear()
            revision = self._feed.start()
            frequencies, ids, total_tokens = backends.postgresql.message_statistics()
        for term, doc in frequencies:
            self._df[term] = int(doc)
        del frequencies  # gone before settle() hands the free memory back
        self._known = ids
        self._rows, self._total_tokens = len(ids), float(total_tokens)
        self._max_id = int(ids[-1]) if len(ids) else 0
        self._revision = revision
        self.rebuilds += 1
        residency.settle()

    def _is_known(self, rowid: int) -> bool:
        if rowid in self._known_tail:
            return True
        k = int(np.searchsorted(self._known, rowid))
        return k < len(self._known) and int(self._known[k]) == rowid and rowid not in self._known_gone

    def _refresh_postgresql(self) -> None:
        with self._lock:
            poll = self._feed.poll()
            if (poll.rebuild or poll.revision != self._revision
                    or not self._apply([(c[1], *c[3:]) for c in poll.changes], lambda rowid, _old: self._is_known(rowid))):
                self._load_postgresql()

    def _apply(self, changes: Sequence[tuple], counted: Callable[[int, str | None], bool]) -> bool:
        """Bring the statistics from the last read's snapshot to this one's.

        ``changes``: what was committed in between, in the order it happened, each ``(row id,
        old stream, old tokens, stream, tokens)`` — the row before the change (``None``: inserted)
        and in this snapshot (``None``: deleted). A row's changes telescope: what the statistics
        count of it are the old tokens of its first change (when ``counted(row id, those tokens)``), what this
        snapshot holds is its present state — the one is taken out, the other added, whatever
        the commit order. ``False`` when a counted row's first change does not say what was
        counted (a reload decides)."""
        first: dict[int, tuple[int | None, str | None]] = {}
        now: dict[int, tuple[int | None, str | None]] = {}
        for rowid, old_stream, old_tokens, stream_id, tokens in changes:
            first.setdefault(int(rowid), (old_stream, old_tokens))
            now[int(rowid)] = (stream_id, tokens)
        for rowid in sorted(first):  # one at a time: a stream reloaded mid-way reads the rows known so far
            old_stream, old_tokens = first[rowid]
            if old_tokens is not None:  # an edit or a delete: the stream's cached postings go
                self._streams.pop(int(old_stream), None)
            if counted(rowid, old_tokens):
                if not old_tokens:
                    return False
                self._remove(rowid, int(old_stream), old_tokens)
            stream_id, tokens = now[rowid]
            if tokens:
                if old_tokens is not None:
                    self._streams.pop(int(stream_id), None)
                self._known_tail.add(rowid)
                self._add([(rowid, int(stream_id), tokens)])
        return True

    def _remove(self, rowid: int, stream_id: int, tokens: str) -> None:
        """A counted message's share out of the statistics (its stream's postings are gone already)."""
        toks = fts_tokens(tokens)
        for t in set(toks) | {f"s{stream_id}"}:
            n = self._df.get(t, 0) - 1
            if n > 0:
                self._df[t] = n
            else:
                self._df.pop(t, None)
        self._rows -= 1
        self._total_tokens -= len(toks) + 1
        if rowid in self._known_tail:
            self._known_tail.discard(rowid)
        else:
            self._known_gone.add(rowid)

    def _add(self, fresh: Sequence[tuple[int, int, str]]) -> None:
        """Messages ``(id, stream_id, tokens)`` committed since the last refresh, into the statistics
        and the cached streams' postings."""
        for rowid, stream_id, tokens in fresh:
            toks = fts_tokens(tokens)
            for t in set(toks) | {f"s{int(stream_id)}"}:
                self._df[t] = self._df.get(t, 0) + 1
            self._rows += 1
            self._total_tokens += len(toks) + 1
            cached = self._streams.get(int(stream_id))
            if cached is not None:
                cached.extend([(rowid, tokens)])
            self._max_id = max(self._max_id, int(rowid))

    def _load(self) -> None:
        with connection.cursor() as cur:  # one statement: one snapshot of the statistics, last id and log position
            cur.execute(
                "SELECT term, doc, cnt, NULL, NULL FROM messages_fts_vocab UNION ALL"
                " SELECT NULL, (SELECT count(*) FROM messages_fts_docsize), (SELECT max(id) FROM messages),"
                " (SELECT coalesce(max(id), 0) + 1 FROM memory_changes), (SELECT value FROM meta WHERE key = %s)",
                [MESSAGE_REVISION_KEY],
            )
            rows = cur.fetchall()
        self._clear()
        for term, doc, cnt, log_at, revision in rows:
            if term is None:
                self._rows, self._max_id, self._log_at = int(doc or 0), int(cnt or 0), int(log_at)
                self._revision = revision or "0"
            else:
                self._df[term] = int(doc)
                self._total_tokens += int(cnt)
        del rows  # gone before settle() hands the free memory back
        self.rebuilds += 1
        residency.settle()

    def refresh(self) -> None:
        if backends.is_postgresql():
            self._refresh_postgresql()
            return
        with connection.cursor() as cur:
            cur.execute(
                "SELECT (SELECT value FROM meta WHERE key = %s), (SELECT max(id) FROM messages),"
                " (SELECT max(id) FROM memory_changes)", [MESSAGE_REVISION_KEY]
            )
            revision, max_id, log_top = cur.fetchone()
        if (revision or "0") == self._revision and int(max_id or 0) == self._max_id and int(log_top or 0) < self._log_at:
            return
        with self._lock:
            if self._revision is None or not self._refresh_sqlite():
                self._load()

    def _refresh_sqlite(self) -> bool:
        """Messages appended (ids above the last one: one writer at a time) and logged edits and deletes
        (migration 0025), read in one statement; ``False`` when only a reload can tell."""
        with connection.cursor() as cur:
            cur.execute(
                "SELECT 0, id, NULL, NULL, stream_id, tokens FROM messages WHERE id > %s AND tokens <> ''"
                " UNION ALL SELECT c.id, c.row_id, c.scope, c.old_tokens, m.stream_id, m.tokens FROM memory_changes c"
                " LEFT JOIN messages m ON m.id = c.row_id WHERE c.id >= %s AND c.source = 'messages'"
                " UNION ALL SELECT -1, (SELECT max(id) FROM messages), (SELECT coalesce(max(id), 0) + 1 FROM memory_changes),"
                " (SELECT value FROM meta WHERE key = 'changes_pruned_through'), (SELECT value FROM meta WHERE key = %s),"
                " NULL",
                [self._max_id, self._log_at, MESSAGE_REVISION_KEY],
            )
            rows = cur.fetchall()
        _, max_id, log_at, pruned, revision, _ = next(r for r in rows if r[0] == -1)
        max_id, log_at = int(max_id or 0), int(log_at)
        logged = sorted((r for r in rows if r[0] > 0), key=itemgetter(0))
        if ((revision or "0") != self._revision or int(pruned or 0) >= self._log_at or log_at < self._log_at
                or (max_id < self._max_id and not logged)):  # rows gone unlogged: a restored or emptied file
            return False
        upto = self._max_id
        changes = [r[1:] for r in logged] + [r[1:] for r in rows if r[0] == 0]  # appended rows: no old tokens
        self._apply(changes, lambda rowid, old: rowid <= upto and bool(old))
        self._known_tail.clear()  # (ids counted are PostgreSQL's bookkeeping; here the last id tells)
        self._known_gone.clear()
        self._max_id, self._log_at = max_id, log_at
        return True

    def _read_stream(self, stream_id: int, upto: int) -> list[tuple[int, str]]:
        """The stream's indexed messages the statistics count (ids up to ``upto``; PostgreSQL: known ids)."""
        if backends.is_postgresql():
            with connection.cursor() as cur:  # one row: the ids and the tokens, each aggregated in id order
                cur.execute(
                    "SELECT count(*), string_agg(id::text, ',' ORDER BY id), string_agg(tokens, E'\\n' ORDER BY id)"
                    " FROM messages WHERE stream_id = %s AND NOT (tokens = '')", [stream_id])
                count, id_text, tokens = cur.fetchone()
                texts = tokens.split("\n") if count else []
                if len(texts) != count:  # a line break inside a stored string (none should hold one)
                    cur.execute("SELECT id, tokens FROM messages WHERE stream_id = %s AND NOT (tokens = '') ORDER BY id",
                                [stream_id])
                    rows = cur.fetchall()
                    texts = [r[1] for r in rows]
                    id_text = ",".join(str(r[0]) for r in rows)
            ids = np.fromiter(map(int, id_text.split(",")), dtype=np.int64, count=len(texts)) if texts else np.zeros(0, dtype=np.int64)
            known = self._known
            at = np.minimum(np.searchsorted(known, ids), max(len(known) - 1, 0))
            ok = known[at] == ids if len(known) else np.zeros(len(ids), dtype=bool)
            tail, gone = self._known_tail, self._known_gone
            if gone:
                ok &= ~np.isin(ids, np.fromiter(gone, dtype=np.int64, count=len(gone)))
            if tail:
                ok |= np.isin(ids, np.fromiter(tail, dtype=np.int64, count=len(tail)))
            return list(zip(ids[ok].tolist(), compress(texts, ok.tolist()), strict=True))
        with connection.cursor() as cur:  # the covering index idx_messages_stream_tokens answers
            cur.execute(
                "SELECT id, tokens FROM messages WHERE stream_id = %s AND NOT (tokens = '') AND id <= %s ORDER BY id",
                [stream_id, upto],
            )
            return cur.fetchall()

    def _stream(self, stream_id: int) -> _StreamPostings:
        cached = self._streams.pop(stream_id, None)
        if cached is None:
            cached = _StreamPostings(self._read_stream(stream_id, self._max_id))
            while len(self._streams) >= STREAMS_CACHED:
                self._streams.pop(next(iter(self._streams)))
        self._streams[stream_id] = cached
        return cached

    def statistics(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """``({term: rows holding it}, rows)`` of the whole table — FTS5's numbers (terms no row holds
        are absent)."""
        with self._lock:
            return {t: self._df[t] for t in dict.fromkeys(terms) if self._df.get(t, 0)}, self._rows

    def scores(
        self, stream_id: int, terms: Sequence[str], *, before_id: int | None = None, rowids: Sequence[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rowids, bm25)`` of the stream's messages matching any of ``terms`` (ascending rowids),
        only those below ``before_id`` / among ``rowids`` when given; ``None``: ask FTS5."""
        tokens = ResidentBM25._tokens(terms)
        if tokens is None or any(_STREAM_TOKEN.fullmatch(t) for t in tokens):
            return None
        with self._lock:
            postings = self._stream(int(stream_id))
            ids, lengths = postings.all_ids(), postings.all_lengths()
            n = self._rows
            avgdl = self._total_tokens / n if n else 1.0
            total = np.zeros(len(ids))
            hit = np.zeros(len(ids), dtype=bool)
            found = postings.postings([t for t in tokens if self._df.get(t, 0)])
            for token in tokens:
                df = self._df.get(token, 0)
                if not df or token not in found:
                    continue
                docs, tfs = found[token]
                idf = fts_idf(n, df)
                norms = K1 * ((1.0 - B) + B * lengths[docs] / avgdl)  # FTS5's order of operations
                total[docs] += idf * ((tfs * (K1 + 1.0)) / (tfs + norms))
                hit[docs] = True
            keep = hit
            if before_id is not None:
                keep = keep & (ids < before_id)
            if rowids is not None:
                keep = keep & np.isin(ids, np.fromiter((int(r) for r in rowids), dtype=np.int64))
            return ids[keep], -total[keep]


def _read_message_changes(horizon: int | None, seen: set[int]) -> tuple[str, int, list[tuple], int]:
    return backends.postgresql.read_message_changes(MESSAGE_REVISION_KEY, horizon, seen)


_messages = ResidentMessages()


def resident_messages() -> ResidentMessages | None:
    """The fresh resident message statistics, or ``None`` when FTS5 must answer (see :func:`resident`;
    every reader of them has statements that give the same numbers, so none waits for the warm-up)."""

    if not resident_enabled() or _building(_messages):
        return None
    _refresh_once("messages", _messages.refresh)
    _messages_polled[0] = time.monotonic()
    return _messages


#: When this process last brought its message statistics up to date (monotonic seconds).
_messages_polled = [0.0]
#: How old the message statistics may be for a reader that only weighs words by them.
MESSAGE_WEIGHTS_MAX_AGE_S = 10.0


def message_weights() -> ResidentMessages | None:
    """The resident message statistics for a reader that only weighs words by their document
    frequencies (where a fact was told, memory/selectors/told.py): as they stand when brought up to
    date less than :data:`MESSAGE_WEIGHTS_MAX_AGE_S` ago — no poll of the change log, a round trip
    on PostgreSQL — else as :func:`resident_messages`."""
    if resident_enabled() and _messages.loaded and time.monotonic() - _messages_polled[0] < MESSAGE_WEIGHTS_MAX_AGE_S:
        return _messages
    return resident_messages()


# --- warm-up: the resident structures a turn reads, built beside the first requests ----------------------

#: set while a process's warm-up thread builds them (:func:`warm_up_in_background`)
_warming = threading.Event()
#: what a turn reads through a resident structure, in the order they are built (the cheapest first)
WARM_UP = ("messages", "facts_fts", "cues_fts")


def _building(index: ResidentBM25 | ResidentMessages) -> bool:
    """Whether the warm-up has yet to build ``index`` (a reader that need not wait takes the statements)."""
    return _warming.is_set() and not index.loaded


def warm_up(structures: Sequence[str] = WARM_UP) -> None:
    """Load ``structures`` (``"messages"`` or an FTS table of :data:`SOURCES`) now, in this thread."""
    for name in structures:
        if name == "messages":
            _messages.refresh()
        else:
            _index(name).refresh()


def warm_up_in_background(structures: Sequence[str] = WARM_UP) -> threading.Thread | None:
    """Build ``structures`` in a thread of their own, so that a process's first turn does not wait
    for whole tables to load (at 10× the bench store, ~30 s): until each is built, the turn's
    scoped readers — present persons' facts, a stream's cues and messages — take the statements,
    which give the same numbers (:func:`resident` with ``wait=False``); a whole-table query waits for
    the build. A web worker starts it once it has loaded the app (``config/gunicorn.py``).
    ``None`` when the resident indexes are off."""
    if not settings.LEXICAL_RESIDENT_INDEX:
        return None
    _warming.set()

    def run() -> None:
        try:
            warm_up(structures)
        except Exception:  # the readers build what is missing themselves, as without a warm-up
            logger.exception("resident warm-up failed")
        finally:
            _warming.clear()
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=run, name="resident-warm-up", daemon=True)
    thread.start()
    return thread
