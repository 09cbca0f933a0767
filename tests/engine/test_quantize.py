"""SQ8 — docs/REFERENCE.md §4."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.engine.quantize import (
    HEADER,
    HEADER_SIZE,
    MAGIC,
    Int8Matrix,
    SignSketch,
    cosine_q8,
    cosine_q8_many,
    cosine_q8_matrix,
    decode_q8,
    dequantize,
    embedding_dimension,
    pack_float32,
    quantize,
    quantize_vector,
    quantized_dimension,
    unpack_float32,
)


def f32(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def test_blob_length() -> None:  # 22
    assert len(quantize(f32(*([0.5] * 1024)))) == 1036
    assert len(f32(*([0.5] * 1024))) == 4096
    assert len(quantize_vector([1, 2, 3])) == 15
    assert HEADER_SIZE == 12 and MAGIC == b"YQ8\x01"


def test_exact_bytes() -> None:  # 23
    blob = quantize(f32(1.0, -0.5, 0.25))
    assert blob[:12] == bytes.fromhex("59513801 03000000 0402013c")
    assert list(np.frombuffer(blob[12:], dtype=np.int8)) == [127, -64, 32]
    dim, scale, q = decode_q8(blob)
    assert dim == 3 and scale == pytest.approx(1 / 127)


def test_second_vector() -> None:  # 24
    dim, scale, q = decode_q8(quantize(f32(3.5, -2.0, 0.0, 1.25, -0.5)))
    assert q.tolist() == [127, -73, 0, 45, -18]
    assert scale == pytest.approx(0.0275591, abs=1e-7)


def test_ties_to_even() -> None:
    # scale 1.0 (max 127): v/scale = 0.5, 1.5, 2.5, -63.5 round to 0, 2, 2, -64
    _d, _s, q = decode_q8(quantize(f32(127.0, 0.5, 1.5, 2.5, -63.5)))
    assert q.tolist() == [127, 0, 2, 2, -64]


def test_zero_vector() -> None:  # 25
    blob = quantize(f32(0.0, 0.0, 0.0))
    dim, scale, q = decode_q8(blob)
    assert scale == 1.0 and q.tolist() == [0, 0, 0]
    assert cosine_q8(quantize(f32(1, 2, 3)), blob) == 0.0


@pytest.mark.parametrize("values", [(0.3, -1.7, 2.2), (3.5, -2.0, 0.0, 1.25, -0.5)])
def test_round_trip(values: tuple[float, ...]) -> None:  # 26
    back = struct.unpack(f"<{len(values)}f", dequantize(quantize(f32(*values))))
    tol = max(abs(v) for v in values) / 127 + 1e-6
    for a, b in zip(values, back, strict=True):
        assert abs(a - b) <= tol


def test_cosine() -> None:  # 27
    a = quantize(f32(1, 0, 0))
    assert cosine_q8(a, a) == pytest.approx(1.0)
    assert cosine_q8(a, quantize(f32(0, 1, 0))) == pytest.approx(0.0)
    assert cosine_q8(a, quantize(f32(0.6, 0.8, 0))) == pytest.approx(95 / math.sqrt(95**2 + 127**2))
    assert cosine_q8(a, quantize(f32(0.6, 0.8, 0))) == pytest.approx(0.598991, abs=1e-6)
    with pytest.raises(ValueError, match="维度不一致"):
        cosine_q8(a, quantize(f32(1, 0)))


def test_cosine_uses_integers_without_wraparound() -> None:
    v = np.full(512, 1.0, dtype=np.float32)
    blob = quantize_vector(v)
    assert cosine_q8(blob, blob) == 1.0
    assert cosine_q8(blob, quantize_vector(-v)) == -1.0


@pytest.mark.parametrize("raw", [b"", b"abc", f32(float("nan")), f32(1.0, float("inf")), f32(float("-inf"))])
def test_quantize_rejects(raw: bytes) -> None:  # 28
    with pytest.raises(ValueError):
        quantize(raw)


def test_decode_errors() -> None:  # 29
    good = quantize(f32(1.0, -0.5, 0.25))
    with pytest.raises(ValueError, match="短于格式头"):
        dequantize(b"")
    with pytest.raises(ValueError, match="格式标识"):
        dequantize(b"BAD!" + good[4:])
    with pytest.raises(ValueError, match="载荷长度"):
        dequantize(good[:-1])
    with pytest.raises(ValueError):
        decode_q8(good[:-1] + b"\x80")
    with pytest.raises(ValueError):
        decode_q8(struct.pack("<4sIf", MAGIC, 0, 1.0))
    for bad_scale in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            decode_q8(struct.pack("<4sIf", MAGIC, 1, bad_scale) + b"\x01")


def test_dimensions_and_packing() -> None:
    raw = f32(1.0, 2.0, 3.0)
    assert embedding_dimension(raw) == 3
    assert quantized_dimension(quantize(raw)) == 3
    assert pack_float32([1.0, 2.0, 3.0]) == raw
    assert unpack_float32(raw).tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError):
        embedding_dimension(b"\x00\x00")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_decode_arbitrary_bytes_only_value_error(data: bytes) -> None:  # property (2)
    for blob in (data, MAGIC + data):
        try:
            dim, scale, q = decode_q8(blob)
        except ValueError:
            continue
        assert dim == len(q) and scale > 0 and math.isfinite(scale)
        assert not (q == -128).any()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(allow_nan=False, min_value=-1e30, max_value=1e30), min_size=1, max_size=40))
def test_quantize_round_trip_property(values: list[float]) -> None:
    raw = f32(*values)
    exact = unpack_float32(raw).astype(np.float64)
    blob = quantize(raw)
    dim, scale, q = decode_q8(blob)
    assert dim == len(values)
    assert int(q.min()) >= -127
    back = np.frombuffer(dequantize(blob), dtype="<f4").astype(np.float64)
    peak = float(np.abs(exact).max())
    assert np.all(np.abs(back - exact) <= peak / 127 + peak * 1e-6 + 1e-37)


def test_cosine_q8_many() -> None:
    q = quantize(f32(1, 0, 0))
    out = cosine_q8_many(q, [quantize(f32(1, 0, 0)), None, b"junk", quantize(f32(1, 0)), quantize(f32(0.6, 0.8, 0))])
    assert out[0] == pytest.approx(1.0)
    assert math.isnan(out[1]) and math.isnan(out[2]) and math.isnan(out[3])
    assert out[4] == pytest.approx(0.598991, abs=1e-6)
    with pytest.raises(ValueError):
        cosine_q8_many(b"junk", [])


def test_int8_matrix_matches_cosine_q8() -> None:
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((300, 64)).astype(np.float32)
    vecs[5] = 0.0
    blobs = [(1000 + i, quantize_vector(v)) for i, v in enumerate(vecs)]
    matrix = Int8Matrix.from_blobs(blobs + [(1, b"bad"), (2, None), (3, quantize_vector([1.0, 2.0]))])
    assert len(matrix) == 300 and matrix.dimension == 64
    assert matrix.matrix.dtype == np.int8 and matrix.norms.dtype == np.float32
    assert set(matrix.skipped) == {1, 2, 3}
    query = quantize_vector(rng.standard_normal(64))
    expected = sorted(((cosine_q8(query, b), i) for i, b in blobs), key=lambda x: -x[0])
    top = matrix.top_k(query, 10)
    assert [i for i, _ in top] == [i for _, i in expected[:10]]
    for (_ident, cos), (exp_cos, _) in zip(top, expected[:10], strict=True):
        assert cos == pytest.approx(exp_cos, abs=1e-6)
    assert matrix.cosines(query)[5] == 0.0
    # float query: scale-free cosine against the int8 rows
    fq = rng.standard_normal(64).astype(np.float32)
    ref = (matrix.matrix.astype(np.float64) @ fq.astype(np.float64)) / (
        np.linalg.norm(matrix.matrix.astype(np.float64), axis=1) * np.linalg.norm(fq.astype(np.float64)) + 1e-300
    )
    assert np.allclose(matrix.cosines(fq), ref, atol=1e-6)
    assert matrix.top_k(query, 0) == []
    assert len(matrix.top_k(query, 1000)) == 300
    with pytest.raises(ValueError):
        matrix.top_k(quantize_vector([1.0, 2.0]), 3)


def test_int8_matrix_empty_and_ties() -> None:
    empty = Int8Matrix.from_blobs([])
    assert len(empty) == 0 and empty.top_k(quantize_vector([1.0]), 3) == []
    m = Int8Matrix.from_blobs([(i, quantize_vector([1.0, 0.0])) for i in (5, 3, 9)])
    assert [i for i, _ in m.top_k([1.0, 0.0], 2)] == [5, 3]


def test_int8_matrix_large_top_k_is_exact():
    """A matrix large enough for the parallel dot products and the block bound on the k-th value
    ranks exactly as every cosine sorted, ties included."""
    from memory.engine.quantize import _PARALLEL_ROWS

    rng = np.random.default_rng(1)
    n, d = _PARALLEL_ROWS + 1_001, 64
    mat = rng.integers(-127, 128, size=(n, d), dtype=np.int8)
    mat[5000:5100] = mat[17]  # a hundred ties with row 17
    m = Int8Matrix.from_rows(np.arange(n, dtype=np.int64), np.ones(n, dtype=bool), mat)
    for query in (quantize_vector(mat[17].astype(np.float32)), quantize_vector(rng.standard_normal(d))):
        for k in (1, 15, 150):
            assert m.top_k(query, k) == _full_ranking(m, query, k)


def _clustered(rng, n: int, d: int, clusters: int) -> np.ndarray:
    """Rows around a few directions that all lean one way, as sentence embeddings do."""
    lean = rng.standard_normal(d)
    centres = rng.standard_normal((clusters, d)) + 2.0 * lean
    rows = centres[rng.integers(0, clusters, n)] + 0.6 * rng.standard_normal((n, d))
    return rows.astype(np.float32)


def test_sign_sketch_ranks_its_candidates_exactly_and_finds_the_neighbours():
    """With a sketch, top_k is the exact ranking of the sketch's candidates: every cosine is the
    exact one, the order is the exact order, and on clustered rows the head is the exact head."""
    rng = np.random.default_rng(5)
    vectors = _clustered(rng, 6050, 64, 40)
    m = Int8Matrix.from_blobs([(i, quantize_vector(v)) for i, v in enumerate(vectors[:6000])])
    sketched = m.with_sketch(400)
    assert sketched.sketch.codes.shape == (6000, 8) and sketched.sketch.codes.dtype == np.uint8
    found = total = 0
    for v in vectors[6000:]:  # queries from the same clusters, not among the rows
        for query in (quantize_vector(v), v):
            exact, approx = m.top_k(query, 15), sketched.top_k(query, 15)
            cos = dict(zip(m.ids.tolist(), m.cosines(query).tolist(), strict=True))
            assert all(c == pytest.approx(cos[i], abs=1e-12) for i, c in approx)
            assert [c for _i, c in approx] == sorted((c for _i, c in approx), reverse=True)
            found += len({i for i, _ in exact} & {i for i, _ in approx})
            total += 15
    assert found / total >= 0.95  # iid noise rows would give far less: the sketch is for embeddings


def test_sign_sketch_is_exact_when_it_would_keep_every_row():
    rng = np.random.default_rng(6)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    m = Int8Matrix.from_blobs([(i, quantize_vector(v)) for i, v in enumerate(vectors)])
    query = quantize_vector(rng.standard_normal(16))
    assert m.with_sketch(300).top_k(query, 10) == m.top_k(query, 10)
    assert m.with_sketch(100).top_k(query, 20) == m.top_k(query, 20)  # 16 × k ≥ n: every row


def test_sign_sketch_candidates_are_the_nearest_codes_ties_by_position():
    matrix = np.array([[1, 1], [1, -1], [-1, -1], [1, 1], [-1, 1], [1, 1]], dtype=np.int8)
    norms = np.sqrt((matrix.astype(np.float32) ** 2).sum(axis=1))
    sketch = SignSketch.of(matrix, norms, 2)
    assert sketch.centre == pytest.approx(np.array([1 / 3, 1 / 3]) / np.sqrt(2), abs=1e-6)
    query = np.array([1.0, 1.0], dtype=np.float32)
    assert sketch.nearest_rows(query, 2).tolist() == [0, 3]  # three rows at distance 0: the first two
    assert sketch.nearest_rows(query, 4).tolist() == [0, 1, 3, 5]  # then row 1 before row 4
    assert sketch.nearest_rows(query, 9).tolist() == list(range(6))


def test_underflowing_scale_is_stored_as_zero_vector() -> None:
    blob = quantize(f32(1e-45, -1e-45))
    dim, scale, q = decode_q8(blob)
    assert (dim, scale, q.tolist()) == (2, 1.0, [0, 0])
    tiny = quantize(f32(1e-40, -5e-41))  # subnormal but representable scale
    assert decode_q8(tiny)[2].tolist()[0] == 127


@pytest.mark.parametrize("seed", range(5))
def test_simd_int8_dot_products_equal_the_numpy_path_exactly(seed, monkeypatch):
    """SQ8 queries go through simsimd's integer dot products; float32 chunks give the very same cosines."""
    from memory.engine import quantize

    assert quantize.simsimd is not None  # pinned in requirements.txt
    rng = np.random.default_rng(seed)
    dim = int(rng.choice([3, 64, 512, 1024]))
    vectors = rng.standard_normal((40, dim)).astype(np.float32)
    vectors[3] = 0.0  # a zero row
    matrix = Int8Matrix.from_blobs([(i, quantize_vector(v)) for i, v in enumerate(vectors)])
    query = quantize_vector(rng.standard_normal(dim).astype(np.float32))
    simd = matrix.cosines(query)
    monkeypatch.setattr(quantize, "simsimd", None)
    assert matrix.cosines(query).tolist() == simd.tolist()
    assert simd[3] == 0.0


def _scalar_cosines(query: bytes, blobs: list) -> list[float]:
    """The per-blob loop cosine_q8_many used to run: cosine_q8 or NaN."""
    out = []
    for blob in blobs:
        try:
            out.append(cosine_q8(query, blob) if blob is not None else math.nan)
        except ValueError:
            out.append(math.nan)
    return out


@pytest.mark.parametrize("dim", [96, 512, 3072])
def test_cosine_q8_matrix_is_the_scalar_cosine_bit_for_bit(dim: int) -> None:
    """Integer arithmetic's values, at every dimension an embedder gives: rows of ±127 make the
    largest sums (3072 · 127² is past what float32 holds exactly)."""
    rng = np.random.default_rng(11)
    vecs = rng.standard_normal((200, dim)).astype(np.float32)
    vecs[3] = 0.0
    vecs[4] = np.where(rng.standard_normal(dim) > 0, 1.0, -1.0)
    vecs[5] = 1.0
    vecs[6] = 1.0
    vecs[6, -1] = 126 / 127  # · the all-127 query: an odd sum past 2**24 at dimension 3072
    blobs: list = [quantize_vector(v) for v in vecs]
    bad_magic = b"XQ8\x01" + blobs[0][4:]
    minus_128 = bytearray(blobs[1])
    minus_128[HEADER_SIZE + 5] = 0x80
    nan_scale = blobs[2][:8] + struct.pack("<f", float("nan")) + blobs[2][12:]
    blobs += [None, b"junk", bad_magic, bytes(minus_128), nan_scale, quantize_vector([1.0, 2.0])]
    queries = [quantize_vector(v) for v in rng.standard_normal((6, dim)).astype(np.float32)]
    queries += [quantize_vector(vecs[5]), quantize_vector(np.zeros(dim, dtype=np.float32))]
    matrix = cosine_q8_matrix(queries, blobs)
    assert matrix.shape == (len(queries), len(blobs))
    for row, query in zip(matrix, queries, strict=True):
        want = _scalar_cosines(query, blobs)
        assert np.array_equal(row, np.asarray(want), equal_nan=True)  # identical values, NaN where invalid
        assert np.array_equal(cosine_q8_many(query, blobs), row, equal_nan=True)
    assert np.isnan(matrix[:, -6:]).all() and (matrix[-1, :200] == 0.0).all()
    with pytest.raises(ValueError):
        cosine_q8_matrix([queries[0], quantize_vector([1.0, 2.0])], blobs)


def _full_ranking(matrix: Int8Matrix, query, k: int) -> list[tuple[int, float]]:
    """Every row's exact cosine sorted (best first, ties by position): what ``top_k`` must return."""
    scores = matrix.cosines(query)
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
    return [(int(matrix.ids[i]), float(scores[i])) for i in order]


@pytest.mark.parametrize("seed", range(6))
def test_top_k_is_the_full_rankings_head(seed, monkeypatch):
    """The pruned top-k (float32 ranking, exact cosines near the k-th) equals sorting every exact cosine:
    same ids, order, values — with duplicated rows (ties), zero rows, SQ8 and float queries, both dot paths."""
    from memory.engine import quantize

    rng = np.random.default_rng(seed)
    dim = int(rng.choice([8, 64, 512]))
    vectors = rng.standard_normal((3000, dim)).astype(np.float32)
    vectors[rng.integers(0, 3000, 300)] = vectors[rng.integers(0, 3000, 300)]  # exact duplicates: ties
    vectors[rng.integers(0, 3000, 20)] = 0.0
    vectors[100:140] = vectors[7] * 3.0  # same direction, other scale: equal cosines
    matrix = Int8Matrix.from_blobs([(10 + i, quantize_vector(v)) for i, v in enumerate(vectors)])
    queries = [quantize_vector(vectors[7]), quantize_vector(rng.standard_normal(dim)), rng.standard_normal(dim),
               quantize_vector(-vectors[100])]
    for simd in (True, False):
        if not simd:
            monkeypatch.setattr(quantize, "simsimd", None)
        for query in queries:
            for k in (1, 5, 15, 60, 2999, 3000, 4000):
                assert matrix.top_k(query, k) == _full_ranking(matrix, query, k)


def _per_row_matrix(pairs, dimension=None):
    """Int8Matrix.from_blobs as it was: each blob decoded on its own (the reference)."""
    ids, rows, skipped, dim = [], [], [], dimension
    for ident, blob in pairs:
        try:
            d, _s, q = decode_q8(blob) if blob is not None else (None, None, None)
        except ValueError:
            d = None
        if d is not None and dim is None:
            dim = d
        if d is None or d != dim:
            skipped.append(ident)
            continue
        ids.append(ident)
        rows.append(q)
    matrix = np.vstack(rows) if rows else np.zeros((0, dim or 0), dtype=np.int8)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.int64).astype(np.float64)).astype(np.float32)
    return ids, matrix, norms, skipped


@pytest.mark.parametrize("seed", range(4))
def test_from_blobs_checks_all_rows_at_once_as_decode_q8_checks_each(seed) -> None:
    rng = np.random.default_rng(seed)
    good = [quantize_vector(v) for v in rng.standard_normal((200, 16)).astype(np.float32)]
    bad_magic = b"XQ8\x01" + good[0][4:]
    bad_scale = HEADER.pack(MAGIC, 16, float("nan")) + good[1][12:]
    zero_scale = HEADER.pack(MAGIC, 16, 0.0) + good[1][12:]
    minus = good[2][:12] + bytes([0x80]) + good[2][13:]  # a -128 payload byte
    wrong_dim_field = good[3][:4] + (17).to_bytes(4, "little") + good[3][8:]
    other = quantize_vector(rng.standard_normal(8))
    odd = [bad_magic, bad_scale, zero_scale, minus, wrong_dim_field, other, None, b"", b"short"]
    blobs = good + odd * 3
    order = rng.permutation(len(blobs))
    pairs = [(int(1000 + i), blobs[i]) for i in order]
    for dimension in (None, 16, 8, 5):
        built = Int8Matrix.from_blobs(pairs, dimension=dimension)
        ids, matrix, norms, skipped = _per_row_matrix(pairs, dimension)
        assert built.ids.tolist() == ids and list(built.skipped) == skipped
        assert built.matrix.tolist() == matrix.tolist() and built.norms.tolist() == norms.tolist()
        assert built.matrix.dtype == np.int8 and built.matrix.flags["C_CONTIGUOUS"]
