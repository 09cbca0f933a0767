"""Top-10 agreement of every recall path between SQLite (FTS5) and PostgreSQL (postings + BM25).

``BENCH_PG_PREFIX=memory_bench python -m bench.agreement`` (PostgreSQL database
``<prefix>_agreement``, created and dropped; ``--pg-url`` names another)

1. **Import** (one child, a fresh SQLite file), through the services the write path uses:
   LoCoMo (every conversation: turns as messages, observations as facts, session summaries
   as episodes with their sentences as cues) and MemDaily (the evaluation's 12 haystacks,
   every question of ``bench.eval``: messages, facts from the offline extractor), plus every
   LoCoMo observation and MemDaily message as a knowledge row.
2. **PostgreSQL gets the same store** by ``copy_store`` (COPY of every table with its ids and
   stored tokens, then the postings rebuilt from those tokens, as a move to PostgreSQL does):
   seconds instead of the ~10 minutes the row-by-row write path takes there.
   ``--pg-import services`` instead imports into PostgreSQL through the services too, in
   parallel with SQLite (its ids and questions must then come out identical).
3. **Query** (one child per backend, in parallel): for every LoCoMo and MemDaily question the
   top 10 of every recall path, read outside a transaction as a deployment reads:

- facts in scope (``recall_facts_in_scope``, the question's persons, limit 10)
- knowledge (``search_knowledge``, limit 10)
- episodes (``recall_episodes`` of the question's stream, limit 10)
- inspect messages (``search_messages`` of the question's stream, limit 10)

Agreement of a path = mean over questions of |top10(SQLite) ∩ top10(PostgreSQL)| / max(sizes)
(1 when both are empty); ``exact`` = share of questions whose two lists are identical (same
ids in the same order). Without ``--vectors`` no query vectors: the vector part of every path
is the same numpy code on both backends; what differs is the lexical index. ``--vectors``
embeds every fact, message, knowledge row and question with the local USE model, so knowledge
and inspect rank fused (lexical ⊕ cosine) as in production. Each query child also hashes the
rows' ids, contents and vectors, so the report says whether both read the same data.
Writes ``bench/results/agreement.json`` and the BENCHMARKS.md section.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PATHS = ("facts_in_scope", "knowledge", "episodes", "inspect_messages")
NOW_PAD = 3_600_000


def _setup() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["MEMORY_ENQUEUE_TASKS"] = "False"
    os.environ["EMBEDDING_PROVIDER"] = "none"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def _import(out: Path, memdaily_haystacks: int | None, conversations: int | None, copy_to: str | None,
            vectors: bool) -> None:
    """Child process: import everything through the services, write the questions (``units``) to ``out``;
    then, with ``copy_to``, move the store into that empty PostgreSQL database (``copy_store``).
    With ``vectors`` every fact, message and knowledge row and every question is embedded by the
    local USE model (the questions' vectors go to ``<out>.npy``)."""
    _setup()
    from django.core.management import call_command
    from django.db import transaction

    call_command("migrate", verbosity=0, interactive=False)
    from bench import eval_locomo, eval_memdaily
    from bench.common import load_memdaily
    from memory import services
    from memory.providers.heuristic import HeuristicExtractor

    class NoEmbedder:  # constant vectors (without --vectors no recall path below is given a query vector)
        name = label = "constant"
        dim = 8

        def embed(self, texts):
            return [[1.0] + [0.0] * 7 for _ in texts]

    if vectors:
        from memory.providers.local import LocalUSEEmbedder

        embedder = LocalUSEEmbedder()
    else:
        embedder = NoEmbedder()
    t0 = time.perf_counter()
    units: list[dict] = []   # (stream, persons, now, question)
    counts = {"locomo_conversations": 0, "locomo_messages": 0, "locomo_facts": 0, "locomo_episodes": 0,
              "memdaily_haystacks": 0, "memdaily_messages": 0, "memdaily_facts": 0, "knowledge": 0}
    knowledge: list[tuple[str, int]] = []
    for raw in eval_locomo.load(conversations):
        conv = eval_locomo.import_conversation(raw, embedder)
        counts["locomo_conversations"] += 1
        counts["locomo_messages"] += len(conv.turns)
        counts["locomo_facts"] += len(conv.fact_ids)
        counts["locomo_episodes"] += len(conv.episode_session)
        knowledge += [(text, conv.now) for text in conv.fact_text.values()]
        for q in conv.questions:
            units.append({"set": "locomo", "stream": conv.stream_id, "persons": conv.person_ids, "now": conv.now,
                          "q": str(q["question"])})
    extractor = HeuristicExtractor()
    data = load_memdaily()
    for i, g in enumerate(eval_memdaily.haystacks_from(data, memdaily_haystacks)):
        hs = eval_memdaily.build(i, g, embedder, extractor)
        counts["memdaily_haystacks"] += 1
        counts["memdaily_messages"] += len(hs.messages)
        counts["memdaily_facts"] += len(hs.fact_ids)
        knowledge += [(text, hs.now) for _mid, text in hs.messages]
        for _kind, question, _gold in hs.questions:
            units.append({"set": "memdaily", "stream": hs.stream_id, "persons": [hs.person_id], "now": hs.now,
                          "q": question})
    knowledge_ids = set()
    for start in range(0, len(knowledge), 500):
        with transaction.atomic():
            knowledge_ids.update(services.add_knowledge(content=text, source="agreement", at=at)
                                 for text, at in knowledge[start:start + 500])
    counts["knowledge"] = len(knowledge_ids - {0})  # distinct rows (the service deduplicates by content)
    if vectors:  # the rest (LoCoMo messages, knowledge) as the worker's backfill embeds them
        from memory.pipeline import backfill_vectors

        backfill_vectors(embedder=embedder)
        q = embedder.embed([u["q"] for u in units])
        np.save(out.with_suffix(".npy"), np.vstack([np.asarray(v, dtype=np.float32) for v in q]))
    t_import = time.perf_counter() - t0
    t_copy = None
    if copy_to:
        from memory.management.copy_store import copy_store

        report = copy_store(copy_to, progress=lambda line: None, verify=False)
        if not report.counts_match:
            raise SystemExit(f"copy_store: row counts differ: {report.tables}")
        t_copy = round(report.seconds, 1)
    out.write_text(json.dumps({"units": units, "counts": counts, "import_seconds": round(t_import, 1),
                               "copy_seconds": t_copy, "vectors": vectors}))


def _query(units_file: Path, out: Path) -> None:
    """Child process: the top 10 of every recall path for every question, and a content digest."""
    _setup()
    from django.db import connection

    from memory import selectors

    units = json.loads(units_file.read_text())["units"]
    vectors_file = units_file.with_suffix(".npy")
    qvecs = np.load(vectors_file) if vectors_file.exists() else [None] * len(units)
    t1 = time.perf_counter()
    got: dict[str, list] = {p: [] for p in PATHS}
    for u, qvec in zip(units, qvecs, strict=True):
        facts = selectors.recall_facts_in_scope(person_ids=u["persons"], query=u["q"], limit=10,
                                                now=u["now"] + NOW_PAD, stream_kind="direct")
        got["facts_in_scope"].append([f.id for f in facts])
        knowledge = selectors.search_knowledge(query=u["q"], limit=10, query_embedding=qvec)
        got["knowledge"].append([k.id for k in knowledge])
        got["episodes"].append([e.id for e in selectors.recall_episodes(stream_id=u["stream"], query=u["q"], limit=10)])
        got["inspect_messages"].append([m.id for m in selectors.search_messages(stream_id=u["stream"], query=u["q"],
                                                                                limit=10, query_vector=qvec)])
    digest = hashlib.sha256()
    with connection.cursor() as cur:
        for table, columns in (("facts", "content, embedding"), ("knowledge", "content, embedding"),
                               ("episode_cues", "cue, NULL"), ("messages", "content, embedding")):
            cur.execute(f"SELECT id, {columns} FROM {table} ORDER BY id")
            for row_id, text, vector in cur.fetchall():
                digest.update(f"{table}:{row_id}:{text}\n".encode())
                digest.update(b"" if vector is None else bytes(vector))
    out.write_text(json.dumps({
        "vendor": connection.vendor, "units": [{"set": u["set"], "q": u["q"]} for u in units], "got": got,
        "digest": digest.hexdigest(), "query_seconds": round(time.perf_counter() - t1, 1),
    }))


def _agreement(a: list[list[int]], b: list[list[int]]) -> tuple[float, float]:
    overlap, exact = [], 0
    for x, y in zip(a, b, strict=True):
        overlap.append(1.0 if not x and not y else len(set(x) & set(y)) / max(len(x), len(y)))
        exact += x == y
    return sum(overlap) / len(overlap), exact / len(a)


def _run(children: list[list[str]], envs: list[dict[str, str]]) -> None:
    procs = [subprocess.Popen([sys.executable, "-m", "bench.agreement", *args], cwd=ROOT, env=env)
             for args, env in zip(children, envs, strict=True)]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("a child failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    prefix = os.environ.get("BENCH_PG_PREFIX", "memory_bench")
    parser.add_argument("--pg-url", default=os.environ.get("AGREEMENT_PG_URL",
                                                            f"postgres://postgres@127.0.0.1:5432/{prefix}_agreement"))
    parser.add_argument("--memdaily-haystacks", type=int, default=12,
                        help="MemDaily haystacks (default 12: every question of the evaluation, bench.eval)")
    parser.add_argument("--conversations", type=int, default=None, help="LoCoMo conversations (default: all 10)")
    parser.add_argument("--pg-import", choices=("copy", "services"), default="copy",
                        help="copy: import into SQLite, then copy_store into PostgreSQL (default); services: import "
                             "into each backend through the services, in parallel (slow on PostgreSQL)")
    parser.add_argument("--vectors", action="store_true",
                        help="embed rows and questions with the local USE model: knowledge and inspect rank fused")
    parser.add_argument("--import-to", help=argparse.SUPPRESS)
    parser.add_argument("--copy-to", help=argparse.SUPPRESS)
    parser.add_argument("--query", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--report-from", help="re-summarise the children's outputs kept in this folder")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite BENCHMARKS.md")
    parser.add_argument("--render", help="only re-render BENCHMARKS.md's section from a results file (agreement.json)")
    args = parser.parse_args()
    if args.render:
        from bench.common import replace_section

        result = json.loads(Path(args.render).read_text())
        replace_section(ROOT / "BENCHMARKS.md", "<!-- agreement:start -->", "<!-- agreement:end -->", render(result))
        return
    if args.import_to:
        _import(Path(args.import_to), args.memdaily_haystacks, args.conversations, args.copy_to, args.vectors)
        return
    if args.query:
        _query(Path(args.query[0]), Path(args.query[1]))
        return
    if args.report_from:
        report(Path(args.report_from), seconds=None, write=not args.no_write)
        return
    import psycopg

    base, name = args.pg_url.rsplit("/", 1)
    admin = f"{base}/postgres"
    tmp = Path(tempfile.mkdtemp(prefix="memory-agreement-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MEMORY_DB")}
    lite_env = {**env, "MEMORY_DB": str(tmp / "agreement.sqlite3")}
    pg_env = {**env, "DATABASE_URL": args.pg_url}
    extra = [] if args.memdaily_haystacks is None else ["--memdaily-haystacks", str(args.memdaily_haystacks)]
    extra += [] if args.conversations is None else ["--conversations", str(args.conversations)]
    extra += ["--vectors"] if args.vectors else []
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    started = time.perf_counter()
    from bench.common import calibration

    before = calibration()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the finally below drops the database
    try:
        if args.pg_import == "copy":
            _run([["--import-to", str(tmp / "import-sqlite.json"), "--copy-to", args.pg_url, *extra]], [lite_env])
        else:
            _run([["--import-to", str(tmp / "import-sqlite.json"), *extra],
                  ["--import-to", str(tmp / "import-postgresql.json"), *extra]], [lite_env, pg_env])
            a, b = (json.loads((tmp / f"import-{v}.json").read_text()) for v in ("sqlite", "postgresql"))
            if a["units"] != b["units"]:
                raise SystemExit("the two imports gave different questions or ids")
        units = str(tmp / "import-sqlite.json")
        _run([["--query", units, str(tmp / "sqlite.json")], ["--query", units, str(tmp / "postgresql.json")]],
             [lite_env, pg_env])
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    report(tmp, seconds=round(time.perf_counter() - started, 1), write=not args.no_write,
           load=round(os.getloadavg()[1], 1), calibration={"before": before, "after": calibration()})


def render(result: dict) -> str:
    """The section: how alike the two backends rank, per data set and recall path (target ≥ 0.99)."""
    from bench.common import measured

    n = result["counts"]
    how = measured("python -m bench.agreement", (
        f"{n['locomo_conversations']} LoCoMo conversations and {n['memdaily_haystacks']} MemDaily haystacks "
        f"({n['locomo_facts'] + n['memdaily_facts']} facts, {n['locomo_messages'] + n['memdaily_messages']} messages, "
        f"{n['knowledge']} knowledge rows) imported into SQLite and "
        + ("copied into PostgreSQL by `copy_store`" if result["postgresql_from"] == "copy_store"
           else "through the services into PostgreSQL too")
        + f" (identical data: {result['same_data']}); every question asked of both, outside a transaction (the resident "
        "indexes answer), " + ("with" if result["query_vectors"] else "without") + " query vectors"), result)
    paths = "; ".join(f"{key.replace('/', ' ').replace('_', ' ')} {v['agreement']:.3f} ({v['exact']:.3f}, "
                      f"{v['non_empty']} non-empty)" for key, v in result["paths"].items())
    met = all(v["agreement"] >= 0.99 for v in result["paths"].values())
    return "\n".join(["## SQLite and PostgreSQL rank alike", "", how + " Top-10 agreement (mean |A ∩ B| / max(|A|, |B|); "
                      f"then the share of identical lists and the questions SQLite answered at all), target ≥ 0.99 on every path ({'met' if met else '**not met**'}): "
                      f"{paths}."])


def report(folder: Path, *, seconds: float | None, write: bool, load: float | None = None,
           calibration: dict | None = None) -> dict:
    """Compare the two children's outputs in ``folder``; write the JSON and the BENCHMARKS.md section."""
    lite = json.loads((folder / "sqlite.json").read_text())
    pg = json.loads((folder / "postgresql.json").read_text())
    imported = json.loads((folder / "import-sqlite.json").read_text())
    pg_import = folder / "import-postgresql.json"
    assert lite["units"] == pg["units"], "the two runs asked different questions"
    result = {"same_data": lite["digest"] == pg["digest"], "counts": imported["counts"],
              "query_vectors": imported["vectors"], "questions": {},
              "paths": {}, "seconds": seconds, "load_average_5min_at_end": load, "calibration": calibration,
              "import_seconds": {"sqlite": imported["import_seconds"]},
              "postgresql_from": "services" if pg_import.exists() else "copy_store",
              "query_seconds": {"sqlite": lite["query_seconds"], "postgresql": pg["query_seconds"]}}
    if pg_import.exists():
        result["import_seconds"]["postgresql"] = json.loads(pg_import.read_text())["import_seconds"]
    else:
        result["copy_seconds"] = imported["copy_seconds"]
    for dataset in ("locomo", "memdaily"):
        idx = [i for i, u in enumerate(lite["units"]) if u["set"] == dataset]
        result["questions"][dataset] = len(idx)
        for path in PATHS:
            a, b = [lite["got"][path][i] for i in idx], [pg["got"][path][i] for i in idx]
            mean, exact = _agreement(a, b)
            result["paths"][f"{dataset}/{path}"] = {
                "agreement": round(mean, 4), "exact": round(exact, 4),
                "non_empty": sum(1 for x in a if x), "ids": sum(len(x) for x in a),
            }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "agreement.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if write:
        from bench.common import replace_section

        replace_section(ROOT / "BENCHMARKS.md", "<!-- agreement:start -->", "<!-- agreement:end -->", render(result))
    return result


if __name__ == "__main__":
    main()
