"""SQ8 scalar quantisation of embedding vectors and int8 cosine similarity.

Blob layout (little-endian, ``struct '<4sIf'`` header of 12 bytes):

====== ==== ==========================================================
offset size content
====== ==== ==========================================================
0      4    magic + format version ``b'YQ8\\x01'``
4      4    dimension, uint32
8      4    scale, float32 (``max|v| / 127``; 1.0 for the zero vector)
12     dim  int8 payload, ``q_i = clamp(round_half_even(v_i / scale), -127, 127)``
====== ==== ==========================================================

``-128`` is never produced and is rejected on decode. Because every component of one
vector shares one scale, the cosine of two SQ8 vectors equals the cosine of their int8
payloads: the scales cancel. All cosine functions here therefore work on the integers.

Raw embeddings are float32 little-endian bytes (``4 * dim``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

try:  # SIMD int8 dot products (a small, dependency-free wheel); numpy is the fallback
    import simsimd
except ImportError:  # pragma: no cover - platforms without a wheel
    simsimd = None

__all__ = [
    "MAGIC",
    "HEADER",
    "HEADER_SIZE",
    "quantize",
    "quantize_vector",
    "pack_float32",
    "unpack_float32",
    "decode_q8",
    "dequantize",
    "quantized_dimension",
    "embedding_dimension",
    "cosine_q8",
    "cosine_q8_many",
    "cosine_q8_matrix",
    "Int8Matrix",
    "SignSketch",
    "valid_q8_rows",
]

MAGIC: bytes = b"YQ8\x01"
HEADER: struct.Struct = struct.Struct("<4sIf")
HEADER_SIZE: int = HEADER.size  # 12
_F32_LE = np.dtype("<f4")
# Rows are cast to float32 a chunk at a time, so that a chunk (1 MB) stays in L2 cache;
# larger chunks are slower.
_CHUNK_BYTES = 1 << 20

BytesLike = bytes | bytearray | memoryview


def unpack_float32(raw: BytesLike) -> np.ndarray:
    """Decode little-endian float32 bytes into a float32 array (validated).

    Raises ``ValueError`` if ``raw`` is empty, not a multiple of 4 bytes, or contains
    NaN / ±inf.
    """
    data = bytes(raw)
    if not data or len(data) % 4:
        raise ValueError("float32 向量字节长度必须是 4 的正整数倍")
    vec = np.frombuffer(data, dtype=_F32_LE).astype(np.float32)
    if not np.isfinite(vec).all():
        raise ValueError("float32 向量包含非有限值")
    return vec


def pack_float32(vec: np.ndarray | Sequence[float]) -> bytes:
    """Encode a vector as little-endian float32 bytes (no validation beyond the cast)."""
    return np.asarray(vec, dtype=_F32_LE).reshape(-1).tobytes()


def _quantize_array(values: np.ndarray) -> bytes:
    values64 = values.astype(np.float64)
    peak = float(np.max(np.abs(values64))) if values64.size else 0.0
    scale = peak / 127.0 if peak > 0.0 else 1.0
    if np.float32(scale) == 0.0:
        # max|v| < ~1.8e-43: the float32 header cannot hold the scale. Such a vector is
        # numerically zero; store it as the zero vector rather than an undecodable blob.
        scale, values64 = 1.0, np.zeros_like(values64)
    # np.rint rounds half to even, exactly like Python's round().
    q = np.clip(np.rint(values64 / scale), -127, 127).astype(np.int8)
    return HEADER.pack(MAGIC, int(values64.size), scale) + q.tobytes()


def quantize(raw: BytesLike) -> bytes:
    """Quantise little-endian float32 bytes to an SQ8 blob (``12 + dim`` bytes).

    Raises ``ValueError`` for empty input, a length not divisible by 4, or non-finite values.
    A vector so small that its scale underflows float32 (max|v| < ~1.8e-43) is stored
    as the zero vector, so every blob produced here decodes.
    """
    return _quantize_array(unpack_float32(raw))


def quantize_vector(vec: np.ndarray | Sequence[float]) -> bytes:
    """Quantise an in-memory vector (values are first rounded to float32, like the stored column)."""
    return quantize(pack_float32(vec))


def decode_q8(blob: BytesLike) -> tuple[int, float, np.ndarray]:
    """Validate an SQ8 blob and return ``(dimension, scale, int8 payload)``.

    Raises ``ValueError`` when the blob is shorter than the header, the magic/version is
    unknown, the dimension is < 1, the scale is not a finite positive number, the payload
    length differs from the dimension, or a payload byte is -128.
    """
    data = bytes(blob)
    if len(data) < HEADER_SIZE:
        raise ValueError("SQ8 数据短于格式头")
    magic, dim, scale = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError("SQ8 格式标识或版本不受支持")
    if dim < 1:
        raise ValueError("SQ8 维度必须大于 0")
    if not math.isfinite(scale) or scale <= 0.0:
        raise ValueError("SQ8 缩放系数必须是有限正数")
    payload = len(data) - HEADER_SIZE
    if payload != dim:
        raise ValueError(f"SQ8 载荷长度 {payload} 与声明维度 {dim} 不一致")
    q = np.frombuffer(data, dtype=np.int8, offset=HEADER_SIZE)
    if (q == -128).any():
        raise ValueError("SQ8 载荷包含 -128")
    return dim, scale, q


def dequantize(blob: BytesLike) -> bytes:
    """Little-endian float32 bytes ``q_i * scale`` of a validated SQ8 blob."""
    _dim, scale, q = decode_q8(blob)
    return (q.astype(np.float64) * scale).astype(_F32_LE).tobytes()


def quantized_dimension(blob: BytesLike) -> int:
    """Dimension of a validated SQ8 blob."""
    return decode_q8(blob)[0]


def embedding_dimension(raw: BytesLike) -> int:
    """Number of float32 components of validated raw embedding bytes."""
    return int(unpack_float32(raw).size)


def _int_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64 = a.astype(np.int64)
    b64 = b.astype(np.int64)
    norm_a = int(a64 @ a64)
    norm_b = int(b64 @ b64)
    if norm_a == 0 or norm_b == 0:
        return 0.0
    value = int(a64 @ b64) / math.sqrt(norm_a * norm_b)
    return max(-1.0, min(1.0, value))


def cosine_q8(a: BytesLike, b: BytesLike) -> float:
    """Cosine of two SQ8 blobs, computed on the int8 integers (scales cancel).

    Zero vector on either side → 0.0; result clamped to ``[-1, 1]``. Raises
    ``ValueError`` for invalid blobs or differing dimensions ("维度不一致").
    """
    dim_a, _sa, qa = decode_q8(a)
    dim_b, _sb, qb = decode_q8(b)
    if dim_a != dim_b:
        raise ValueError(f"SQ8 向量维度不一致：{dim_a} 与 {dim_b}")
    return _int_cosine(qa, qb)


def _payloads(blobs: Sequence[BytesLike | None], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, payload rows as float64)`` of the blobs that are valid SQ8 of dimension ``dim``.

    The checks are :func:`decode_q8`'s (length, magic, dimension, finite positive scale,
    no ``-128``), done on all blobs at once.
    """
    size = HEADER_SIZE + dim
    good = [(i, bytes(b)) for i, b in enumerate(blobs) if b is not None and len(b) == size]
    if not good:
        return np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float64)
    raw = np.frombuffer(b"".join(b for _, b in good), dtype=np.uint8).reshape(len(good), size)
    keep = (raw[:, :4] == np.frombuffer(MAGIC, dtype=np.uint8)).all(axis=1)
    keep &= raw[:, 4:8].copy().view("<u4").ravel() == dim
    scales = raw[:, 8:12].copy().view(_F32_LE).ravel().astype(np.float64)
    keep &= np.isfinite(scales) & (scales > 0.0)
    payload = raw[:, HEADER_SIZE:].view(np.int8)
    keep &= ~(payload == -128).any(axis=1)
    positions = np.fromiter((i for (i, _), k in zip(good, keep, strict=True) if k), dtype=np.int64)
    return positions, payload[keep].astype(np.float64)


def cosine_q8_matrix(queries_q8: Sequence[BytesLike], blobs: Sequence[BytesLike | None]) -> np.ndarray:
    """Cosines of several SQ8 queries against many SQ8 blobs: one row per query (float64).

    Each row equals :func:`cosine_q8_many` of that query — the same integer dot products and
    norms, the same float operations (``dot / sqrt(|a|²·|b|²)`` clamped to ``[-1, 1]``, 0 for a
    zero vector), so the values are identical — but the blobs are decoded once and the
    products taken as one integer matrix product. All queries must share one dimension;
    an invalid query raises ``ValueError``; an invalid blob or one of another dimension
    gives ``NaN`` in its column.
    """
    decoded = [decode_q8(q) for q in queries_q8]
    out = np.full((len(decoded), len(blobs)), np.nan, dtype=np.float64)
    if not decoded or not len(blobs):
        return out
    dim = decoded[0][0]
    if any(d != dim for d, _s, _q in decoded):
        raise ValueError("SQ8 查询向量维度不一致")
    positions, rows = _payloads(blobs, dim)
    if not len(positions):
        return out
    # The integer products in float64: every sum these reach is an integer below 2**53 (|dot| ≤ dim · 127²),
    # which float64 holds exactly whatever order the matrix product adds in, and a float64 product
    # of two such norms is the correctly rounded integer one. The same values as integer
    # arithmetic, from the BLAS product (int64 has none: 3× slower for a turn's 7 × 60 cosines).
    q = np.vstack([q for _d, _s, q in decoded]).astype(np.float64)
    dots = q @ rows.T
    q_norms = np.einsum("ij,ij->i", q, q)
    r_norms = np.einsum("ij,ij->i", rows, rows)
    products = q_norms[:, None] * r_norms[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.clip(dots / np.sqrt(products), -1.0, 1.0)
    values[products == 0] = 0.0
    out[:, positions] = values
    return out


def cosine_q8_many(query_q8: BytesLike, blobs: Sequence[BytesLike | None]) -> np.ndarray:
    """Cosines of one SQ8 query against many SQ8 blobs (float64 array, one per blob).

    An invalid query raises ``ValueError``. A blob that is ``None``, invalid, or of another
    dimension yields ``NaN`` at its position, so callers can keep the lexical relevance
    of that row only. (:func:`cosine_q8_matrix` with one query.)
    """
    return cosine_q8_matrix([query_q8], blobs)[0]


def _row_norms(matrix: np.ndarray) -> np.ndarray:
    """Euclidean norm of each int8 row (float32): the squares summed exactly in integers, a block of
    rows at a time (int32 holds 127² · dim for any dim below 133,000; int64 otherwise)."""
    out = np.empty(matrix.shape[0], dtype=np.float32)
    wide = np.int32 if matrix.shape[1] < 133_000 else np.int64
    step = max(1, (1 << 22) // max(1, matrix.shape[1]))
    for start in range(0, matrix.shape[0], step):
        block = matrix[start:start + step].astype(wide)
        out[start:start + step] = np.sqrt(np.einsum("ij,ij->i", block, block).astype(np.float64))
    return out


def valid_q8_rows(blobs: Sequence[BytesLike | None], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mask, payloads)``: which blobs are valid SQ8 of dimension ``dim`` — :func:`decode_q8`'s checks
    (length, magic, dimension, finite positive scale, no ``-128``) on all of them at once — and the
    int8 payload rows of those (C-contiguous, in order)."""
    mask = np.zeros(len(blobs), dtype=bool)
    if dim < 1 or not len(blobs):
        return mask, np.zeros((0, max(dim, 0)), dtype=np.int8)
    size = HEADER_SIZE + dim
    present = [b"" if b is None else b for b in blobs]
    sized = np.fromiter(map(len, present), dtype=np.int64, count=len(present)) == size
    where = np.flatnonzero(sized)
    chosen = present if len(where) == len(present) else [present[i] for i in where]
    raw = np.frombuffer(b"".join(chosen), dtype=np.uint8).reshape(len(where), size)
    good = (raw[:, :4] == np.frombuffer(MAGIC, dtype=np.uint8)).all(axis=1)
    good &= raw[:, 4:8].copy().view("<u4").ravel() == dim
    scales = raw[:, 8:12].copy().view(_F32_LE).ravel()
    good &= np.isfinite(scales) & (scales > 0.0)
    payload = raw[:, HEADER_SIZE:].view(np.int8)
    if len(payload) and payload.min() == -128:  # rare: find the rows (one pass over all of them otherwise)
        good &= ~(payload == -128).any(axis=1)
    mask[where[good]] = True
    return mask, np.ascontiguousarray(payload if good.all() else payload[good])


_BLOCK = 64  # rows whose maximum bounds the k-th largest value from below (see _kth_largest)
_PARALLEL_ROWS = 8192  # from this many rows a query's dot products use every core


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The ``k``-th largest of ``values`` (1 ≤ k ≤ len), without partitioning all of them.

    The maxima of ``k`` disjoint blocks are ``k`` distinct values, so the ``k``-th largest block
    maximum is at most the ``k``-th largest value: only the values reaching it can be the top ``k``,
    and they are few. One pass for the block maxima, one comparison, then a partition of the few —
    about a tenth of partitioning every value of a large matrix.
    """
    n = values.shape[0]
    blocks = n // _BLOCK
    if blocks >= 4 * k:
        maxima = values[: blocks * _BLOCK].reshape(blocks, _BLOCK).max(axis=1)
        bound = np.partition(maxima, blocks - k)[blocks - k]
        values = values[values >= bound]
    return float(np.partition(values, values.shape[0] - k)[values.shape[0] - k])


_SKETCH_ROWS = 16384  # rows turned into sign codes at a time (a float32 chunk of 32 MB at d = 512)


@dataclass(frozen=True)
class SignSketch:
    """One bit per dimension of each row: which side of the rows' mean direction it lies on.

    The bits of two unit vectors differ in a share of the dimensions that grows with the angle
    between them (the sign-random-projection argument, here with the coordinate axes after the
    rows' mean is taken away, which spreads the bits of embeddings that all lean one way). The
    Hamming distance of 64 bytes is a cheap first guess of which rows are nearest; the exact int8
    cosine then ranks the ``candidates`` closest guesses (:meth:`Int8Matrix.top_k`). The answer is
    approximate: a row can be missed when its bits disagree with the query's more than those of
    ``candidates`` others. docs/ARCHITECTURE.md ("The knowledge vector index") gives the measured recall.
    """

    centre: np.ndarray  # float32, d: mean of the rows as unit vectors
    codes: np.ndarray  # uint8, n × ceil(d / 8)
    candidates: int

    @classmethod
    def of(cls, matrix: np.ndarray, norms: np.ndarray, candidates: int) -> SignSketch:
        """The sketch of int8 ``matrix`` rows (their Euclidean ``norms`` given), a chunk of rows at a time."""
        n, d = matrix.shape
        inverse = np.zeros(n, dtype=np.float32)
        np.divide(1.0, norms, out=inverse, where=norms > 0.0)

        def unit_chunks():  # (first row, those rows as unit float32 vectors), _SKETCH_ROWS at a time
            for start in range(0, n, _SKETCH_ROWS):
                yield start, matrix[start : start + _SKETCH_ROWS].astype(np.float32) * inverse[start : start + _SKETCH_ROWS, None]

        total = np.zeros(d, dtype=np.float64)
        for _start, unit in unit_chunks():
            total += unit.sum(axis=0, dtype=np.float64)
        centre = (total / max(n, 1)).astype(np.float32)
        codes = np.empty((n, (d + 7) // 8), dtype=np.uint8)
        for start, unit in unit_chunks():
            codes[start : start + unit.shape[0]] = np.packbits(unit > centre, axis=1)
        return cls(centre, codes, max(1, int(candidates)))

    def nearest_rows(self, vec: np.ndarray, count: int) -> np.ndarray:
        """Positions (ascending) of the ``count`` rows whose bits differ least from those of ``vec``;
        rows at the cut-off distance are taken in position order, so the answer is deterministic."""
        n = self.codes.shape[0]
        if count >= n:
            return np.arange(n)
        norm = float(np.sqrt(np.dot(vec.astype(np.float64), vec.astype(np.float64))))
        unit = vec.astype(np.float32) / np.float32(norm) if norm > 0.0 else vec.astype(np.float32)
        code = np.packbits(unit > self.centre)[None, :]
        if simsimd is not None:
            distances = np.asarray(simsimd.cdist(self.codes, code, metric="hamming", dtype="bin8")).reshape(-1)
        else:  # pragma: no cover - platforms without a simsimd wheel
            distances = np.bitwise_count(self.codes ^ code).sum(axis=1)
        # whole numbers of at most d bits: partitioned as int16 (int32 past 32,767 bits) they cost a third
        # of the float64 that simsimd returns
        distances = distances.astype(np.int16 if self.codes.shape[1] * 8 < 2**15 else np.int32)
        cut = np.partition(distances, count - 1)[count - 1]
        closer = np.flatnonzero(distances < cut)
        at_cut = np.flatnonzero(distances == cut)[: count - closer.shape[0]]
        return np.sort(np.concatenate([closer, at_cut]))


@dataclass
class Int8Matrix:
    """A resident matrix of SQ8 payloads for brute-force cosine search.

    ``ids`` (int64, n), ``matrix`` (int8, n × d) and ``norms`` (float32, n: Euclidean norm
    of each int8 row). Per-row scales are not kept: cosine is scale-invariant, so the
    int8 rows are searched directly. Rows are never de-quantised: :meth:`cosines` takes
    the dot products of the int8 rows with an SQ8 query by SIMD integer arithmetic
    (``simsimd``), and with a float query by converting chunks of ``~2048`` rows to
    float32 (the int8 products and their sums stay exact in float32 for d ≤ 1024).
    ``skipped`` lists ids whose blob was invalid or of another dimension at build time.
    A matrix given a :class:`SignSketch` (:meth:`with_sketch`) answers :meth:`top_k` from the
    sketch's candidates only (approximate); without one every row is scored (exact).
    """

    ids: np.ndarray
    matrix: np.ndarray
    norms: np.ndarray
    skipped: tuple[int, ...] = field(default=())
    sketch: SignSketch | None = field(default=None, repr=False, compare=False)
    _inverse_norms: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def dimension(self) -> int:
        """Vector dimension (0 for an empty matrix built without a dimension)."""
        return int(self.matrix.shape[1]) if self.matrix.ndim == 2 else 0

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @classmethod
    def from_blobs(cls, pairs: Iterable[tuple[int, BytesLike | None]], *, dimension: int | None = None) -> Int8Matrix:
        """Build from ``(id, sq8_blob)`` pairs.

        Rows whose blob is ``None``/invalid, or whose dimension differs from ``dimension``
        (default: the first valid blob's), are skipped and listed in ``skipped``. The blobs
        are checked as :func:`decode_q8` checks one, all at once (:func:`valid_q8_rows`).
        """
        pairs = list(pairs)
        blobs = [b for _i, b in pairs]
        dim = dimension
        if dim is None:
            for blob in blobs:
                if blob is None:
                    continue
                try:
                    dim = decode_q8(blob)[0]
                    break
                except ValueError:
                    continue
        width = dim or 0
        keep, payload = valid_q8_rows(blobs, width)
        return cls.from_rows(np.fromiter((int(i) for i, _b in pairs), dtype=np.int64, count=len(pairs)), keep, payload)

    @classmethod
    def from_rows(cls, ids: np.ndarray, keep: np.ndarray, payload: np.ndarray) -> Int8Matrix:
        """From :func:`valid_q8_rows`' answer for the blobs of ``ids``: the kept ones, the others skipped."""
        return cls(ids[keep], payload, _row_norms(payload), tuple(ids[~keep].tolist()))

    def subset(self, rows: np.ndarray) -> Int8Matrix:
        """The matrix of the rows at positions ``rows`` (in that order; no sketch)."""
        return Int8Matrix(self.ids[rows], self.matrix[rows], self.norms[rows])

    def with_sketch(self, candidates: int) -> Int8Matrix:
        """This matrix with a :class:`SignSketch` of its rows: :meth:`top_k` then ranks exactly only the
        ``candidates`` rows (or 16 × k, if more) whose sign codes are nearest the query's."""
        return Int8Matrix(self.ids, self.matrix, self.norms, self.skipped,
                          SignSketch.of(self.matrix, self.norms, candidates))

    def _query_vector(self, query: BytesLike | np.ndarray | Sequence[float]) -> tuple[np.ndarray, np.ndarray | None]:
        """The query as float32, and as int8 when it is an SQ8 blob (``None`` for a float vector)."""
        if isinstance(query, (bytes, bytearray, memoryview)):
            _d, _s, q = decode_q8(query)
            q8 = np.ascontiguousarray(q, dtype=np.int8)
            vec = q8.astype(np.float32)
        else:
            q8 = None
            vec = np.asarray(query, dtype=np.float32).reshape(-1)
            if not np.isfinite(vec).all():
                raise ValueError("查询向量包含非有限值")
        if len(self) and vec.shape[0] != self.dimension:
            raise ValueError(f"查询向量维度不一致：{vec.shape[0]} 与 {self.dimension}")
        return vec, q8

    def _dots(self, vec: np.ndarray, q8: np.ndarray | None) -> np.ndarray:
        """Dot products of every row with the query (exact: int8 products summed in ≤ 2^24)."""
        if q8 is not None and simsimd is not None:
            # int8 · int8 with integer accumulation in SIMD, at about the speed of reading the matrix
            # (a large matrix is split across the cores: the sums are integers, so the result is the same)
            threads = 0 if self.matrix.shape[0] >= _PARALLEL_ROWS else 1
            return np.asarray(simsimd.cdist(self.matrix, q8[None, :], metric="dot", threads=threads)).reshape(-1)
        n = len(self)
        dots = np.empty(n, dtype=np.float32)
        rows = max(64, _CHUNK_BYTES // (4 * max(1, self.matrix.shape[1])))
        for start in range(0, n, rows):
            chunk = self.matrix[start : start + rows].astype(np.float32)
            np.dot(chunk, vec, out=dots[start : start + chunk.shape[0]])
        return dots

    def _exact_cosines(self, dots: np.ndarray, vec: np.ndarray, rows: np.ndarray | slice) -> np.ndarray:
        """Cosines from the dot products of ``rows`` (float64; 0 for a zero row or query; clamped)."""
        q_norm = float(np.sqrt(np.dot(vec.astype(np.float64), vec.astype(np.float64))))
        denom = self.norms[rows].astype(np.float64) * q_norm
        out = np.zeros(denom.shape[0], dtype=np.float64)
        nonzero = denom > 0.0
        out[nonzero] = dots[nonzero].astype(np.float64) / denom[nonzero]
        np.clip(out, -1.0, 1.0, out=out)
        return out

    def cosines(self, query: BytesLike | np.ndarray | Sequence[float]) -> np.ndarray:
        """Cosine of ``query`` (an SQ8 blob or a float vector) against every row (float64, n).

        Zero rows or a zero query give 0.0; values are clamped to ``[-1, 1]``. Raises
        ``ValueError`` for an invalid query or a dimension mismatch.
        """
        vec, q8 = self._query_vector(query)
        if len(self) == 0:
            return np.zeros(0, dtype=np.float64)
        return self._exact_cosines(self._dots(vec, q8), vec, slice(None))

    def _ranking(self, dots: np.ndarray) -> np.ndarray:
        """``dot / |row|`` in float32 (0 for a zero row): the cosines' order, up to float32 rounding."""
        if self._inverse_norms is None:
            norms = self.norms.astype(np.float64)
            inverse = np.zeros_like(norms)
            np.divide(1.0, norms, out=inverse, where=norms > 0.0)
            self._inverse_norms = inverse.astype(np.float32)
        return dots.astype(np.float32, copy=False) * self._inverse_norms

    def top_k(self, query: BytesLike | np.ndarray | Sequence[float], k: int) -> list[tuple[int, float]]:
        """The ``k`` rows most similar to ``query``: ``[(id, cosine), ...]`` best first.

        Ties are broken by row position (insertion order). ``k < 1`` or an empty matrix → ``[]``.
        With a sketch, the exact ranking of the sketch's nearest candidates (see :class:`SignSketch`).
        """
        if k < 1 or len(self) == 0:
            return []
        vec, q8 = self._query_vector(query)
        if self.sketch is not None and max(self.sketch.candidates, 16 * k) < len(self):
            rows = self.sketch.nearest_rows(vec, max(self.sketch.candidates, 16 * k))
            return self.subset(rows)._top_k(vec, q8, k)
        return self._top_k(vec, q8, k)

    def _top_k(self, vec: np.ndarray, q8: np.ndarray | None, k: int) -> list[tuple[int, float]]:
        """:meth:`top_k` of every row, for the decoded query."""
        dots = self._dots(vec, q8)
        n = dots.shape[0]
        if k < n:
            # Rows ranked by dot / |row| in float32 first (the query's norm is common to all), then
            # the exact float64 cosine of the few rows within a rounding margin of the k-th: every
            # row whose exact cosine reaches the k-th exact one is among them, so the result (ids,
            # order, ties by position, values) is the full ranking's at a fraction of its cost.
            ranking = self._ranking(dots)
            kth = _kth_largest(ranking, k)
            near = np.flatnonzero(ranking >= kth - (abs(float(kth)) * 1e-5 + 1e-30))
            exact = self._exact_cosines(dots[near], vec, near)
            part = np.argpartition(-exact, k - 1)[:k] if k < near.shape[0] else np.arange(near.shape[0])
            keep = np.flatnonzero(exact >= exact[part].min())
            rows, scores = near[keep], exact[keep]
        else:
            rows, scores = np.arange(n), self._exact_cosines(dots, vec, slice(None))
        order = np.lexsort((rows, -scores))[:k]
        return [(int(self.ids[rows[i]]), float(scores[i])) for i in order]
