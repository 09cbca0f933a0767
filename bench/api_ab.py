"""Two revisions of the bot API side by side: a paired comparison of a whole turn's latency.

This machine's speed drifts over minutes by more than a small change saves, so two revisions
measured one after the other compare two phases of the machine. Here both serve at once — a
gunicorn for each (2 workers, as `make run` starts it), from a git worktree of each revision,
on one copy of the scale database — and the turns alternate between them (A then B, B then A,
…): every turn's input goes to both, at nearly the same moment. Reported: each side's median
and p95 of ``POST /turns`` + confirm, and the median of the paired differences (A − B; > 0:
B is faster), which the machine's drift cancels out of.

    python -m bench.api_ab BASE [OTHER] [--turns 400] [--backend postgresql|sqlite] [--embedder]

``BASE`` and ``OTHER`` are git revisions; without ``OTHER``, the working tree as it is. They
must share their migrations (one database serves both). Task enqueueing is off, as in
``bench.api_bench`` without ``--worker``. A diagnostic: nothing is written to bench/results.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench import api_bench
from bench.common import Server, latency_stats


def paired(a: list[float], b: list[float]) -> dict:
    """Each side's latency statistics and their paired differences ``a[i] − b[i]``."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    return {
        "a": latency_stats(a), "b": latency_stats(b),
        "median_difference_ms": round(statistics.median(diffs), 3) if diffs else 0.0,
        "b_faster_share": round(sum(d > 0 for d in diffs) / len(diffs), 3) if diffs else 0.0,
    }


def checkout(rev: str, folder: Path) -> Path:
    """A detached worktree of ``rev`` in ``folder`` (removed by :func:`drop_checkout`)."""
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(folder), rev], cwd=api_bench.ROOT, check=True)
    return folder


def drop_checkout(folder: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=api_bench.ROOT, check=False)


def one_turn(client, item: dict) -> float:
    """The user's line (not timed), then the turn prepared on it and confirmed: their ms."""
    line = client.post("/api/v1/messages", json={"stream": item["stream"], "sender": item["speaker"], "role": "user",
                                                 "content": item["text"], "at": item["at"] - 1})
    line.raise_for_status()
    body = {**{k: item[k] for k in ("stream", "speaker", "text", "at")}, "watermark_message_id": line.json()["id"]}
    start = time.perf_counter()
    turn = client.post("/api/v1/turns", json=body)
    turn.raise_for_status()
    confirm = client.post(f"/api/v1/turns/{turn.json()['turn_id']}/confirm",
                          json={"query_embedding": item["embedding"], "at": item["at"] + 500})
    confirm.raise_for_status()
    return (time.perf_counter() - start) * 1000


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("other", nargs="?", default=None, help="a revision (default: the working tree)")
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--backend", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--db", default=str(api_bench.DEFAULT_DB))
    parser.add_argument("--embedder", action="store_true",
                        help="the servers embed with the local model (as deployed) besides the bot's vectors")
    args = parser.parse_args(argv)
    import httpx

    from bench import backends

    src = Path(args.db)
    if not src.exists():
        raise SystemExit(f"no scale database at {src} (python -m bench.run builds it)")
    tmp = Path(tempfile.mkdtemp(prefix="memory-api-ab-"))
    trees: list[Path] = []
    servers: list[Server] = []
    db: Path | str = tmp / "ab.sqlite3"
    try:
        if args.backend == "postgresql":
            db = backends.clone(backends.scale_copy(src)["url"], "ab")
        else:
            api_bench.copy_db(src, db)
        meta = src.with_suffix(".json")  # bench.run writes it; a store built by bench.build_db alone has none
        streams, persons, now = api_bench.refs(db, json.loads(meta.read_text()) if meta.exists() else {})
        api_bench.setup_django(db)
        from django.db import connection

        from memory.api.auth import issue_token

        _, token = issue_token("api-ab")
        api_bench.backfill_message_vectors(1)  # vectors for the context lines, as api_bench gives them
        connection.close()
        for name, rev in (("a", args.base), ("b", args.other)):
            tree = api_bench.ROOT if rev is None else checkout(rev, tmp / name)
            if rev is not None:
                trees.append(tree)
            env = api_bench.env_for(db)
            env["PYTHONPATH"] = str(tree)
            if args.embedder:
                env["EMBEDDING_PROVIDER"] = "local"
            servers.append(Server(env, cwd=tree))
            servers[-1].wait_ready()  # bound before the next one looks for a free port (BENCH_PORTS: the first free)
        inputs = api_bench.turn_inputs(streams, persons, args.turns + 10, now + 3_600_000)
        clients = [httpx.Client(base_url=s.base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
                   for s in servers]
        for client in clients:  # warm-up: each server's first turns
            for item in inputs[:5]:
                one_turn(client, item)
        times: list[list[float]] = [[], []]
        for i, item in enumerate(inputs[10:]):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for side in order:  # the same input to both (B's a few ms later: its own turn)
                times[side].append(one_turn(clients[side], {**item, "at": item["at"] + 7 * side}))
        for client in clients:
            client.close()
    finally:
        for server in servers:
            server.stop()
        for tree in trees:
            drop_checkout(tree)
        if args.backend == "postgresql" and isinstance(db, str):
            backends.drop(db)
        shutil.rmtree(tmp, ignore_errors=True)
    revisions = {"a": args.base, "b": args.other or "working tree"}
    out = {"revisions": revisions, "backend": args.backend, "turns": args.turns, **paired(*times)}
    print(f"POST /turns + confirm, {args.turns} paired turns on {args.backend}")
    for side in ("a", "b"):
        print(f"  {side} {revisions[side]:<14} median {out[side]['median_ms']:7.2f}  p95 {out[side]['p95_ms']:7.2f} ms")
    print(f"  median of the paired differences (a − b): {out['median_difference_ms']:+.2f} ms;"
          f" b faster in {out['b_faster_share']:.0%} of the turns")
    return out


if __name__ == "__main__":
    main()
