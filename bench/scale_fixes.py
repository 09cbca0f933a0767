"""Before/after of the fixes for what grew with the store (issue 35), in one run each.

``knowledge matrix build`` (the first knowledge search of a process): the matrix from the
stored SQ8 blobs, *before* each blob decoded in Python (and the majority dimension counted so),
*after* all checked at once (``valid_q8_rows``); CPU seconds, the two matrices compared.

``knowledge top-k``: the resident int8 knowledge index's ``top_k`` on matrices of the bench
store's knowledge counts at 1×, 3× and 10× (25,000 / 75,000 / 250,000 × 512, Gaussian vectors
as ``bench.build_db`` writes them). *Before*: every row's exact cosine, then the k best (the
former ``Int8Matrix.top_k``, kept here as the reference); *after*: ``Int8Matrix.top_k``. Both
on the same matrix and the same SQ8 queries, alternating; the ids, order and cosines of the
two are compared for every query (``agreement`` = share of identical lists).

    python -m bench.scale_fixes [--scales 1,3,10] [--calls 60]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import calibration, calibration_text  # noqa: E402
from memory.engine.quantize import Int8Matrix, decode_q8, quantize_vector  # noqa: E402
from memory.search.vector_index import _majority_matrix  # noqa: E402


def full_ranking(matrix: Int8Matrix, query: bytes, k: int) -> list[tuple[int, float]]:
    """Every row's exact cosine, the k best (ties by position): the former ``top_k``."""
    scores = matrix.cosines(query)
    part = np.argpartition(-scores, k - 1)[:k]
    candidates = np.flatnonzero(scores >= scores[part].min())
    order = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
    return [(int(matrix.ids[i]), float(scores[i])) for i in order]


def former_build(pairs: list) -> Int8Matrix:
    """The resident knowledge matrix as it was built: the majority dimension and each row decoded one by one."""
    from collections import Counter

    dims: Counter[int] = Counter()
    for _i, blob in pairs:
        try:
            dims[decode_q8(blob)[0]] += 1
        except ValueError:
            continue
    dim = dims.most_common(1)[0][0] if dims else None
    ids, rows, skipped = [], [], []
    for ident, blob in pairs:
        try:
            d, _s, q = decode_q8(blob)
        except ValueError:
            skipped.append(ident)
            continue
        if d != dim:
            skipped.append(ident)
            continue
        ids.append(ident)
        rows.append(q)
    matrix = np.vstack(rows)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.int64).astype(np.float64)).astype(np.float32)
    return Int8Matrix(np.asarray(ids, dtype=np.int64), matrix, norms, tuple(skipped))


def _p(samples: list[float], q: float) -> float:
    return round(sorted(samples)[min(len(samples) - 1, int(q * len(samples)))], 2)


def knowledge_top_k(scale: float, calls: int, k: int = 15) -> dict:
    n, dim = int(25_000 * scale), 512
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    pairs = [(i + 1, quantize_vector(v)) for i, v in enumerate(vectors)]
    del vectors
    # the build of the resident matrix from the stored blobs (a process's first knowledge search)
    c = time.process_time()
    former = former_build(pairs)
    build_before = time.process_time() - c
    c = time.process_time()
    matrix = _majority_matrix(pairs)
    build_after = time.process_time() - c
    assert former.ids.tolist() == matrix.ids.tolist() and np.array_equal(former.matrix, matrix.matrix)
    assert np.array_equal(former.norms, matrix.norms)
    del pairs, former
    queries = [quantize_vector(rng.standard_normal(dim).astype(np.float32)) for _ in range(calls)]
    before, after, same = [], [], 0
    cpu_before, cpu_after = [], []
    matrix.top_k(queries[0], k), full_ranking(matrix, queries[0], k)  # warm (inverse norms, caches)
    for query in queries:
        t, c = time.perf_counter(), time.process_time()
        ref = full_ranking(matrix, query, k)
        before.append((time.perf_counter() - t) * 1000)
        cpu_before.append((time.process_time() - c) * 1000)
        t, c = time.perf_counter(), time.process_time()
        got = matrix.top_k(query, k)
        after.append((time.perf_counter() - t) * 1000)
        cpu_after.append((time.process_time() - c) * 1000)
        same += got == ref
    return {"rows": n, "k": k, "calls": calls, "agreement": same / calls,
            "build_cpu_s": {"before": round(build_before, 3), "after": round(build_after, 3)},
            "before_ms": {"median": round(statistics.median(before), 2), "p95": _p(before, 0.95),
                          "cpu_median": round(statistics.median(cpu_before), 2), "cpu_p95": _p(cpu_before, 0.95)},
            "after_ms": {"median": round(statistics.median(after), 2), "p95": _p(after, 0.95),
                         "cpu_median": round(statistics.median(cpu_after), 2), "cpu_p95": _p(cpu_after, 0.95)}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,3,10")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "scale_fixes.json")
    args = parser.parse_args(argv)
    cal = {"before": calibration()}
    out: dict = {"command": f"python -m bench.scale_fixes --scales {args.scales} --calls {args.calls}",
                 "knowledge_top_k": {}}
    for scale in [float(s) for s in args.scales.split(",") if s.strip()]:
        row = knowledge_top_k(scale, args.calls)
        out["knowledge_top_k"][f"{scale:g}×"] = row
        b, a = row["before_ms"], row["after_ms"]
        print(f"knowledge top-{row['k']} over {row['rows']:,} int8 rows, p50 / p95 ms wall (CPU): before "
              f"{b['median']} / {b['p95']} ({b['cpu_median']} / {b['cpu_p95']}), after {a['median']} / {a['p95']} "
              f"({a['cpu_median']} / {a['cpu_p95']}); identical lists {row['agreement']:.0%}; matrix built from the "
              f"blobs in {row['build_cpu_s']['before']} s CPU before, {row['build_cpu_s']['after']} s after", flush=True)
    cal["after"] = calibration()
    out["calibration"] = cal
    print(calibration_text(cal))
    args.output.write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
