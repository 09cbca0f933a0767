"""How the cost grows with the store (``make bench-scale``): the same benchmark at several scales, side by side.

For each scale (``--scales 1,3``; ``make bench-scale SCALES=1,3,10``) the store of
``bench.build_db`` (1× = 2,000 persons, 20,000 facts, 25,000 knowledge, 200,000 messages,
100,000 edges) is built once into ``--dir`` (``BENCH_SCALE_DIR``, default ``bench/.cache``;
a 10× store takes ~12.5 GB and a WAL as large while it is built) and measured on each backend
(PostgreSQL: the same store moved by ``copy_store``, bench/backends.py):

* every read path of ``bench.run`` in one fresh process (median / p95 of ``--calls`` calls),
  the load of the resident message statistics, and that process's resident memory after;
* the write paths of ``bench.run`` (the sweep, edge decay, adding facts) on a copy of the store;
* the API as deployed (``bench.api_bench --worker``: gunicorn with its 2 workers, a real Celery
  worker, enqueueing on): ingest req/s, ``POST /turns`` + confirm p95, the worker's catch-up
  (every ingested message embedded), warm-up (a web worker's fork → its first answered turn),
  and the resident memory of a warmed web worker and of the Celery worker's pool processes.

Writes ``bench/results/scale.json``, ``bench/results/scale.md`` (one table per backend, the
scales side by side for every figure), ``bench/results/scale.png`` (matplotlib) and the scale
section of BENCHMARKS.md. The machine's calibration (a Python loop, the load average) is taken
before and after each scale and printed beside the figures.

With ``--merge`` the scales of the existing ``--output`` that this run does not measure are kept
(``--scales 10 --merge`` adds 10× beside an earlier run's 1× and 3×); the reports then say which
run measured which scale.

    python -m bench.scale [--scales 1,3] [--backends sqlite,postgresql] [--dir DIR] [--no-api] [--merge]
    python -m bench.scale --render bench/results/scale.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import backends
from bench.common import BENCH_REDIS_URL, BENCHMARKS_MD, calibration, calibration_text, replace_section, shown

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: (label, where in a scale's results, unit) of the figures the tables and the plot show
READ_ROWS = [
    ("recall_facts_in_scope (5 persons)", "recall_facts_in_scope (5 persons)"),
    ("recall_facts_across_persons", "recall_facts_across_persons"),
    ("recall_episodes (every stream)", "recall_episodes (every stream)"),
    ("search_knowledge (lexical)", "search_knowledge (lexical)"),
    ("search_knowledge (lexical + vector)", "search_knowledge (lexical + vector)"),
    ("dense_fact_candidates (5 persons)", "dense_fact_candidates (5 persons)"),
    ("spread (hops 2)", "spread (hops 2)"),
    ("search_messages (inspect)", "search_messages (inspect)"),
    ("turn prepare (read-only)", "turn prepare, read-only (prepare_turn record=False, with its conversation)"),
    ("turn confirm ranking", "turn confirm ranking (rank_pool, turn + context vectors)"),
    ("inspect, bm25 + vectors", "search_messages (inspect, bm25 + vectors)"),
    ("inspect, first search of a stream", "search_messages (inspect, bm25 + vectors, first search of the stream)"),
]
STATISTICS = "message statistics load (once per process; edits and deletes are applied, not reloaded)"


def label(scale: float) -> str:
    return f"{scale:g}×"


def store_path(folder: Path, scale: float) -> Path:
    return folder / f"scale-{scale:g}.sqlite3"


def ensure_store(store: Path, scale: float, rebuild: bool) -> dict:
    """The store at ``scale``: built by ``bench.run.ensure_db``, or a kept one reused — migrated to the
    current schema (a new migration does not cost a rebuild of hours at 10×; a new ``build_db`` does)."""
    from bench import backends as b
    from bench import run

    meta = store.with_suffix(".json")
    if not rebuild and store.exists() and meta.exists():
        counts = json.loads(meta.read_text())
        built_by = counts.get("schema", "").rpartition(";")[2]
        if built_by == run.schema_signature().rpartition(";")[2] and counts.get("persons") == int(2000 * scale):
            if counts["schema"] != run.schema_signature():
                env = {**b.env_for(store), "DJANGO_SETTINGS_MODULE": "config.settings", "LOG_LEVEL": "WARNING"}
                subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env,
                               check=True)
                counts["schema"] = run.schema_signature()
                meta.write_text(json.dumps(counts))
            return counts
    return run.ensure_db(store, scale, rebuild)


def measure_reads(target: Path | str, counts: dict, calls: int) -> dict:
    """bench.run's read paths (without its agreement checks) in a fresh process, and that process's RSS."""
    code = (
        "import json,sys; from bench import run as r; from bench.common import rss_mb; import os;"
        "r.setup_django(sys.argv[1]); out = r.read_paths(json.loads(sys.argv[2]), int(sys.argv[3]), agreement=False);"
        "out['process_rss_mb'] = rss_mb(os.getpid()); print('@@' + json.dumps(out))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(target), json.dumps(counts), str(calls)],
                          cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads([x for x in done.stdout.splitlines() if x.startswith("@@")][-1][2:])


def measure_writes(target: Path | str, counts: dict) -> dict:
    from bench import run

    return run.run_in_subprocess(target, counts, 0, "write")


#: The ingest is posted into this many streams at every scale (the 1× store has 200): a larger store
#: is measured under the same traffic, not under messages spread ten times thinner over its streams
#: (which changes what the worker has to do beside the web, not what the store costs). Each message is
#: posted by one of its stream's speakers (bench.api_bench.speakers), as a chat's messages are, not by
#: any of the store's persons (ten times more of them at 10×: each sender's rows in the sender index
#: and its person row would be written a first time since the checkpoint, cold).
INGEST_STREAMS = 200


def measure_api(store: Path, backend: str, messages: int, turns: int, redis_url: str, tmp: Path) -> dict:
    out = tmp / f"api-{backend}.json"
    subprocess.run([sys.executable, "-m", "bench.api_bench", "--db", str(store), "--backend", backend, "--worker",
                    "--skip-direct", "--messages", str(messages), "--turns", str(turns), "--redis-url", redis_url,
                    "--ingest-streams", str(INGEST_STREAMS), "--out", str(out)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def measure_scale(scale: float, args: argparse.Namespace, log) -> dict:
    store = store_path(args.dir, scale)
    before = calibration()
    t = time.perf_counter()
    counts = ensure_store(store, scale, args.rebuild)
    log(f"{label(scale)}: store {shown(store)} ready ({time.perf_counter() - t:.0f} s here; built in "
        f"{counts.get('build_seconds')} s)")
    out: dict = {"scale": scale, "counts": counts, "store_gb": round(store.stat().st_size / 1e9, 2), "backends": {}}
    for backend in args.backends:
        one: dict = {}
        target: Path | str = store
        if backend == backends.POSTGRESQL:
            copy = backends.scale_copy(store)
            target, one["copy_seconds"] = copy["url"], copy.get("copy_seconds")
        one["read"] = measure_reads(target, counts, args.calls)
        log(f"{label(scale)} {backend}: read paths measured")
        with tempfile.TemporaryDirectory(prefix="memory-scale-", dir=args.dir) as tmp:
            if backend == backends.POSTGRESQL:
                clone = backends.clone(str(target), "scale_write")
                try:
                    one["write"] = measure_writes(clone, counts)
                finally:
                    backends.drop(clone)
            else:
                copy_file = Path(tmp) / "write.sqlite3"
                shutil.copyfile(store, copy_file)
                one["write"] = measure_writes(copy_file, counts)
                copy_file.unlink()
            log(f"{label(scale)} {backend}: write paths measured")
            if not args.no_api:
                one["api"] = measure_api(store, backend, args.messages, args.turns, args.redis_url, Path(tmp))
                log(f"{label(scale)} {backend}: API as deployed measured")
        out["backends"][backend] = one
    out["calibration"] = {"before": before, "after": calibration()}
    return out


# --- report ----------------------------------------------------------------------------------


def figures(one: dict) -> list[tuple[str, str, float | None]]:
    """``(figure, unit, value)`` of one scale on one backend, in the tables' order."""
    read, write, api = one.get("read", {}), one.get("write", {}), one.get("api")
    rows: list[tuple[str, str, float | None]] = []
    for name, key in READ_ROWS:  # wall clock and the process's CPU time (a loaded machine inflates the first)
        r = read.get(key) or {}
        rows.append((name, "p95 ms (CPU)", (r["p95_ms"], r.get("cpu_p95_ms")) if "p95_ms" in r else None))
    rows.append(("message statistics load", "s", (read.get(STATISTICS) or {}).get("seconds")))
    rows.append(("reading process RSS", "MB", read.get("process_rss_mb")))
    rows.append(("sweep (1 % due)", "ms", (write.get("sweep (1 % due)") or {}).get("ms")))
    rows.append(("decay_edges (all edges)", "ms", (write.get("decay_edges (all edges)") or {}).get("ms")))
    rows.append(("add_fact", "per s", (write.get("add_fact") or {}).get("per_second")))
    if api:
        res = api.get("residency") or {}
        celery = res.get("celery_rss_mb") or {}
        vectors = (api.get("context") or {}).get("message_vectors") or {}
        rows += [
            ("ingest as deployed (4 threads)", "req/s", api["ingest"]["http"]["requests_per_s"]),
            ("ingest: web CPU per message", "ms", api["ingest"]["http"].get("server_cpu_ms_per_request")),
            ("ingest: worker CPU per message", "ms", (api["ingest"]["http"].get("cpu_ms_per_request") or {}).get("worker")),
            ("POST /turns + confirm", "p95 ms", api["turn_total"]["http"].get("p95_ms")),
            ("POST /turns", "p95 ms", api["turns"]["http"].get("p95_ms")),
            ("worker catch-up: ingested messages embedded", "s", vectors.get("seconds")),
            ("warm-up: web worker fork → first turn", "s", (res.get("warm_up") or {}).get("seconds")),
            ("warm-up: its resident indexes built after that", "s",
             ((res.get("warm_up") or {}).get("settled") or {}).get("seconds")),
            ("web worker RSS (warmed, largest)", "MB", max(res.get("web_workers_rss_mb") or [0]) or None),
            ("Celery pool process RSS (largest)", "MB", max(celery.get("pool") or [0]) or None),
        ]
    return rows


def _number(value: float) -> str:
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _cell(value: float | tuple | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, tuple | list):  # wall clock (CPU time)
        return f"{_number(value[0])} ({_number(value[1])})" if value[1] is not None else _number(value[0])
    return _number(value)


def _growth_base(value: float | tuple | None) -> float | None:
    """What the growth column divides: CPU time where there is one (steadier than the wall clock on a shared machine)."""
    if isinstance(value, tuple | list):
        return value[1] if value[1] is not None else value[0]
    return value


def backend_table(results: dict, backend: str) -> list[str]:
    """Markdown: every figure of ``backend``, one column per scale (and the growth of the last over the first)."""
    scales = [s for s in results["scales"] if backend in s["backends"]]
    if not scales:
        return []
    cols = [dict((f, (u, v)) for f, u, v in figures(s["backends"][backend])) for s in scales]
    head = "| figure | unit | " + " | ".join(label(s["scale"]) for s in scales) + \
        (f" | {label(scales[-1]['scale'])} / {label(scales[0]['scale'])} |" if len(scales) > 1 else " |")
    lines = [head, "|---|---|" + "---:|" * (len(scales) + (len(scales) > 1))]
    for name, unit, _ in figures(scales[0]["backends"][backend]):
        values = [c.get(name, (unit, None))[1] for c in cols]
        growth = ""
        if len(scales) > 1:
            first, last = _growth_base(values[0]), _growth_base(values[-1])
            growth = f" {last / first:.1f}× |" if first and last else " — |"
        lines.append(f"| {name} | {unit} | " + " | ".join(_cell(v) for v in values) + " |" + growth)
    return lines


def calibration_line(results: dict) -> str:
    """The machine's speed around every run of the scales, in one line (BENCHMARKS.md's section)."""
    parts = []
    for s in results["scales"]:
        runs = [(label(s["scale"]), s.get("calibration"))]
        runs += [(f"{label(s['scale'])} {backends.LABELS[name]}", one["calibration"])
                 for name, one in s["backends"].items() if one.get("calibration")]
        for name, cal in runs:
            cal = cal or {}
            got = [cal[w] for w in ("before", "after") if cal.get(w)]
            if got:
                parts.append(f"{name} {' / '.join(str(c['loop_1e7_s']) for c in got)} s, load "
                             f"{' / '.join(str(c['load_average'][0]) for c in got)}")
    return ("- Machine calibration before / after each run (a Python loop of 10⁷ additions; 1-minute load on "
            f"{_cpus(results)} cores): " + "; ".join(parts) + ".")


def _cpus(results: dict) -> int | str:
    for s in results["scales"]:
        for cal in (s.get("calibration") or {}).values():
            return cal.get("cpus", "?")
    return "?"


def calibration_lines(results: dict) -> list[str]:
    """The machine's speed around each scale's run (and around an earlier run a merged backend comes from)."""
    lines = []
    for s in results["scales"]:
        lines.append(f"- {label(s['scale'])}: {calibration_text(s.get('calibration'))}")
        lines += [f"- {label(s['scale'])} {backends.LABELS[name]}: {calibration_text(one['calibration'])}"
                  for name, one in s["backends"].items() if one.get("calibration")]
    return lines


def loaded_note(results: dict) -> list[str]:
    """A warning when the machine was shared while the figures were taken: a calibration loop 1.3× slower
    than the run's fastest, or a 1-minute load above 1.5× the cores (the bench's own servers, worker and
    database load it up to about its cores while the API part runs, and the next calibration sees that)."""
    found = [c for s in results["scales"] for c in (s.get("calibration") or {}).values()]
    loads = [(c["load_average"][0], c["cpus"]) for c in found]
    loops = [c["loop_1e7_s"] for c in found if c.get("loop_1e7_s")]
    slowed = bool(loops) and max(loops) > 1.3 * min(loops)
    if not loads or (max(load / cpus for load, cpus in loads) <= 1.5 and not slowed):
        return []
    return [f"- The machine was shared (1-minute load up to {max(x for x, _ in loads):g} on {loads[0][1]} cores): wall-clock "
            "latencies and rates are inflated several times; CPU times (in brackets) and memory are the figures to compare."]


def runs_of(results: dict) -> list[dict]:
    """The runs the scales come from: ``[{command, seconds, scales}]`` (one run unless merged)."""
    return results.get("runs") or [{"command": results["command"], "seconds": results.get("seconds"),
                                     "scales": [s["scale"] for s in results["scales"]]}]


def runs_text(results: dict) -> str:
    """```cmd` in N s`` for one run; each run with the scales it measured when the results were merged."""
    runs = runs_of(results)

    def one(run: dict) -> str:
        took = f" in {run['seconds']:,.0f} s" if run.get("seconds") is not None else ""
        return f"`{run['command']}`{took}"

    def which(run: dict) -> str:
        names = run.get("backends")
        partial = names and set(names) != set(results.get("backends", []))
        shown_names = f" ({', '.join(backends.LABELS[b] for b in names)})" if partial else ""
        return f"{', '.join(label(x) for x in run['scales'])}{shown_names}"

    if len(runs) == 1:
        return one(runs[0])
    return "; ".join(f"{which(run)} from {one(run)}" for run in runs)


def merge(previous: dict | None, results: dict) -> dict:
    """``results`` with what ``previous`` measured and it did not kept beside it: whole scales, and at a
    scale both measured, the backends only ``previous`` did (``--scales 10 --backends postgresql --merge``
    adds PostgreSQL 10× beside an earlier SQLite 10×); each kept backend keeps its run's calibration."""
    if not previous:
        return results
    mine = {s["scale"]: s for s in results["scales"]}
    measured = set(mine)
    scales, kept_any = [], False
    kept_names: dict[float, set[str]] = {}  # at a scale measured again: the backends kept from previous
    for old in previous["scales"]:
        new = mine.get(old["scale"])
        if new is None:
            scales.append(old)
            kept_any = True
            continue
        kept = {name: {**one, "calibration": one.get("calibration") or old.get("calibration")}
                for name, one in old["backends"].items() if name not in new["backends"]}
        if kept:
            kept_any = True
            kept_names[old["scale"]] = set(kept)
            new = {**new, "backends": {**kept, **new["backends"]}}
        mine[old["scale"]] = new
    if not kept_any:
        return results
    scales += [s for s in mine.values()]
    now = set(results["backends"])
    runs = []
    for run in runs_of(previous):  # what each earlier run still contributes: its scales not measured again,
        names = run_backends(run, previous)  # and at those measured again, its backends not measured again
        others = [b for b in names if b not in now]
        untouched = [x for x in run["scales"] if x not in measured]
        partly = [x for x in run["scales"] if set(others) & kept_names.get(x, set())]
        if untouched:
            runs.append({**run, "scales": untouched, "backends": names})
        if partly:
            runs.append({**run, "scales": partly, "backends": others})
    runs.append({"command": results["command"], "seconds": results.get("seconds"), "scales": sorted(measured),
                 "backends": list(results["backends"])})
    backend_names = list(dict.fromkeys([*previous.get("backends", []), *results["backends"]]))
    return {**results, "backends": backend_names, "runs": runs, "scales": sorted(scales, key=lambda s: s["scale"])}


def run_backends(run: dict, results: dict) -> list[str]:
    """The backends a run measured (runs recorded before backends were noted: every backend of the results)."""
    return run.get("backends") or list(results.get("backends", []))


def render_full(results: dict) -> str:
    """bench/results/scale.md: how it was measured, one table per backend."""
    runs = runs_of(results)
    title = results["command"] if len(runs) == 1 else " + ".join(r["command"] for r in runs)
    out = [f"# How the cost grows with the store (`{title}`)", ""]
    if len(runs) > 1:
        out += [f"Merged runs: {runs_text(results)}.", ""]
    for s in results["scales"]:
        c = s["counts"]
        copies = ", ".join(f"PostgreSQL copy {b.get('copy_seconds')} s" for name, b in s["backends"].items()
                           if name == backends.POSTGRESQL)
        out.append(f"- {label(s['scale'])}: {c['persons']:,} persons, {c['facts']:,} facts, {c['knowledge']:,} knowledge, "
                   f"{c['messages']:,} messages, {c['edges']:,} edges; SQLite file {s['store_gb']} GB built in "
                   f"{c.get('build_seconds')} s" + (f"; {copies}" if copies else ""))
    out += ["", "Machine speed around each scale:", *calibration_lines(results), *loaded_note(results), ""]
    for backend in results["backends"]:
        out += [f"## {backends.LABELS[backend]}", "", *backend_table(results, backend), ""]
    return "\n".join(out)


#: the figures BENCHMARKS.md's section keeps (the full tables are in bench/results/scale.md)
SUMMARY = ["search_knowledge (lexical + vector)", "spread (hops 2)", "turn prepare (read-only)", "message statistics load",
           "reading process RSS", "sweep (1 % due)", "ingest as deployed (4 threads)", "ingest: web CPU per message",
           "POST /turns + confirm",
           "warm-up: web worker fork → first turn", "warm-up: its resident indexes built after that",
           "web worker RSS (warmed, largest)", "Celery pool process RSS (largest)"]


def warm_up_line(warm: dict) -> str:
    """One line of the section from ``bench.warm_up``'s results: a web worker's warm-up and RSS, with
    the first turn building the resident structures → with them built in a thread beside it."""
    cells = []
    for s in warm["scales"]:
        for backend, one in s["backends"].items():
            b, a = one["before"], one["after"]
            cells.append(f"{backends.LABELS[backend]} {label(s['scale'])} {b['warm_up_s']:g} → **{a['warm_up_s']:g} s** "
                         f"(RSS {b['web_worker_rss_mb']:g} → {a['web_worker_rss_mb']:g} MB)")
    loads = [c["load_average"][0] for cal in warm.get("calibrations") or [warm["calibration"]] for c in cal.values()]
    commands = "; ".join(f"`{c}`" for c in warm.get("runs") or [warm["command"]])
    return (f"- Warm-up, the first turn building the resident structures → a thread building them beside it "
            f"({commands}, medians of {warm['rounds']} alternating rounds, busy machine: 1-minute load up to "
            f"{max(loads):g}): " + "; ".join(cells) + ".")


def ingest_text(results: dict) -> str:
    """How the ingest was posted (``""`` for results from before it was held the same at every scale)."""
    for s in results["scales"]:
        for one in s["backends"].values():
            http = ((one.get("api") or {}).get("ingest") or {}).get("http") or {}
            if http.get("streams"):
                return f" (ingest: {http['requests']:,} messages into {http['streams']} streams at every scale)"
    return ""


def render_section(results: dict, warm_up: dict | None = None) -> str:
    """BENCHMARKS.md's scale section: the main figures, backends and scales side by side (and, given
    ``bench.warm_up``'s results, their line)."""
    columns = [(b, s) for b in results["backends"] for s in results["scales"] if b in s["backends"]]
    head = "| figure | " + " | ".join(f"{backends.LABELS[b]} {label(s['scale'])}" for b, s in columns) + " |"
    lines = [
        "## How the cost grows with the store (`make bench-scale`)", "",
        f"{runs_text(results)}; the bench store at each scale "
        "(1× = 2,000 persons, 200,000 messages), read paths in one fresh process, the API as deployed with a "
        f"real worker{ingest_text(results)}; all figures and the plot: `bench/results/scale.md`, `scale.png`.",
        calibration_line(results), *loaded_note(results), *([warm_up_line(warm_up)] if warm_up else []), "",
        head, "|---|" + "---:|" * len(columns),
    ]
    for name in SUMMARY:
        cells = []
        unit = ""
        for b, s in columns:
            found = {f: (u, v) for f, u, v in figures(s["backends"][b])}.get(name)
            unit = found[0] if found else unit
            cells.append(_cell(found[1]) if found else "—")
        if any(c != "—" for c in cells):
            lines.append(f"| {name} ({unit}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    """One panel per kind of figure (read p95, API, memory, warm-up), a line per backend over the scales."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("read paths, CPU p95 (ms)", [n for n, _ in READ_ROWS[:10]]),
        ("API as deployed: POST /turns + confirm p95 (ms)", ["POST /turns + confirm"]),
        ("resident memory (MB)", ["reading process RSS", "web worker RSS (warmed, largest)", "Celery pool process RSS (largest)"]),
        ("start-up and catch-up (s)", ["message statistics load", "warm-up: web worker fork → first turn",
                                       "worker catch-up: ingested messages embedded"]),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2))
    for ax, (title, names) in zip(axes, panels, strict=True):
        for backend in results["backends"]:
            scales = [s for s in results["scales"] if backend in s["backends"]]
            xs = [s["scale"] for s in scales]
            for name in names:
                ys = [_growth_base({f: v for f, _, v in figures(s["backends"][backend])}.get(name)) for s in scales]
                if any(y is not None for y in ys):
                    ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o",
                            linestyle="-" if backend == backends.SQLITE else "--",
                            label=f"{name} ({backends.LABELS[backend]})")
        ax.set_title(title)
        ax.set_xlabel("store scale (1× = 200,000 messages)")
        ax.set_xscale("log")
        ticks = sorted({s["scale"] for s in results["scales"]})
        ax.set_xticks(ticks, [label(t) for t in ticks])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_reports(results: dict, output: Path, markdown: bool) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".md").write_text(render_full(results) + "\n", encoding="utf-8")
    plot(results, output.with_suffix(".png"))
    if markdown:
        warm = RESULTS / "warm_up.json"
        replace_section(BENCHMARKS_MD, "<!-- scale:start -->", "<!-- scale:end -->",
                        render_section(results, json.loads(warm.read_text()) if warm.exists() else None))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default=os.environ.get("SCALES", "1,3"), help="comma-separated, e.g. 1,3,10")
    parser.add_argument("--backends", default=None, help="sqlite,postgresql (default: both when PostgreSQL answers)")
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("BENCH_SCALE_DIR") or ROOT / "bench" / ".cache"),
                        help="where the stores are built and kept (BENCH_SCALE_DIR)")
    parser.add_argument("--calls", type=int, default=100, help="calls of each read path")
    parser.add_argument("--messages", type=int, default=3000, help="messages ingested over HTTP")
    parser.add_argument("--turns", type=int, default=100, help="turns (prepare + confirm) over HTTP")
    parser.add_argument("--redis-url", default=BENCH_REDIS_URL,
                        help="the API part's broker database (flushed before and after)")
    parser.add_argument("--no-api", action="store_true", help="skip the API part (no gunicorn, no worker)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the stores")
    parser.add_argument("--output", type=Path, default=RESULTS / "scale.json")
    parser.add_argument("--no-markdown", action="store_true", help="do not touch BENCHMARKS.md")
    parser.add_argument("--render", type=Path, default=None, metavar="JSON", help="only re-render the reports")
    parser.add_argument("--merge", action="store_true",
                        help="keep the scales of the existing --output that this run does not measure")
    args = parser.parse_args(argv)
    if args.render:
        results = json.loads(args.render.read_text())
        write_reports(results, args.render, not args.no_markdown)
        print(render_full(results))
        return results
    args.backends = backends.requested(args.backends)
    args.dir.mkdir(parents=True, exist_ok=True)
    scales = sorted({float(x) for x in args.scales.split(",") if x.strip()})
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True)

    previous = json.loads(args.output.read_text()) if args.merge and args.output.exists() else None
    results = {"command": f"python -m bench.scale --scales {','.join(f'{s:g}' for s in scales)}"
                          f"{' --backends ' + ','.join(args.backends) if len(args.backends) == 1 else ''}"
                          f"{' --merge' if args.merge else ''}",
               "backends": args.backends, "scales": [], "load_average_start": [round(x, 2) for x in os.getloadavg()]}
    merged = results
    for scale in scales:
        results["scales"].append(measure_scale(scale, args, log))
        results["seconds"] = round(time.perf_counter() - t0, 1)
        merged = merge(previous, results)
        write_reports(merged, args.output, False)  # what is measured so far survives an interrupted run
        args.output.write_text(json.dumps(merged, ensure_ascii=False, indent=2) + "\n")
    results = merged
    write_reports(results, args.output, not args.no_markdown)
    print(render_full(results))
    return results


if __name__ == "__main__":
    main()
