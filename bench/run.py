"""Speed benchmarks (``make bench``): read paths at scale, and baselines side by side.

Builds (or reuses) the scale database of ``bench.build_db`` and a 10 % one, then
reports median and p95 of every read path, the cost of the write sweeps, the
FTS5 term-pruning agreement, and side-by-side baselines measured in the same
run: FTS5 pruned / unpruned / bm25s, the resident int8 knowledge index / a numpy
float32 matrix / the memory-read floor, our PPR / networkx. Results go to
``bench/results/speed.json`` and the speed section of ``BENCHMARKS.md``.

    python -m bench.run [--quick] [--rebuild]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"
RESULTS = ROOT / "bench" / "results"

QUESTIONS = [
    "你还记得我喜欢吃什么吗", "我住在哪个城市来着", "周末一起去爬山吗", "我养的猫叫什么名字", "最近工作好累啊",
    "下周要去上海出差", "我的生日是几月几号", "你觉得火锅和烧烤哪个好吃", "我是做什么工作的", "昨天的考试考砸了",
    "晚上一起看电影吧", "我不喜欢香菜你记得吗", "最近迷上了弹吉他", "我们聊过旅行的事吗", "有什么好玩的游戏推荐",
    "月球和地球有什么关系", "长城是什么时候修的", "光合作用需要什么", "熊猫喜欢吃什么", "二十四节气是怎么来的",
]


def _real_questions(n: int = 40) -> list[str]:
    """A fixed sample of MemDaily's Chinese questions (real user wording), when the data is there."""
    try:
        from bench.common import data_dir

        questions = sorted({q["question"] for path in sorted((data_dir() / "memdaily").glob("*.json"))
                            for t in json.loads(path.read_text()) for q in t["question_list"]})
    except (OSError, ValueError, KeyError):
        return []
    return random.Random(17).sample(questions, min(n, len(questions)))


QUESTIONS = QUESTIONS + _real_questions()


def timed(fn: Callable[[], object], n: int) -> dict[str, float]:
    fn()  # warm-up
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 3),
        "p95_ms": round(samples[min(len(samples) - 1, int(0.95 * len(samples)))], 3),
        "n": n,
    }


def schema_signature() -> str:
    """Names of every migration: a cached database built before a new one is rebuilt."""
    return ",".join(sorted(p.name for p in ROOT.glob("*/migrations/0*.py")))


def ensure_db(path: Path, scale: float, rebuild: bool) -> dict:
    meta = path.with_suffix(".json")
    stale = not meta.exists() or json.loads(meta.read_text()).get("schema") != schema_signature()
    if rebuild or not path.exists() or stale:
        out = subprocess.run(
            [sys.executable, "-m", "bench.build_db", "--out", str(path), "--scale", str(scale)],
            cwd=ROOT, check=True, capture_output=True, text=True,
        )
        counts = eval(out.stdout.strip().splitlines()[-1])  # the builder prints a dict literal
        counts["schema"] = schema_signature()
        meta.write_text(json.dumps(counts))
    return json.loads(meta.read_text())


def setup_django(db: Path) -> None:
    os.environ["MEMORY_DB"] = str(db)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["MEMORY_ENQUEUE_TASKS"] = "False"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def read_paths(counts: dict, n: int) -> dict:
    from memory import lexical, selectors
    from memory.models import Stream

    rng = random.Random(11)
    now = counts["now"]
    persons = list(range(2, counts["persons"] + 2))
    streams = list(Stream.objects.exclude(pk=1).values_list("id", "kind"))
    qi = iter(range(10**9))

    def q() -> str:
        return QUESTIONS[next(qi) % len(QUESTIONS)]

    out: dict[str, dict] = {}
    out["recall_facts_in_scope (5 persons)"] = timed(
        lambda: selectors.recall_facts_in_scope(
            person_ids=rng.sample(persons, 5), query=q(), limit=6, now=now, stream_kind="direct",
            return_candidates=True, overrides={}, events=False,
        ), n)
    out["recall_episodes"] = timed(lambda: selectors.recall_episodes(stream_id=rng.choice(streams)[0], query=q(), limit=3), n)
    out["search_knowledge (lexical)"] = timed(lambda: selectors.search_knowledge(query=q(), limit=5), n)
    vec_rng = np.random.default_rng(3)

    def qvec() -> np.ndarray:
        v = vec_rng.standard_normal(512).astype(np.float32)
        return v / np.linalg.norm(v)

    selectors.search_knowledge(query="月球", limit=5, query_embedding=qvec())  # builds the resident index once
    out["search_knowledge (lexical + vector)"] = timed(
        lambda: selectors.search_knowledge(query=q(), limit=5, query_embedding=qvec()), n)
    out["dense_fact_candidates (5 persons)"] = timed(
        lambda: selectors.dense_fact_candidates(person_ids=rng.sample(persons, 5), query_vector=qvec(), limit=6, now=now, stream_kind="direct", overrides={}), n)
    out["spread (hops 2)"] = timed(
        lambda: selectors.spread(seeds=[("fact", rng.randrange(1, counts["facts"]), 1.0), ("knowledge", rng.randrange(1, counts["knowledge"]), 0.8)],
                                 now=now, hops=2, limit=4, events=False), n)
    out["search_messages (inspect)"] = timed(
        lambda: selectors.search_messages(stream_id=rng.choice(streams)[0], query=q(), limit=6), n)
    # pruning agreement: top-10 of pruned vs unpruned bm25, per index, global queries
    def agreement_for(table: str, search: Callable[[str], list[int]]) -> dict:
        agree, pruned_t, unpruned_t = [], [], []
        for text in QUESTIONS * 3:
            t = time.perf_counter()
            a = search(lexical.match_for(table, text))
            pruned_t.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            b = search(lexical.match_for(table, text, prune=False))
            unpruned_t.append((time.perf_counter() - t) * 1000)
            if b:
                agree.append(len(set(a) & set(b)) / len(b))
        return {
            "top10_agreement": round(statistics.mean(agree), 4) if agree else None,
            "pruned_median_ms": round(statistics.median(pruned_t), 3),
            "unpruned_median_ms": round(statistics.median(unpruned_t), 3),
            "unpruned_p95_ms": round(sorted(unpruned_t)[int(0.95 * len(unpruned_t))], 3),
            "speedup": round(statistics.median(unpruned_t) / max(1e-9, statistics.median(pruned_t)), 1),
        }

    out["fts_pruning"] = agreement_for(
        "facts_fts", lambda m: [r[0] for r in lexical.fact_candidates(m, person_ids=None, limit=10)])
    out["fts_pruning_knowledge"] = agreement_for(
        "knowledge_fts", lambda m: [r[0] for r in lexical.knowledge_candidates(m, limit=10)])
    out["fts_pruning_cues"] = agreement_for(
        "cues_fts", lambda m: [r[1] for r in lexical.cue_candidates(m, stream_id=None, limit=10)])
    return out


def write_paths(counts: dict) -> dict:
    from django.db import connection

    from memory import services

    now = counts["now"]
    out: dict[str, dict] = {}
    with connection.cursor() as cur:
        # exactly 1 % of the facts due (this runs on a copy of the scale database)
        cur.execute("UPDATE facts SET due_at = %s WHERE id %% 100 <> 0", [now + 24 * 3_600_000])
        cur.execute("UPDATE facts SET due_at = %s, active = 1 WHERE id %% 100 = 0", [now - 1000])
        cur.execute("SELECT count(*) FROM facts WHERE active = 1 AND due_at <= %s", [now])
        due = cur.fetchone()[0]
    t = time.perf_counter()
    frozen = services.sweep(at=now)
    out["sweep (1 % due)"] = {"ms": round((time.perf_counter() - t) * 1000, 2), "due": due, "frozen": frozen}
    t = time.perf_counter()
    frozen_edges = services.decay_edges(at=now + 60 * 24 * 3_600_000)
    out["decay_edges (all edges)"] = {"ms": round((time.perf_counter() - t) * 1000, 2), "frozen": frozen_edges,
                                      "edges": counts["edges"]}
    rng = random.Random(5)
    n = 300
    t = time.perf_counter()
    for i in range(n):
        services.add_fact(person_id=rng.randrange(2, counts["persons"] + 2), content=f"测试事实{i}号喜欢{rng.choice(['跑步', '火锅', '摄影'])}",
                          kind="偏好", origin_kind="direct", at=now + i)
    elapsed = time.perf_counter() - t
    out["add_fact"] = {"per_second": round(n / elapsed, 1), "n": n}
    return out


def lexical_side_by_side(counts: dict, n: int) -> dict:
    """FTS5 (pruned, unpruned) vs bm25s over the same fact tokens."""
    import bm25s

    from memory import lexical
    from memory.engine.tokenize import index_tokens, query_terms
    from memory.models import Fact

    rows = list(Fact.objects.values_list("id", "content"))
    ids = [r[0] for r in rows]
    corpus = [index_tokens(c).split() for _, c in rows]
    t = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    index_s = time.perf_counter() - t
    qi = iter(range(10**9))

    def bm25s_query() -> list[int]:
        terms = [query_terms(QUESTIONS[next(qi) % len(QUESTIONS)])]
        docs, _scores = retriever.retrieve(terms, k=10, show_progress=False, n_threads=1)
        return [ids[d] for d in docs[0]]

    def fts(prune: bool) -> Callable[[], object]:
        return lambda: lexical.fact_candidates(
            lexical.match_for("facts_fts", QUESTIONS[next(qi) % len(QUESTIONS)], prune=prune), person_ids=None, limit=10)

    return {
        "rows": len(rows),
        "fts5_pruned": timed(fts(True), n),
        "fts5_unpruned": timed(fts(False), n),
        "bm25s": timed(bm25s_query, n),
        "bm25s_index_seconds": round(index_s, 2),
    }


def vectors_side_by_side(n: int) -> dict:
    from memory.vector_index import knowledge_index

    index = knowledge_index()
    matrix = index._fresh()  # the resident int8 matrix
    floats = matrix.matrix.astype(np.float32)
    rng = np.random.default_rng(9)

    def q() -> np.ndarray:
        v = rng.standard_normal(matrix.dimension).astype(np.float32)
        return v / np.linalg.norm(v)

    def numpy_float() -> object:
        scores = floats @ q()
        return np.argpartition(-scores, 15)[:15]

    words = matrix.matrix.view(np.uint64).ravel()
    return {
        "rows": len(matrix), "dim": matrix.dimension,
        "int8_index_top15": timed(lambda: index.top_k(q(), 15), n),
        "numpy_float32_matmul_top15": timed(numpy_float, n),
        "memory_read_floor_int8": timed(lambda: np.bitwise_xor.reduce(words), n),
        "memory_read_floor_float32": timed(lambda: np.bitwise_xor.reduce(floats.view(np.uint64).ravel()), n),
    }


def ppr_side_by_side(n: int) -> dict:
    import networkx as nx

    from memory.engine.pagerank import personalized_pagerank

    out = {}
    for size in (2_000, 20_000):
        rng = random.Random(size)
        adjacency: dict[int, dict[int, float]] = {}
        for _ in range(size * 3):
            a, b = rng.randrange(size), rng.randrange(size)
            if a == b:
                continue
            w = rng.choice([0.35, 0.5775, 0.725375])
            adjacency.setdefault(a, {})[b] = w
            adjacency.setdefault(b, {})[a] = w
        seeds = {rng.randrange(size): 1.0 for _ in range(3)}
        graph = nx.DiGraph()
        for a, nbrs in adjacency.items():
            for b, w in nbrs.items():
                graph.add_edge(a, b, weight=w)
        ours = timed(lambda a=adjacency, s=seeds: personalized_pagerank(a, s, timeout_seconds=60.0), max(3, n // 10))
        theirs = timed(
            lambda g=graph, s=seeds: nx.pagerank(g, alpha=0.85, personalization=s, tol=1e-9, max_iter=100), max(3, n // 10)
        )
        r1 = personalized_pagerank(adjacency, seeds, timeout_seconds=60.0)
        r2 = nx.pagerank(graph, alpha=0.85, personalization=seeds, tol=1e-9, max_iter=100)
        top1 = sorted(r1, key=lambda k: -r1[k])[:10]
        top2 = sorted(r2, key=lambda k: -r2[k])[:10]
        out[f"{size} nodes / {sum(len(v) for v in adjacency.values())} arcs"] = {
            "ours": ours, "networkx": theirs, "top10_agreement": len(set(top1) & set(top2)) / 10,
            "max_abs_diff": max(abs(r1.get(k, 0.0) - r2.get(k, 0.0)) for k in set(r1) | set(r2)),
        }
    return out


def run_in_subprocess(db: Path, counts: dict, n: int, part: str) -> dict:
    """Each database is measured in a fresh process (Django binds to one DB per process)."""
    code = (
        "import json,sys; from bench import run as r; r.setup_django(__import__('pathlib').Path(sys.argv[1]));"
        "print('@@'+json.dumps(r.part(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]))))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(db), part, json.dumps(counts), str(n)],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("@@")][-1]
    return json.loads(line[2:])


def part(name: str, counts: dict, n: int) -> dict:
    if name == "read":
        return read_paths(counts, n)
    if name == "write":
        return write_paths(counts)
    if name == "lexical":
        return lexical_side_by_side(counts, n)
    if name == "vectors":
        return vectors_side_by_side(n)
    raise ValueError(name)


def render(results: dict) -> str:
    lines = ["<!-- speed:start -->", "## Speed (`make bench`)", "",
             f"Measured {results['when']} on this machine ({os.cpu_count()} cores); "
             "scale database: " + ", ".join(f"{v:,} {k}" for k, v in results["scale"].items() if isinstance(v, int) and k not in ("now", "schema")) + ".",
             "", "### Read paths at scale (target p95 ≤ 10 ms)", "", "| path | median ms | p95 ms |", "| --- | ---: | ---: |"]
    for name, r in results["read"].items():
        if "median_ms" in r:
            lines.append(f"| {name} | {r['median_ms']} | {r['p95_ms']} |")
    lines += ["", f"FTS5 query-term pruning, global queries ({3 * len(QUESTIONS)} runs of {len(QUESTIONS)} questions, 20 written here and 40 from MemDaily), target top-10 agreement ≥ 0.95:", "",
              "| index | top-10 agreement | pruned median ms | unpruned median / p95 ms | speed-up |", "| --- | ---: | ---: | ---: | ---: |"]
    for key, label in (("fts_pruning", "facts"), ("fts_pruning_knowledge", "knowledge"), ("fts_pruning_cues", "episode cues")):
        pr = results["read"][key]
        lines.append(f"| {label} | {pr['top10_agreement']} | {pr['pruned_median_ms']} | {pr['unpruned_median_ms']} / "
                     f"{pr['unpruned_p95_ms']} | ×{pr['speedup']} |")
    lines += ["", "The turn path does not prune: the fact index's `person` column and the cue index's `stream` "
              "column let FTS5 rank only the present persons' facts and the stream's cues, so their candidates "
              "are those of unpruned bm25. Pruning applies to queries over every person (console search, "
              "cross-person recall), over all streams' cues, and to knowledge.",
              "", "### Writes and sweeps", ""]
    for name, r in results["write"].items():
        lines.append(f"- {name}: " + ", ".join(f"{k} {v}" for k, v in r.items()))
    lines += ["", "### Side by side (same run, two sizes)", "", "| lexical search over facts | rows | FTS5 pruned p50/p95 | FTS5 unpruned p50/p95 | bm25s p50/p95 |", "| --- | ---: | --- | --- | --- |"]
    for size, r in results["lexical"].items():
        lines.append(f"| {size} | {r['rows']} | {r['fts5_pruned']['median_ms']} / {r['fts5_pruned']['p95_ms']} | "
                     f"{r['fts5_unpruned']['median_ms']} / {r['fts5_unpruned']['p95_ms']} | {r['bm25s']['median_ms']} / {r['bm25s']['p95_ms']} |")
    lines += ["", "| knowledge vectors | rows × dim | int8 index top-15 p50 | numpy float32 matmul p50 | read floor int8 p50 | ratio index / floor |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for size, r in results["vectors"].items():
        ratio = r["int8_index_top15"]["median_ms"] / max(1e-9, r["memory_read_floor_float32"]["median_ms"])
        lines.append(f"| {size} | {r['rows']} × {r['dim']} | {r['int8_index_top15']['median_ms']} | "
                     f"{r['numpy_float32_matmul_top15']['median_ms']} | {r['memory_read_floor_int8']['median_ms']} | "
                     f"{ratio:.2f} (vs float32 read {r['memory_read_floor_float32']['median_ms']} ms) |")
    lines += ["", "| personalised PageRank | ours p50 ms | networkx p50 ms | top-10 agreement | max abs diff |", "| --- | ---: | ---: | ---: | ---: |"]
    for size, r in results["ppr"].items():
        lines.append(f"| {size} | {r['ours']['median_ms']} | {r['networkx']['median_ms']} | {r['top10_agreement']} | {r['max_abs_diff']:.2e} |")
    lines += ["", "<!-- speed:end -->"]
    return "\n".join(lines)


def write_markdown(section: str) -> None:
    from bench.common import BENCHMARKS_MD, replace_section

    body = section.removeprefix("<!-- speed:start -->").removesuffix("<!-- speed:end -->").strip("\n")
    replace_section(BENCHMARKS_MD, "<!-- speed:start -->", "<!-- speed:end -->", body, title="Benchmarks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the scale databases")
    args = parser.parse_args()
    n = 40 if args.quick else 200
    CACHE.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    big = CACHE / "scale.sqlite3"
    small = CACHE / "scale-0.1.sqlite3"
    counts = ensure_db(big, 1.0, args.rebuild)
    small_counts = ensure_db(small, 0.1, args.rebuild)
    results: dict = {"when": time.strftime("%Y-%m-%d %H:%M"), "scale": counts}
    results["read"] = run_in_subprocess(big, counts, n, "read")
    with tempfile.TemporaryDirectory() as tmp:  # writes run on a copy so the cached DB stays as built
        copy = Path(tmp) / "write.sqlite3"
        shutil.copy(big, copy)
        results["write"] = run_in_subprocess(copy, counts, n, "write")
    results["lexical"] = {
        "10 %": run_in_subprocess(small, small_counts, n, "lexical"),
        "100 %": run_in_subprocess(big, counts, n, "lexical"),
    }
    results["vectors"] = {
        "10 %": run_in_subprocess(small, small_counts, n, "vectors"),
        "100 %": run_in_subprocess(big, counts, n, "vectors"),
    }
    results["ppr"] = ppr_side_by_side(n)
    (RESULTS / "speed.json").write_text(json.dumps(results, ensure_ascii=False, indent=2))
    section = render(results)
    write_markdown(section)
    print(section)


if __name__ == "__main__":
    main()
