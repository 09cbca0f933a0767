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

``spread node joins``: ``selectors.spread`` (2 hops, 4 hits, as ``bench.run`` calls it) on the
scale stores ``make bench-scale`` keeps (``bench/.cache``; a scale whose store is missing is
skipped) and on their PostgreSQL copies. *Before*: the node reads as they were — a memory node
joined to its row by ``n.ref_kind = 'fact' AND f.id = n.ref_id`` (and so for episodes and
knowledge), the texts of every node met read with its retention; *after*: the current reads
(``graph._NODE_JOINS``, texts of the hits alone), swapped in the same process. Both run on the
current schema (on PostgreSQL the node and edge reads of migration 0034 are index-only in both
arms: that migration's own before/after is in its docstring). The two alternate call by
call, each on its own random seeds (a seed one arm read is not cached for the other); then on
PostgreSQL both run once more over the same seeds to count the pages they touch
(``pg_statio_user_tables``: heap and index blocks, hit or read) and compare their hits.

    python -m bench.scale_fixes [--scales 1,3,10] [--calls 60] [--parts knowledge,spread]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
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


#: How a memory node was joined to its row before: the other two tables were looked up too, then filtered.
FORMER_NODE_JOINS = (
    " LEFT JOIN facts f ON n.ref_kind = 'fact' AND f.id = n.ref_id"
    " LEFT JOIN episodes e ON n.ref_kind = 'episode' AND e.id = n.ref_id"
    " LEFT JOIN knowledge k ON n.ref_kind = 'knowledge' AND k.id = n.ref_id"
)
FORMER_NODE_COLUMNS = "n.id, n.ref_kind, n.ref_id, f.strength, f.updated_at, f.half_life_hours, f.active, e.id, k.id," \
                      " f.content, e.summary, k.content"


def _former_rows(graph):
    """``graph._SpreadRows`` as it read before: every node met with its text."""

    from memory.backends import in_placeholders

    class FormerRows(graph._SpreadRows):
        def _keep(self, row: tuple) -> None:
            super()._keep(row[:10])
            node, kind, ref, *_rest, fact_text, summary, content = row
            self.texts[node] = (kind, ref, fact_text or summary or content or "")

        def seeds(self, seeds):
            by_kind: dict[str, set[int]] = {}
            for kind, ref, _rel in seeds:
                by_kind.setdefault(kind, set()).add(int(ref))
            where = " OR ".join(f"(n.ref_kind = %s AND n.ref_id IN ({in_placeholders(ids)}))" for ids in by_kind.values())
            params = [p for kind, ids in by_kind.items() for p in (kind, *ids)]
            from django.db import connection

            with connection.cursor() as cur:
                cur.execute(f"SELECT {graph._NODE_COLUMNS} FROM memory_nodes n{graph._NODE_JOINS} WHERE {where} ORDER BY n.id",
                            params)
                rows = cur.fetchall()
            for row in rows:
                self._keep(row)
            return {(kind, ref): node for node, kind, ref, *_rest in rows}

    return FormerRows


_STATIO = ("SELECT relname, heap_blks_read + heap_blks_hit, coalesce(idx_blks_read, 0) + coalesce(idx_blks_hit, 0)"
           " FROM pg_statio_user_tables")


def _statio() -> dict[str, tuple[int, int]]:
    """This database's heap and index blocks touched per table, this backend's counts flushed first."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.2)  # flushed when the backend next goes idle
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(_STATIO)
        return {name: (heap, index) for name, heap, index in cur.fetchall()}


def spread_arms(target: str, counts: dict, calls: int) -> dict:
    """Both joins' spreads on one store (a process of its own: Django is set up on ``target``)."""
    from bench import backends, run

    run.setup_django(target)
    from memory import selectors
    from memory.selectors import graph

    current = (graph._NODE_JOINS, graph._NODE_COLUMNS, graph._SpreadRows)
    joins = {"before": (FORMER_NODE_JOINS, FORMER_NODE_COLUMNS, _former_rows(graph)), "after": current}

    def seeds(rng: random.Random) -> list:
        return [("fact", rng.randrange(1, counts["facts"]), 1.0), ("knowledge", rng.randrange(1, counts["knowledge"]), 0.8)]

    def spread(arm: str, seed: list):
        graph._NODE_JOINS, graph._NODE_COLUMNS, graph._SpreadRows = joins[arm]
        try:
            return selectors.spread(seeds=seed, now=counts["now"], hops=2, limit=4, events=False)
        finally:
            graph._NODE_JOINS, graph._NODE_COLUMNS, graph._SpreadRows = current

    rngs = {"before": random.Random(11), "after": random.Random(12)}
    graph.resident_node_texts()  # read once for both (a spread whose seeds hold no concept reads neither)
    for arm in joins:
        spread(arm, seeds(random.Random(3)))
    wall: dict[str, list[float]] = {arm: [] for arm in joins}
    for i in range(2 * calls):
        arm = ("before", "after")[i % 2]
        seed = seeds(rngs[arm])
        t = time.perf_counter()
        spread(arm, seed)
        wall[arm].append((time.perf_counter() - t) * 1000)
    out: dict = {arm: {"median": round(statistics.median(v), 2), "p95": _p(v, 0.95)} for arm, v in wall.items()}
    shared = [seeds(random.Random(100 + i)) for i in range(min(calls, 100))]
    hits = {arm: [[(h.node_id, h.content, round(h.score, 12)) for h in spread(arm, seed).hits] for seed in shared]
            for arm in joins}
    out["agreement"] = sum(a == b for a, b in zip(hits["before"], hits["after"], strict=True)) / len(shared)
    if backends.is_pg(target):
        for arm in joins:
            first = _statio()
            for seed in shared:
                spread(arm, seed)
            last = _statio()
            tables = ("memory_nodes", "memory_edges", "facts", "episodes", "knowledge")
            out[arm]["heap_blocks"] = round(sum(last[t][0] - first[t][0] for t in tables) / len(shared), 1)
            out[arm]["index_blocks"] = round(sum(last[t][1] - first[t][1] for t in tables) / len(shared), 1)
    return out


def spread_node_joins(scale: float, calls: int) -> dict:
    """:func:`spread_arms` on the kept store of ``scale`` and its PostgreSQL copy (each one present)."""
    from bench import scale as scale_bench

    store = scale_bench.store_path(ROOT / "bench" / ".cache", scale)
    meta, copy = store.with_suffix(".json"), store.with_suffix(".postgresql.json")
    if not (store.exists() and meta.exists()):
        return {"skipped": f"no store at {store.name} (make bench-scale builds it)"}
    counts = json.loads(meta.read_text())
    targets = {"sqlite": str(store)}
    if copy.exists():
        targets["postgresql"] = json.loads(copy.read_text())["url"]
    code = ("import json, sys; from bench.scale_fixes import spread_arms;"
            "print('@@' + json.dumps(spread_arms(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]))))")
    out = {}
    for backend, target in targets.items():
        done = subprocess.run([sys.executable, "-c", code, target, json.dumps(counts), str(calls)], cwd=ROOT,
                              check=True, capture_output=True, text=True)
        out[backend] = json.loads([x for x in done.stdout.splitlines() if x.startswith("@@")][-1][2:])
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,3,10")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--parts", default="knowledge,spread")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "scale_fixes.json")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",")}
    cal = {"before": calibration()}
    out: dict = {"command": f"python -m bench.scale_fixes --scales {args.scales} --calls {args.calls} --parts {args.parts}",
                 "knowledge_top_k": {}, "spread_node_joins": {}}
    scales = [float(s) for s in args.scales.split(",") if s.strip()]
    for scale in scales if "spread" in parts else []:
        row = out["spread_node_joins"][f"{scale:g}×"] = spread_node_joins(scale, args.calls)
        for backend, r in row.items():
            if backend == "skipped":
                print(f"spread node joins {scale:g}×: skipped, {r}", flush=True)
                continue
            pages = "".join(f"; {arm} {r[arm]['heap_blocks']} heap + {r[arm]['index_blocks']} index blocks a spread"
                            for arm in ("before", "after") if "heap_blocks" in r[arm])
            print(f"spread (2 hops) {scale:g}× {backend}, p50 / p95 ms: before {r['before']['median']} / "
                  f"{r['before']['p95']}, after {r['after']['median']} / {r['after']['p95']}; same hits "
                  f"{r['agreement']:.0%}{pages}", flush=True)
    for scale in scales if "knowledge" in parts else []:
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
