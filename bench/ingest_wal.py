"""Where PostgreSQL's work for each ingested message goes, at a scale (docs/DEPLOY.md, "Ingest").

On a clone of a scale store's PostgreSQL copy (bench/backends.py), one process posts ``--messages``
messages as the scale bench's ingest does — into the same 200 streams, each by one of its stream's
speakers, through ``services.store_message`` (the statement ``POST /messages`` runs) — and then
gives each of them a vector twice: the way the worker does today (an UPDATE of the message row)
and, for comparison, as an INSERT into a table of its own created on the clone for this purpose
(``probe_message_vectors``: the message id as key, a ``(stream, id)`` index carrying the SQ8
copy). For each step: milliseconds a message in this process (round trips included), the
write-ahead log a message and which relations wrote it (``pg_walinspect``), and the blocks read
from outside PostgreSQL's buffers and hit in them a message. The clone is made just before, so
its pages are written a first time since the checkpoint: full-page images are counted, as they
are right after any checkpoint.

    python -m bench.ingest_wal --scales 1,10        # bench/results/ingest_wal.json

Needs the scale stores (``make bench-scale`` builds and keeps them) and a PostgreSQL that has the
``pg_walinspect`` extension (PostgreSQL 15's contrib). Each scale runs in a process of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench.common import calibration

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
_BLOCK = re.compile(r"rel \d+/\d+/(\d+)")


def _counters(cur) -> dict:
    # a backend hands its counters to the shared statistics at most once a second unless asked to: ask,
    # and let it go idle once (a statement of its own) so that it does. The log position is the flushed
    # one (every commit of this process is flushed; pg_walinspect reads no further).
    cur.execute("SELECT pg_stat_force_next_flush()")
    cur.execute("SELECT 1")
    cur.execute("SELECT pg_current_wal_flush_lsn()::text, blks_read, blks_hit FROM pg_stat_database"
                " WHERE datname = current_database()")
    lsn, read, hit = cur.fetchone()
    return {"lsn": lsn, "read": int(read), "hit": int(hit)}


def _step(cur, before: dict, after: dict, n: int, seconds: float) -> dict:
    """One step's figures a message; WAL by relation from the records between the two positions."""
    cur.execute("SELECT pg_wal_lsn_diff(%s, %s)", [after["lsn"], before["lsn"]])
    wal = float(cur.fetchone()[0])
    cur.execute("SELECT block_ref, record_length FROM pg_get_wal_records_info(%s, %s)", [before["lsn"], after["lsn"]])
    records = cur.fetchall()
    cur.execute("SELECT relfilenode, relname FROM pg_class WHERE relfilenode <> 0")
    names = dict(cur.fetchall())
    by_relation: Counter = Counter()
    for block_ref, length in records:
        found = _BLOCK.search(block_ref or "")
        if found:  # a record is counted once, for the first relation it names
            by_relation[names.get(int(found.group(1)), found.group(1))] += length
    return {"ms": round(seconds / n * 1000, 3), "wal_bytes": round(wal / n),
            "wal_by_relation": {name: round(size / n) for name, size in by_relation.most_common(8)},
            "blocks_read": round((after["read"] - before["read"]) / n, 2),
            "blocks_hit": round((after["hit"] - before["hit"]) / n, 1)}


def measure(scale: float, folder: Path, messages: int) -> dict:
    """This process: Django on a fresh clone of the scale's PostgreSQL copy (dropped afterwards)."""
    from bench import backends
    from bench.api_bench import CHAT, DIM, refs, speakers, spread
    from bench.scale import INGEST_STREAMS, store_path

    store = store_path(folder, scale)
    if not store.exists():
        raise SystemExit(f"no store at {store}: `make bench-scale SCALES={scale:g}` builds it")
    counts = json.loads(store.with_suffix(".json").read_text())
    clone = backends.clone(backends.scale_copy(store)["url"], "wal")
    try:
        streams, _, now = refs(clone, counts)
        streams = spread(streams, INGEST_STREAMS)
        members = speakers(clone, streams)
        from bench.run import setup_django

        setup_django(clone)
        import numpy as np
        from django.db import connection

        from memory import services

        rng = random.Random(100)

        def post(k: int, tag: str) -> int:
            kind, ext = rng.choice(streams)
            message, _ = services.store_message(
                stream={"platform": "bench", "kind": kind, "external_id": ext},
                sender={"platform": "bench", "external_id": rng.choice(members[(kind, ext)])},
                role="user", content=rng.choice(CHAT), external_message_id=f"{tag}-{k}", at=now + 3_600_000 + k)
            return message.pk

        with connection.cursor() as cur:
            cur.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            cur.execute("CREATE TABLE probe_message_vectors (message_id bigint PRIMARY KEY, stream_id bigint NOT NULL,"
                        " embedding bytea NOT NULL, embedding_q8 bytea NOT NULL)")
            cur.execute("CREATE INDEX probe_message_vectors_stream ON probe_message_vectors (stream_id, message_id)"
                        " INCLUDE (embedding_q8)")
        for k in range(20):  # the connection and the statement's plan, not measured
            post(k, "warm")
        out: dict = {"scale": scale, "messages": messages, "streams": len(streams)}
        with connection.cursor() as cur:
            before, t = _counters(cur), time.perf_counter()
            ids = [post(k, "wal") for k in range(messages)]
            seconds = time.perf_counter() - t
            out["insert"] = _step(cur, before, _counters(cur), messages, seconds)
            cur.execute("SELECT id, stream_id FROM messages WHERE id = ANY(%s)", [ids])
            stream_of = dict(cur.fetchall())
        vectors = np.random.default_rng(1).standard_normal((messages, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        pairs = [services.vector_pair(v) for v in vectors]
        with connection.cursor() as cur:
            before, t = _counters(cur), time.perf_counter()
            for message_id, (raw, q8) in zip(ids, pairs, strict=True):
                cur.execute("INSERT INTO probe_message_vectors VALUES (%s, %s, %s, %s)",
                            [message_id, stream_of[message_id], raw, q8])
            seconds = time.perf_counter() - t
            out["vector_insert_own_table"] = _step(cur, before, _counters(cur), messages, seconds)
            before, t = _counters(cur), time.perf_counter()
            for message_id, vector in zip(ids, vectors, strict=True):
                services.store_message_vector(message_id=message_id, vector=vector)
            seconds = time.perf_counter() - t
            out["vector_update"] = _step(cur, before, _counters(cur), messages, seconds)
        connection.close()
        return out
    finally:
        from django.db import connections

        connections.close_all()
        backends.drop(clone)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="1,10", help="comma-separated, e.g. 1,10")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("BENCH_SCALE_DIR") or ROOT / "bench" / ".cache"))
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--output", type=Path, default=RESULTS / "ingest_wal.json")
    parser.add_argument("--one", type=float, help=argparse.SUPPRESS)  # a child process: one scale, JSON on stdout
    args = parser.parse_args(argv)
    if args.one is not None:
        print("@@" + json.dumps(measure(args.one, args.dir, args.messages)))
        return {}
    results = {"command": "python -m bench.ingest_wal " + " ".join(argv if argv is not None else sys.argv[1:]),
               "calibration": calibration(), "scales": []}
    for scale in (float(s) for s in args.scales.split(",") if s.strip()):
        done = subprocess.run([sys.executable, "-m", "bench.ingest_wal", "--one", str(scale), "--dir", str(args.dir),
                               "--messages", str(args.messages)], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{scale:g}× failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        one = json.loads([x for x in done.stdout.splitlines() if x.startswith("@@")][-1][2:])
        results["scales"].append(one)
        for step in ("insert", "vector_update", "vector_insert_own_table"):
            s = one[step]
            print(f"{scale:g}× {step:24} {s['ms']:6.3f} ms  WAL {s['wal_bytes']:6d} B  read {s['blocks_read']:5.2f}"
                  f"  hit {s['blocks_hit']:5.1f} a message", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    return results


if __name__ == "__main__":
    main()
