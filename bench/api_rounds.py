"""The bot API with a worker on each backend, in interleaved rounds: SQLite, PostgreSQL, SQLite, …

Two backends measured one after the other on a shared machine compare two phases of the
machine as much as two backends (one `bench.api_bench` run takes about half a minute, and
this machine's speed drifts over minutes). Each round here runs ``python -m bench.api_bench
--worker --backend B`` once for every backend, in turn, and a backend's result file
(``bench/results/api_<backend>_worker.json``, what ``bench.report`` reads) is its first
round's with each timed measure below replaced by the median over the rounds; every
round's value of it is kept under ``rounds``.

    python -m bench.api_rounds [--backends sqlite,postgresql] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import api_bench
from bench import backends as bench_backends
from bench.common import calibration

#: The timed measures of a round (paths into api_bench's result) that the median over rounds replaces.
MEASURES = (
    ("ingest", "http", "requests_per_s"),
    ("ingest", "http", "latency", "median_ms"),
    ("ingest", "http", "latency", "p95_ms"),
    *((key, "http", stat) for key in ("turns", "confirm", "turn_total") for stat in ("median_ms", "p95_ms")),
)


def _get(result: dict, path: tuple[str, ...]) -> float:
    for key in path:
        result = result[key]
    return result  # type: ignore[return-value]


def _set(result: dict, path: tuple[str, ...], value: float) -> None:
    for key in path[:-1]:
        result = result[key]
    result[path[-1]] = value


def combine(rounds: list[dict]) -> dict:
    """One backend's result: the first round's, each of :data:`MEASURES` the median over ``rounds``
    (listed under ``rounds``, in the order they ran)."""
    out = json.loads(json.dumps(rounds[0]))
    out["rounds"] = {".".join(path): [_get(r, path) for r in rounds] for path in MEASURES}
    for path in MEASURES:
        _set(out, path, round(statistics.median(_get(r, path) for r in rounds), 3))
    out["targets_met"] = api_bench.targets_met(out)
    out["errors"] = {key: [e for r in rounds for e in r["errors"][key]] for key in rounds[0]["errors"]}
    return out


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=None, help="comma-separated (default: both when PostgreSQL answers)")
    parser.add_argument("--rounds", type=int, default=3)
    args, rest = parser.parse_known_args(argv)  # the rest goes to every bench.api_bench run
    names = bench_backends.requested(args.backends)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    before = calibration()
    with tempfile.TemporaryDirectory(prefix="memory-api-rounds-") as tmp:
        for k in range(1, max(1, args.rounds) + 1):
            for name in names:
                out = Path(tmp) / f"{name}-{k}.json"
                print(f"== round {k}/{args.rounds}: {name}", flush=True)
                subprocess.run([sys.executable, "-m", "bench.api_bench", "--worker", "--backend", name,
                                "--out", str(out), *rest], cwd=api_bench.ROOT, check=True)
                runs[name].append(json.loads(out.read_text()))
    cal = {"before": before, "after": calibration()}
    combined = {}
    for name, rounds in runs.items():
        combined[name] = {**combine(rounds), "calibration": cal}
        path = api_bench.RESULTS / f"api_{name}_worker.json"
        path.write_text(json.dumps(combined[name], ensure_ascii=False, indent=2) + "\n")
        turn = combined[name]["rounds"]["turn_total.http.p95_ms"]
        ingest = combined[name]["rounds"]["ingest.http.requests_per_s"]
        print(f"{name}: POST /turns + confirm p95 by round {turn} ms, ingest {ingest} req/s → {path}")
    return combined


if __name__ == "__main__":
    main()
