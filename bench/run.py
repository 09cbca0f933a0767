"""Speed benchmarks (``make bench``): read paths at scale, and baselines side by side.

Builds (or reuses) the scale database of ``bench.build_db`` and a 10 % one, then
reports median and p95 of every read path, the cost of the write sweeps, the
top-10 agreement of whole-table lexical queries with unpruned FTS5, and side-by-side baselines measured in the same
run: our resident BM25 / FTS5 pruned / unpruned / bm25s, the resident int8 knowledge index / a numpy
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
    """Wall-clock median / p95 of ``n`` calls after one warm-up, and the same of the process's CPU time
    (on a shared machine the wall clock also counts the time spent waiting for a core)."""
    fn()  # warm-up
    samples, cpu = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    samples.sort()
    cpu.sort()
    at95 = min(len(samples) - 1, int(0.95 * len(samples)))
    return {
        "median_ms": round(statistics.median(samples), 3),
        "p95_ms": round(samples[at95], 3),
        "cpu_median_ms": round(statistics.median(cpu), 3),
        "cpu_p95_ms": round(cpu[at95], 3),
        "n": n,
    }


def schema_signature() -> str:
    """Names of every migration and a digest of the builder: a cached database built before a
    new migration or by another version of ``bench/build_db.py`` is rebuilt."""
    import hashlib

    builder = hashlib.sha256((ROOT / "bench" / "build_db.py").read_bytes()).hexdigest()[:12]
    return ",".join(sorted(p.name for p in ROOT.glob("*/migrations/0*.py"))) + f";build_db={builder}"


def ensure_db(path: Path, scale: float, rebuild: bool) -> dict:
    meta = path.with_suffix(".json")
    stale = not meta.exists() or json.loads(meta.read_text()).get("schema") != schema_signature()
    if rebuild or not path.exists() or stale:
        # the signature of the code that builds: a checkout that moves during a long build (a new
        # migration, another builder) must not be recorded as what built the store
        signature = schema_signature()
        out = subprocess.run(
            [sys.executable, "-m", "bench.build_db", "--out", str(path), "--scale", str(scale)],
            cwd=ROOT, check=True, capture_output=True, text=True,
        )
        counts = eval(out.stdout.strip().splitlines()[-1])  # the builder prints a dict literal
        counts["schema"] = signature
        meta.write_text(json.dumps(counts))
    return json.loads(meta.read_text())


def setup_django(db: Path | str) -> None:
    """Django on the SQLite file ``db``, or on PostgreSQL when ``db`` is a ``postgres://`` URL (bench/backends.py)."""
    from bench import backends, common

    os.environ.update(backends.env_for(db))
    os.environ.pop("MEMORY_DB" if backends.is_pg(db) else "DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["MEMORY_ENQUEUE_TASKS"] = "False"
    os.environ["REDIS_URL"] = common.BENCH_REDIS_URL  # what the read paths light stays out of a deployment's db 0
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def read_paths(counts: dict, n: int, agreement: bool = True) -> dict:
    from memory import selectors
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
    out["recall_facts_across_persons"] = timed(
        lambda: selectors.recall_facts_across_persons(query=q(), limit=5, now=now, stream_kind="direct"), n)
    out["recall_episodes (every stream)"] = timed(lambda: selectors.recall_episodes(stream_id=None, query=q(), limit=3), n)
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
    for sid, _ in streams:  # each stream's message postings resident (the first search of one: below)
        selectors.search_messages(stream_id=sid, query="你好", limit=6)
    out["search_messages (inspect)"] = timed(
        lambda: selectors.search_messages(stream_id=rng.choice(streams)[0], query=q(), limit=6), n)
    out.update(conversation_paths(counts, n, streams, q, qvec))
    if agreement:  # resident rankings against FTS5's (what bench.scale leaves out)
        out.update(whole_table_agreement())
        out.update(scoped_agreement(counts, streams))
    return out


def conversation_paths(counts: dict, n: int, streams: list, q: Callable[[], str], qvec: Callable[[], np.ndarray]) -> dict:
    """The costs the conversation adds, as a bot lives them on the scale database.

    Every stream holds ~1,000 messages with vectors. A turn is prepared on a question after
    the stream's last messages (``prepare_turn(record=False)``, the playground's read-only
    path: present persons, the recent user lines as lexical queries of their own, IDF
    coverage, episodes, working memory) and its confirm ranking is computed with the
    turn's vector plus the last 6 messages' vectors (``recall.conversation_query`` →
    ``recall.rank_pool``: dense candidates, weighted-max cosines, the engine's rank).
    inspect runs fused (bm25 + message vectors) on the same ~1,000-message streams, once
    with the stream's postings resident and once as the first search of a stream in the
    process (postings built from the covering index).
    """
    from memory import recall, selectors
    from memory.search import lexical_index

    rng = random.Random(13)
    now = counts["now"]
    speaker_of = {sid: selectors.recent_speakers(stream_id=sid, before_id=10**12)[0] for sid, _ in streams}

    def prepare() -> recall.TurnContext:
        sid = rng.choice(streams)[0]
        return recall.prepare_turn(stream_id=sid, speaker_id=speaker_of[sid], text=q(), at=now, record=False)

    out = {"turn prepare, read-only (prepare_turn record=False, with its conversation)": timed(prepare, n)}
    prepared = [prepare() for _ in range(40)]
    lines = [len(recall.conversation_lines(c.context, c.overrides)) for c in prepared]
    vectors = [len(recall.conversation_query(qvec(), c.context, c.overrides).weights) - 1 for c in prepared]
    picks = iter(range(10**9))

    def confirm_ranking() -> object:
        ctx = prepared[next(picks) % len(prepared)]
        query = recall.conversation_query(qvec(), ctx.context, ctx.overrides)
        return recall.rank_pool(pool=ctx.pool, query_vector=query, person_ids=ctx.present_person_ids, text=q(),
                                stream_kind=ctx.stream.kind, now=now, limit=6, overrides=ctx.overrides, shown=ctx.shown)

    out["turn confirm ranking (rank_pool, turn + context vectors)"] = timed(confirm_ranking, n)
    out["turn confirm ranking (rank_pool, turn + context vectors)"].update(
        mean_context_user_lines=round(statistics.mean(lines), 2), mean_context_vectors=round(statistics.mean(vectors), 2))
    for sid, _ in streams:  # every stream's postings resident, as on a process that has served them
        selectors.search_messages(stream_id=sid, query="你好", limit=6, query_vector=qvec())
    out["search_messages (inspect, bm25 + vectors)"] = timed(
        lambda: selectors.search_messages(stream_id=rng.choice(streams)[0], query=q(), limit=6, query_vector=qvec()), n)
    messages = lexical_index.resident_messages()

    def first_search() -> object:
        sid, query, vec = rng.choice(streams)[0], q(), qvec()
        messages._streams.pop(sid, None)  # the first search of this stream in the process
        return selectors.search_messages(stream_id=sid, query=query, limit=6, query_vector=vec)

    out["search_messages (inspect, bm25 + vectors, first search of the stream)"] = timed(first_search, n)
    lexical_index.reset_all()
    t = time.perf_counter()
    lexical_index.resident_messages()
    out["message statistics load (once per process; edits and deletes are applied, not reloaded)"] = {
        "seconds": round(time.perf_counter() - t, 3), "messages": counts.get("messages")}
    return out


def scoped_agreement(counts: dict, streams: list) -> dict:
    """The scoped lexical queries of a turn and of inspect — resident vs FTS5, same run, same questions:
    rankings compared in full (ids, order and bm25) and timed."""
    from django.test import override_settings

    from memory.search import lexical

    rng = random.Random(21)
    persons = list(range(2, counts["persons"] + 2))
    cases = []
    for text in QUESTIONS * 3:
        cases.append(("facts of 6 persons", "facts_fts", text, rng.sample(persons, 6)))
        cases.append(("one stream's cues", "cues_fts", text, rng.choice(streams)[0]))
        cases.append(("one stream's messages", "messages_fts", text, rng.choice(streams)[0]))

    def call(table: str, text: str, scope) -> list[tuple]:
        match = lexical.match_for(table, text)
        if table == "facts_fts":
            return [r[:2] for r in lexical.fact_candidates(match, person_ids=scope, limit=18)]
        if table == "cues_fts":
            return [r[1:] for r in lexical.cue_candidates(match, stream_id=scope, limit=12)]
        return lexical.message_candidates(match, stream_id=scope, limit=30)

    out: dict[str, dict] = {}
    for sid, _ in streams:  # every stream's message postings resident (the first search of one: above)
        call("messages_fts", "你好", sid)
    for label in dict.fromkeys(c[0] for c in cases):
        mine = [c for c in cases if c[0] == label]
        for _, table, text, scope in mine[:5]:  # warm both paths (resident arrays, page cache)
            call(table, text, scope)
        same, ours, fts = 0, [], []
        for _, table, text, scope in mine:
            t = time.perf_counter()
            got = call(table, text, scope)
            ours.append((time.perf_counter() - t) * 1000)
            with override_settings(LEXICAL_RESIDENT_INDEX=False):
                t = time.perf_counter()
                want = call(table, text, scope)
                fts.append((time.perf_counter() - t) * 1000)
            same += [tuple(r) for r in got] == [tuple(r) for r in want]
        ours.sort()
        fts.sort()
        out[f"scoped:{label}"] = {
            "runs": len(mine), "identical_rankings": same,
            "resident": {"median_ms": round(statistics.median(ours), 3), "p95_ms": round(ours[int(0.95 * len(ours))], 3)},
            "fts5": {"median_ms": round(statistics.median(fts), 3), "p95_ms": round(fts[int(0.95 * len(fts))], 3)},
        }
    return out


def _whole_table_ids(table: str, match: str) -> list[int]:
    """Top-10 row ids of a whole-table query through the product's own function."""
    from memory.search import lexical

    if table == "facts_fts":
        return [r[0] for r in lexical.fact_candidates(match, person_ids=None, limit=10, include_invalid=True)]
    if table == "cues_fts":
        return [r[1] for r in lexical.cue_candidates(match, stream_id=None, limit=10)]
    return [r[0] for r in lexical.knowledge_candidates(match, limit=10)]


PRUNE_RATIOS = (0.1, 0.01)


def whole_table_agreement() -> dict:
    """Resident index and FTS5 pruning vs unpruned FTS5 bm25: top-10 agreement and time, per table."""
    from django.test import override_settings

    from memory.search import lexical, lexical_index

    out = {}
    for table, label in (("facts_fts", "facts"), ("knowledge_fts", "knowledge"), ("cues_fts", "episode cues")):
        lexical_index.resident(table).reset()  # time a full build from the rows
        t = time.perf_counter()
        lexical_index.resident(table)
        build_s = time.perf_counter() - t
        texts = QUESTIONS * 3
        reference, unpruned_t = [], []
        for text in texts:
            match = lexical.match_for(table, text)
            t = time.perf_counter()
            reference.append([i for i, _ in lexical.unpruned_top(table, match, limit=10)])
            unpruned_t.append((time.perf_counter() - t) * 1000)

        def measure(texts=texts, reference=reference, table=table) -> dict:
            agree, took = [], []
            for text, want in zip(texts, reference, strict=True):
                match = lexical.match_for(table, text)
                t = time.perf_counter()
                got = _whole_table_ids(table, match)
                took.append((time.perf_counter() - t) * 1000)
                if want:
                    agree.append(len(set(got) & set(want)) / len(want))
            took.sort()
            return {"top10_agreement": round(statistics.mean(agree), 4) if agree else None,
                    "median_ms": round(statistics.median(took), 3), "p95_ms": round(took[int(0.95 * len(took))], 3)}

        row = {"rows": len(lexical_index.resident(table)), "resident_build_seconds": round(build_s, 3),
               "resident": measure()}
        for ratio in PRUNE_RATIOS:
            with override_settings(LEXICAL_RESIDENT_INDEX=False, FTS_PRUNE_DF_RATIO=ratio):
                row[f"fts5_pruned_{ratio}"] = measure()
        unpruned_t.sort()
        row["fts5_unpruned"] = {"median_ms": round(statistics.median(unpruned_t), 3),
                                "p95_ms": round(unpruned_t[int(0.95 * len(unpruned_t))], 3)}
        out[f"whole_table:{label}"] = row
    return out


def write_paths(counts: dict) -> dict:
    from django.db import connection

    from memory import services

    now = counts["now"]
    out: dict[str, dict] = {}
    with connection.cursor() as cur:
        # exactly 1 % of the facts due (this runs on a copy of the scale database)
        cur.execute("UPDATE facts SET due_at = %s WHERE id %% 100 <> 0", [now + 24 * 3_600_000])
        cur.execute("UPDATE facts SET due_at = %s, active = %s WHERE id %% 100 = 0", [now - 1000, True])
        cur.execute("SELECT count(*) FROM facts WHERE active = %s AND due_at <= %s", [True, now])
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
    """Our resident index vs FTS5 (pruned, unpruned) vs bm25s over the same fact tokens."""
    import bm25s
    from django.test import override_settings

    from memory.engine.tokenize import index_tokens, query_terms
    from memory.models import Fact
    from memory.search import lexical

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

    def question() -> str:
        return QUESTIONS[next(qi) % len(QUESTIONS)]

    def ours() -> object:
        return lexical.fact_candidates(lexical.match_for("facts_fts", question()), person_ids=None, limit=10)

    def fts_pruned() -> object:
        with override_settings(LEXICAL_RESIDENT_INDEX=False):
            return ours()

    def fts_unpruned() -> object:
        return lexical.unpruned_top("facts_fts", lexical.match_for("facts_fts", question()), limit=10)

    return {
        "rows": len(rows),
        "resident": timed(ours, n),
        "fts5_pruned": timed(fts_pruned, n),
        "fts5_unpruned": timed(fts_unpruned, n),
        "bm25s": timed(bm25s_query, n),
        "bm25s_index_seconds": round(index_s, 2),
    }


def vectors_side_by_side(n: int) -> dict:
    from memory.engine.quantize import quantize_vector
    from memory.search.vector_index import knowledge_index

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
        "int8_index_top15": timed(lambda: index.top_k(quantize_vector(q()), 15), n),  # an SQ8 query, as search_knowledge
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


def run_in_subprocess(db: Path | str, counts: dict, n: int, part: str) -> dict:
    """Each database is measured in a fresh process (Django binds to one DB per process)."""
    code = (
        "import json,sys; from bench import run as r; r.setup_django(sys.argv[1]);"
        "print('@@'+json.dumps(r.part(sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]))))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(db), part, json.dumps(counts), str(n)],
                         cwd=ROOT, check=True, capture_output=True, text=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("@@")][-1]
    return json.loads(line[2:])


def other_backends(big: Path, counts: dict, n: int, wanted: str | None, results: dict) -> dict:
    """Read paths (and writes, on a clone) of the same scale store on PostgreSQL; SQLite's are ``results``'."""
    from bench import backends

    names = backends.requested(wanted)
    if backends.POSTGRESQL not in names:
        return {}
    copy = backends.scale_copy(big)
    out = {"postgresql_copy": copy,
           "read_by_backend": {backends.SQLITE: results["read"],
                               backends.POSTGRESQL: run_in_subprocess(copy["url"], counts, n, "read")},
           "write_by_backend": {backends.SQLITE: results["write"]}}
    clone = backends.clone(copy["url"], "write")
    try:
        out["write_by_backend"][backends.POSTGRESQL] = run_in_subprocess(clone, counts, n, "write")
    finally:
        backends.drop(clone)
    return out


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
    """The section: every read path (and the writes and sweeps) on each backend, then ours against the baselines
    measured in the same run; the CPU times, the 10 % store and the pruned FTS5 variants stay in speed.json."""
    from bench import backends
    from bench.common import measured

    by = results.get("read_by_backend") or {backends.SQLITE: results["read"]}
    writes = results.get("write_by_backend") or {backends.SQLITE: results["write"]}
    names = list(by)
    copy = results.get("postgresql_copy") or {}
    scale = ", ".join(f"{v:,} {k}" for k, v in results["scale"].items() if isinstance(v, int) and k not in ("now", "schema"))
    how = measured("python -m bench.run", f"scale store of {scale}" + (
        f"; the PostgreSQL store is that SQLite file moved by `manage.py copy_store` ({copy.get('copy_seconds')} s; "
        f"same top ids of a recall sample: {copy.get('recalls') or '—'})" if copy else "") + "; each path called 200 "
        "times in one process, wall clock (its CPU time is in `bench/results/speed.json`)", results)
    lines = ["## Speed (`make bench`)", "", how, "",
             "| read path · target p95 ≤ 10 ms (a turn's prepare and confirm ≤ 30 ms) | "
             + " | ".join(f"{backends.LABELS[b]} median / p95 ms" for b in names) + " |",
             "| --- | " + " | ".join("---:" for _ in names) + " |"]
    for name, r in by[names[0]].items():
        if "median_ms" in r:
            lines.append(f"| {name} | " + " | ".join(
                f"{by[b][name]['median_ms']} / {by[b][name]['p95_ms']}" if name in by.get(b, {}) else "—" for b in names) + " |")
    if writes.get(names[0]):
        def write(r: dict) -> str:
            return " · ".join(str(r[name].get("per_second", r[name].get("ms", "—"))) for name in writes[names[0]] if name in r)

        lines.append("| writes: " + " · ".join(f"{name} ({'per s' if 'per_second' in r else 'ms'})"
                                               for name, r in writes[names[0]].items())
                     + " | " + " | ".join(write(writes.get(b, {})) for b in names) + " |")
    lines += ["", "| ours against a baseline, same run (SQLite) | ours p50 / p95 ms | baseline p50 / p95 ms | "
              "baseline / ours (p50) | agreement |", "| --- | --- | --- | ---: | --- |"]

    def row(label: str, ours: dict, base_label: str, base: dict, agreement: object) -> str:
        ratio = base["median_ms"] / max(1e-9, ours["median_ms"])
        return (f"| {label} | {ours['median_ms']} / {ours['p95_ms']} | {base_label} {base['median_ms']} / "
                f"{base['p95_ms']} | {ratio:.1f}× | {agreement} |")

    for key, r in results["read"].items():
        if key.startswith("whole_table:"):
            lines.append(row(f"lexical, whole table: {key.split(':', 1)[1]} ({r['rows']:,} rows), resident BM25",
                             r["resident"], "FTS5", r["fts5_unpruned"], f"top-10 {r['resident']['top10_agreement']}"))
        elif key.startswith("scoped:"):
            lines.append(row(f"lexical, scoped: {key.split(':', 1)[1]}, resident BM25", r["resident"], "FTS5",
                             r["fts5"], f"{r['identical_rankings']} / {r['runs']} identical"))
    big = results["lexical"].get("100 %")
    if big:
        lines.append(row(f"lexical over facts ({big['rows']:,} rows), resident BM25", big["resident"], "bm25s",
                         big["bm25s"], "—"))
    vec = results["vectors"].get("100 %")
    if vec:
        lines.append(row(f"knowledge vectors ({vec['rows']:,} × {vec['dim']}), int8 index top 15", vec["int8_index_top15"],
                         "numpy float32", vec["numpy_float32_matmul_top15"],
                         f"{vec['int8_index_top15']['median_ms'] / max(1e-9, vec['memory_read_floor_int8']['median_ms']):.2f}"
                         "× the int8 read floor (≤ 3)"))
    for size, r in list(results["ppr"].items())[-1:]:
        lines.append(row(f"personalised PageRank ({size})", r["ours"], "networkx", r["networkx"],
                         f"top-10 {r['top10_agreement']}"))
    return "\n".join(lines)


def write_markdown(section: str) -> None:
    from bench.common import BENCHMARKS_MD, replace_section

    replace_section(BENCHMARKS_MD, "<!-- speed:start -->", "<!-- speed:end -->", section)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the scale databases")
    parser.add_argument("--backends", default=None,
                        help="sqlite,postgresql (default: both when PostgreSQL answers; bench/backends.py)")
    parser.add_argument("--render", default=None, metavar="JSON", help="only re-render BENCHMARKS.md's section")
    args = parser.parse_args()
    if args.render:
        write_markdown(render(json.loads(Path(args.render).read_text())))
        return
    from bench.common import calibration

    before = calibration()
    n = 40 if args.quick else 200
    CACHE.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    big = CACHE / "scale.sqlite3"
    small = CACHE / "scale-0.1.sqlite3"
    counts = ensure_db(big, 1.0, args.rebuild)
    small_counts = ensure_db(small, 0.1, args.rebuild)
    results: dict = {"when": time.strftime("%Y-%m-%d %H:%M"), "scale": counts}
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    results["read"] = run_in_subprocess(big, counts, n, "read")
    with tempfile.TemporaryDirectory() as tmp:  # writes run on a copy so the cached DB stays as built
        copy = Path(tmp) / "write.sqlite3"
        shutil.copy(big, copy)
        results["write"] = run_in_subprocess(copy, counts, n, "write")
    results.update(other_backends(big, counts, n, args.backends, results))
    results["lexical"] = {
        "10 %": run_in_subprocess(small, small_counts, n, "lexical"),
        "100 %": run_in_subprocess(big, counts, n, "lexical"),
    }
    results["vectors"] = {
        "10 %": run_in_subprocess(small, small_counts, n, "vectors"),
        "100 %": run_in_subprocess(big, counts, n, "vectors"),
    }
    results["ppr"] = ppr_side_by_side(n)
    results["calibration"] = {"before": before, "after": calibration()}
    (RESULTS / "speed.json").write_text(json.dumps(results, ensure_ascii=False, indent=2))
    section = render(results)
    write_markdown(section)
    print(section)


if __name__ == "__main__":
    main()
