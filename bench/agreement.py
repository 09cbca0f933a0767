"""Top-10 agreement of every recall path between SQLite (FTS5) and PostgreSQL (postings + BM25).

``python -m bench.agreement --pg-url postgres://postgres@127.0.0.1:5432/memory_agreement``

The same data goes through the same write path into a fresh SQLite file and a fresh
PostgreSQL database (created from the URL's name, dropped afterwards), each in its own
process: LoCoMo (every conversation: turns as messages, observations as facts, session
summaries as episodes with their sentences as cues) and MemDaily (haystacks: messages,
facts from the offline extractor), plus every LoCoMo observation and MemDaily message
as a knowledge row. Then, for every LoCoMo and MemDaily question, each process records
the top 10 of every recall path, read outside a transaction as a deployment reads:

- facts in scope (``recall_facts_in_scope``, the question's persons, limit 10)
- knowledge (``search_knowledge``, limit 10)
- episodes (``recall_episodes`` of the question's stream, limit 10)
- inspect messages (``search_messages`` of the question's stream, limit 10)

Agreement of a path = mean over questions of |top10(SQLite) ∩ top10(PostgreSQL)| / max(sizes)
(1 when both are empty); ``exact`` = share of questions whose two lists are identical (same
ids in the same order). No query vectors: the vector part of every path is the same numpy
code on both backends; what differs is the lexical index. Rows are compared by content
(ids could differ if the two imports diverged; they are checked to be identical too).
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

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PATHS = ("facts_in_scope", "knowledge", "episodes", "inspect_messages")
NOW_PAD = 3_600_000


def _collect(out: Path, memdaily_haystacks: int | None, conversations: int | None) -> None:
    """Child process: import, query, write ``{path: {question key: [ids]}}`` and a content digest."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["MEMORY_ENQUEUE_TASKS"] = "False"
    os.environ["EMBEDDING_PROVIDER"] = "none"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    call_command("migrate", verbosity=0, interactive=False)
    from bench import eval_locomo, eval_memdaily
    from bench.common import load_memdaily
    from memory import selectors, services
    from memory.providers.heuristic import HeuristicExtractor

    class NoEmbedder:  # constant vectors: no recall path below is given a query vector
        name = label = "constant"
        dim = 8

        def embed(self, texts):
            return [[1.0] + [0.0] * 7 for _ in texts]

    t0 = time.perf_counter()
    units: list[dict] = []   # (stream, persons, now, question)
    locomo = [eval_locomo.import_conversation(raw, NoEmbedder()) for raw in eval_locomo.load(conversations)]
    for conv in locomo:
        for q in conv.questions:
            units.append({"set": "locomo", "stream": conv.stream_id, "persons": conv.person_ids, "now": conv.now,
                          "q": str(q["question"])})
    extractor = HeuristicExtractor()
    data = load_memdaily()
    haystacks = [eval_memdaily.build(i, g, NoEmbedder(), extractor)
                 for i, g in enumerate(eval_memdaily.haystacks_from(data, memdaily_haystacks))]
    for hs in haystacks:
        for _kind, question, _gold in hs.questions:
            units.append({"set": "memdaily", "stream": hs.stream_id, "persons": [hs.person_id], "now": hs.now,
                          "q": question})
    with transaction.atomic():
        for conv in locomo:
            for text in conv.fact_text.values():
                services.add_knowledge(content=text, source="agreement", at=conv.now)
    for hs in haystacks:
        with transaction.atomic():
            for _mid, text in hs.messages:
                services.add_knowledge(content=text, source="agreement", at=hs.now)
    t_import = time.perf_counter() - t0
    t1 = time.perf_counter()
    got: dict[str, list] = {p: [] for p in PATHS}
    for u in units:
        facts = selectors.recall_facts_in_scope(person_ids=u["persons"], query=u["q"], limit=10,
                                                now=u["now"] + NOW_PAD, stream_kind="direct")
        got["facts_in_scope"].append([f.id for f in facts])
        got["knowledge"].append([k.id for k in selectors.search_knowledge(query=u["q"], limit=10)])
        got["episodes"].append([e.id for e in selectors.recall_episodes(stream_id=u["stream"], query=u["q"], limit=10)])
        got["inspect_messages"].append([m.id for m in selectors.search_messages(stream_id=u["stream"], query=u["q"],
                                                                                limit=10)])
    digest = hashlib.sha256()
    with connection.cursor() as cur:
        for table, column in (("facts", "content"), ("knowledge", "content"), ("episode_cues", "cue"),
                              ("messages", "content")):
            cur.execute(f"SELECT id, {column} FROM {table} ORDER BY id")
            for row in cur.fetchall():
                digest.update(f"{table}:{row[0]}:{row[1]}\n".encode())
    out.write_text(json.dumps({
        "vendor": connection.vendor, "units": [{"set": u["set"], "q": u["q"]} for u in units], "got": got,
        "digest": digest.hexdigest(), "import_seconds": round(t_import, 1),
        "query_seconds": round(time.perf_counter() - t1, 1),
    }))


def _agreement(a: list[list[int]], b: list[list[int]]) -> tuple[float, float]:
    overlap, exact = [], 0
    for x, y in zip(a, b, strict=True):
        overlap.append(1.0 if not x and not y else len(set(x) & set(y)) / max(len(x), len(y)))
        exact += x == y
    return sum(overlap) / len(overlap), exact / len(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg-url", default=os.environ.get("AGREEMENT_PG_URL",
                                                            "postgres://postgres@127.0.0.1:5432/memory_agreement"))
    parser.add_argument("--memdaily-haystacks", type=int, default=None, help="default: every haystack")
    parser.add_argument("--conversations", type=int, default=None, help="LoCoMo conversations (default: all 10)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--report-from", help="re-summarise the children's outputs kept in this folder")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite BENCHMARKS.md")
    args = parser.parse_args()
    if args.child:
        _collect(Path(args.child), args.memdaily_haystacks, args.conversations)
        return
    if args.report_from:
        report(Path(args.report_from), seconds=None, write=not args.no_write)
        return
    import psycopg

    base, name = args.pg_url.rsplit("/", 1)
    admin = f"{base}/postgres"
    tmp = Path(tempfile.mkdtemp(prefix="memory-agreement-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MEMORY_DB")}
    cmd = [sys.executable, "-m", "bench.agreement"]
    extra = [] if args.memdaily_haystacks is None else ["--memdaily-haystacks", str(args.memdaily_haystacks)]
    extra += [] if args.conversations is None else ["--conversations", str(args.conversations)]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    started = time.perf_counter()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the finally below drops the database
    try:
        procs = [
            subprocess.Popen([*cmd, "--child", str(tmp / "sqlite.json"), *extra], cwd=ROOT,
                             env={**env, "MEMORY_DB": str(tmp / "agreement.sqlite3")}),
            subprocess.Popen([*cmd, "--child", str(tmp / "postgresql.json"), *extra], cwd=ROOT,
                             env={**env, "DATABASE_URL": args.pg_url}),
        ]
        if any(p.wait() != 0 for p in procs):
            raise SystemExit("a child failed")
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    report(tmp, seconds=round(time.perf_counter() - started, 1), write=not args.no_write)


def report(folder: Path, *, seconds: float | None, write: bool) -> dict:
    """Compare the two children's outputs in ``folder``; write the JSON and the BENCHMARKS.md section."""
    lite = json.loads((folder / "sqlite.json").read_text())
    pg = json.loads((folder / "postgresql.json").read_text())
    assert lite["units"] == pg["units"], "the two runs asked different questions"
    result = {"same_data": lite["digest"] == pg["digest"], "questions": {}, "paths": {}, "seconds": seconds,
              "import_seconds": {"sqlite": lite["import_seconds"], "postgresql": pg["import_seconds"]},
              "query_seconds": {"sqlite": lite["query_seconds"], "postgresql": pg["query_seconds"]}}
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
        from bench.common import md_table, replace_section

        rows = [[key.split("/")[0], key.split("/")[1].replace("_", " "), v["agreement"], v["exact"],
                 f"{v['non_empty']} / {result['questions'][key.split('/')[0]]}", v["ids"]]
                for key, v in result["paths"].items()]
        body = (
            "## SQLite and PostgreSQL rank alike (`python -m bench.agreement`)\n\n"
            f"Produced by `python -m bench.agreement` ({result['questions']['locomo']} LoCoMo and "
            f"{result['questions']['memdaily']} MemDaily questions; identical imported data on both: "
            f"{result['same_data']}; import {result['import_seconds']['sqlite']} s on SQLite, "
            f"{result['import_seconds']['postgresql']} s on PostgreSQL; machine-readable: `bench/results/agreement.json`). "
            "Top-10 of each recall path read from SQLite (FTS5 bm25) and from PostgreSQL (postings tables, the same "
            "bm25 computed in Python), outside a transaction as a deployment reads; agreement = mean |A ∩ B| / "
            "max(|A|, |B|), identical = the same ids in the same order; non-empty = questions where SQLite "
            "returned anything (MemDaily is imported without summaries, so it has no episodes). No query vectors: "
            "the vector part of each path is the same numpy code on both. Target ≥ 0.99 on every path.\n\n"
            + md_table(["questions", "recall path", "top-10 agreement", "identical lists", "non-empty", "ids compared"],
                       rows)
        )
        replace_section(ROOT / "BENCHMARKS.md", "<!-- agreement:start -->", "<!-- agreement:end -->", body,
                        title="SQLite and PostgreSQL rank alike (`python -m bench.agreement`)")
    return result


if __name__ == "__main__":
    main()
