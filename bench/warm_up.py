"""A web worker's warm-up as deployed, with and without the background build of its resident structures.

For each scale's bench store (``bench.scale``'s, in ``--dir``; built when missing) and backend,
gunicorn as ``make run`` starts it (config/gunicorn.py, 2 workers) with the deployed settings
(task enqueueing on, the local embedder; no Celery worker: the enqueued tasks wait in
``--redis-url``'s database, flushed after) serves a copy of the store, from two checkouts:
``--before`` (one whose workers build the resident structures in their first turn: the commit
before the background build, unpacked with ``git archive``) and this one, in alternating rounds.

* warm-up: from the fork of the first web worker to the first answered ``POST /turns``
  (``bench.api_bench.first_answered_turn``, as ``bench.scale`` measures it);
* the next ``--turns`` turns, each on a connection of its own (so both workers get some):
  their median and largest latency — what callers see while a worker still builds;
* the web workers' resident memory once those turns are answered and every build has settled
  (the RSS of both unchanged for 5 s): the largest of the two.

Writes ``bench/results/warm_up.json`` and its line in BENCHMARKS.md's scale section (the rest of
the section re-rendered from ``bench/results/scale.json``; ``bench.scale`` keeps the line).

    python -m bench.warm_up --before DIR [--scales 1,3] [--backends sqlite] [--rounds 2] [--dir bench/.cache]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import api_bench, backends, scale
from bench.common import BENCH_REDIS_URL, BENCHMARKS_MD, Server, calibration, child_pids, replace_section, rss_mb, shown

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "bench" / "results" / "warm_up.json"
SCALE_RESULTS = ROOT / "bench" / "results" / "scale.json"


def settled_rss(server: Server, *, quiet: float = 5.0, timeout: float = 600.0) -> list[float]:
    """The web workers' RSS (MB) once it has not moved by more than 1 MB for ``quiet`` seconds."""
    last, since = None, time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = [rss_mb(p) for p in child_pids(server.proc.pid)]
        if last is None or len(now) != len(last) or any(abs(a - b) > 1.0 for a, b in zip(now, last, strict=True)):
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
        time.sleep(0.5)
    return last or []


def one_round(code: Path, db: Path | str, token: str, inputs: list[dict]) -> dict:
    """One gunicorn from checkout ``code``: warm-up, the turns after it, the settled RSS."""
    import httpx

    env = api_bench.env_for(db, deployed=True)
    env["PYTHONPATH"] = str(code)
    server = Server(env, workers=2, cwd=code)
    try:
        warm = api_bench.first_answered_turn(server, token, inputs[0])
        latencies = []
        for item in inputs[1:]:
            body = {k: item[k] for k in ("stream", "speaker", "text", "at")}
            t = time.perf_counter()
            r = httpx.post(f"{server.base}/api/v1/turns", json=body, headers={"Authorization": f"Bearer {token}"},
                           timeout=600)
            latencies.append((time.perf_counter() - t) * 1000)
            if r.status_code != 200:
                raise RuntimeError(f"turn: {r.status_code} {r.text[:300]}")
        rss = settled_rss(server)
    finally:
        server.stop()
    return {"warm_up_s": warm["seconds"], "next_turns_median_ms": round(statistics.median(latencies), 1),
            "next_turns_max_ms": round(max(latencies), 1), "web_workers_rss_mb": rss}


def measure(store: Path, backend: str, codes: dict[str, Path], rounds: int, turns: int, tmp: Path, label: str) -> dict:
    """``rounds`` alternating rounds of each checkout on one copy of ``store`` (the turns it records are
    few: every round starts from nearly the same store)."""
    counts = json.loads(store.with_suffix(".json").read_text())
    clone = None
    db: Path | str
    if backend == backends.POSTGRESQL:
        db = clone = backends.clone(backends.scale_copy(store)["url"], "warm")
    else:
        db = tmp / "warm.sqlite3"
        api_bench.copy_db(store, db)
    try:
        streams, persons, now = api_bench.refs(db, counts)
        env = api_bench.env_for(db)
        code = ("import sys, django; django.setup(); from memory.api.auth import issue_token;"
                "print(issue_token(sys.argv[1])[1])")
        token = subprocess.run([sys.executable, "-c", code, f"warm-up-{os.getpid()}"], cwd=ROOT, env=env, check=True,
                               capture_output=True, text=True).stdout.strip().splitlines()[-1]
        out: dict[str, list[dict]] = {name: [] for name in codes}
        for k in range(rounds):
            for name, path in codes.items():
                inputs = api_bench.turn_inputs(streams, persons, turns + 1, now + 3_600_000 + 100_000 * k)
                out[name].append(one_round(path, db, token, inputs))
                print(f"{label} {backend} {name} round {k + 1}: {out[name][-1]}", flush=True)
    finally:
        if clone is not None:
            backends.drop(clone)
    return {name: {"rounds": runs,
                   "warm_up_s": round(statistics.median(r["warm_up_s"] for r in runs), 2),
                   "next_turns_max_ms": round(statistics.median(r["next_turns_max_ms"] for r in runs), 1),
                   "web_worker_rss_mb": round(statistics.median(max(r["web_workers_rss_mb"] or [0]) for r in runs), 1)}
            for name, runs in out.items()}


def merge(previous: dict, results: dict) -> dict:
    """``results`` with the (scale, backend) figures of ``previous`` it did not measure; ``runs``: every
    command that measured some, the calibrations of all of them."""
    scales = {s["scale"]: {**s, "backends": dict(s["backends"])} for s in previous["scales"]}
    for s in results["scales"]:
        scales.setdefault(s["scale"], {**s, "backends": {}})["backends"].update(s["backends"])
    runs = [r for r in previous.get("runs") or [previous["command"]] if r != results["command"]]
    loads = [c for c in (previous.get("calibrations") or [previous["calibration"]])]
    return {**results, "runs": [*runs, results["command"]], "calibrations": [*loads, results["calibration"]],
            "scales": [scales[k] for k in sorted(scales)]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout without the background warm-up")
    parser.add_argument("--scales", default="1,3")
    parser.add_argument("--backends", default=backends.SQLITE)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--turns", type=int, default=20, help="turns sent after the first answered one")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("BENCH_SCALE_DIR", ROOT / "bench" / ".cache")))
    parser.add_argument("--redis-url", default=BENCH_REDIS_URL,
                        help="where the deployed settings enqueue the turns' tasks (flushed before and after)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--no-markdown", action="store_true", help="do not touch BENCHMARKS.md")
    parser.add_argument("--merge", action="store_true",
                        help="keep the scales and backends of the existing --output that this run does not measure")
    args = parser.parse_args(argv)
    import redis

    api_bench.WORKER["redis_url"] = args.redis_url
    codes = {"before": args.before.resolve(), "after": ROOT}
    scales = [float(x) for x in args.scales.split(",")]
    results: dict = {"command": f"python -m bench.warm_up --before DIR --scales {args.scales} --backends {args.backends} "
                                f"--rounds {args.rounds} --turns {args.turns}{' --merge' if args.merge else ''}",
                     "before": "the checkout given as --before", "rounds": args.rounds, "scales": [],
                     "calibration": {"before": calibration()}}
    args.dir.mkdir(parents=True, exist_ok=True)
    redis.Redis.from_url(args.redis_url).flushdb()
    try:
        for s in scales:
            store = scale.store_path(args.dir, s)
            scale.ensure_store(store, s, False)
            one: dict = {"scale": s, "store": shown(store), "backends": {}}
            for backend in args.backends.split(","):
                with tempfile.TemporaryDirectory(prefix="memory-warm-", dir=args.dir) as tmp:
                    one["backends"][backend] = measure(store, backend, codes, args.rounds, args.turns, Path(tmp), scale.label(s))
            results["scales"].append(one)
    finally:
        redis.Redis.from_url(args.redis_url).flushdb()
    results["calibration"]["after"] = calibration()
    if args.merge and args.output.exists():
        results = merge(json.loads(args.output.read_text()), results)
    args.output.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    if not args.no_markdown and SCALE_RESULTS.exists():  # the line in the scale section, the rest as bench.scale wrote it
        replace_section(BENCHMARKS_MD, "<!-- scale:start -->", "<!-- scale:end -->",
                        scale.render_section(json.loads(SCALE_RESULTS.read_text()), results))
    print(scale.warm_up_line(results))
    return results


if __name__ == "__main__":
    main()
