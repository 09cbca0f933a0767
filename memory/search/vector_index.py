"""The resident int8 knowledge vector index.

All knowledge SQ8 vectors live in one int8 matrix per process. SQLite triggers
bump ``meta['knowledge_vector_revision']`` whenever a knowledge SQ8 value is
inserted, changed or deleted — by this process, another worker or a script —
so each search first reads that counter (one indexed row) and the first search
after a change rebuilds the matrix. Reading the SQ8 column of every row per
query would cost a full scan of the overflow pages behind the float32 column.
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

import numpy as np
from django.conf import settings
from django.db import connection

from memory.engine.quantize import HEADER_SIZE, Int8Matrix, valid_q8_rows
from memory.search import residency

REVISION_KEY = "knowledge_vector_revision"


def current_revision() -> str:
    with connection.cursor() as cur:
        cur.execute("SELECT value FROM meta WHERE key = %s", [REVISION_KEY])
        row = cur.fetchone()
    return row[0] if row else "0"


def _majority_matrix(pairs: Sequence[tuple[int, bytes]]) -> Int8Matrix:
    """The matrix of the rows of the dimension most stored vectors have (a few stale rows of an old
    model must not win; equal counts: the dimension met first), the others skipped. A blob's length
    tells the only dimension it can have: the lengths are counted, the most frequent checked first,
    and a length with fewer blobs than the best count found is not checked at all."""
    ids = np.fromiter((int(i) for i, _b in pairs), dtype=np.int64, count=len(pairs))
    blobs = [b for _i, b in pairs]
    best: tuple[int, int, np.ndarray, np.ndarray] | None = None  # (count, -first row, mask, payloads)
    for size, total in Counter(map(len, blobs)).most_common():
        if best is not None and total < best[0]:
            break
        if size <= HEADER_SIZE:
            continue
        keep, payload = valid_q8_rows(blobs, size - HEADER_SIZE)
        count = int(keep.sum())
        if count and (best is None or (count, -int(keep.argmax())) > best[:2]):
            best = (count, -int(keep.argmax()), keep, payload)
    if best is None:
        return Int8Matrix.from_blobs(pairs)
    return Int8Matrix.from_rows(ids, best[2], best[3])


def _stored_matrix() -> Int8Matrix:
    """The matrix of every stored knowledge SQ8 vector (:func:`_majority_matrix`), rows by ascending id
    (a row's place is found by bisection: a dict of the ids cost ~100 bytes a row, 24 MB at 10×), with
    a sign sketch from ``KNOWLEDGE_EXACT_ROWS`` rows on (approximate top-k; 16 MB at 250k rows)."""
    with connection.cursor() as cur:
        cur.execute("SELECT id, embedding_q8 FROM knowledge WHERE embedding_q8 IS NOT NULL ORDER BY id")
        pairs = [(i, bytes(b)) for i, b in cur.fetchall()]
    matrix = _majority_matrix(pairs)
    if len(matrix.ids) > 1 and not bool(np.all(np.diff(matrix.ids) > 0)):  # rows by ascending id: cosines_for bisects
        order = np.argsort(matrix.ids, kind="stable")
        matrix = Int8Matrix(matrix.ids[order], matrix.matrix[order], matrix.norms[order], matrix.skipped)
    if 0 < settings.KNOWLEDGE_EXACT_ROWS <= len(matrix) and settings.KNOWLEDGE_SKETCH_CANDIDATES < len(matrix):
        matrix = matrix.with_sketch(settings.KNOWLEDGE_SKETCH_CANDIDATES)
    return matrix


class KnowledgeVectorIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._revision: str | None = None
        self._matrix = Int8Matrix.from_blobs([])
        self.rebuilds = 0

    def _fresh(self) -> Int8Matrix:
        revision = current_revision()
        if revision != self._revision:
            with self._lock:
                if revision != self._revision:
                    matrix = _stored_matrix()  # its rows read and dropped before settle() hands memory back
                    self._matrix = matrix
                    self._revision = revision
                    self.rebuilds += 1
                    residency.settle()
        return self._matrix

    def reset(self) -> None:
        """Forget the resident matrix; the next search rebuilds it (tests, after a rollback).

        The revision is a counter in ``meta``: a transaction that bumped it and then
        rolled back lets a later write reach the same value again, so a process that
        built its matrix inside that transaction must be reset.
        """
        with self._lock:
            self._revision = None
            self._matrix = Int8Matrix.from_blobs([])

    def __len__(self) -> int:
        return len(self._fresh())

    def top_k(self, query: bytes | np.ndarray, k: int) -> list[tuple[int, float]]:
        matrix = self._fresh()
        if len(matrix) == 0:
            return []
        return matrix.top_k(query, k)

    def cosines_for(self, query: bytes | np.ndarray, ids: Sequence[int]) -> dict[int, float]:
        """Cosines of specific knowledge ids (ids without a vector are absent)."""
        matrix = self._fresh()
        wanted = np.fromiter((int(i) for i in ids), dtype=np.int64)
        at = np.minimum(np.searchsorted(matrix.ids, wanted), max(len(matrix.ids) - 1, 0))  # ids ascending (_stored_matrix)
        found = matrix.ids[at] == wanted if len(matrix.ids) else np.zeros(len(wanted), dtype=bool)
        rows = at[found]
        if not len(rows):
            return {}
        sub = matrix.subset(rows)
        return {int(i): float(c) for i, c in zip(sub.ids, sub.cosines(query), strict=True)}


_index = KnowledgeVectorIndex()


def knowledge_index() -> KnowledgeVectorIndex:
    """The process-wide index (rebuilt lazily when the revision changes)."""
    return _index
