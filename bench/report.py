"""Render the API, console and worker benchmark results into BENCHMARKS.md's services section.

Reads ``bench/results/api_<backend>_worker.json`` (``bench.api_rounds``: the API with a real worker on
each backend, interleaved rounds), ``api.json`` (``bench.api_bench``: HTTP against the direct service
calls), ``console.json`` (``bench.console_bench``) and ``workers.json`` (``bench.worker_bench``), and
rewrites the section between ``<!-- services:start -->`` and ``<!-- services:end -->``.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BACKENDS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def _load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _get(result: dict | None, path: str):
    for key in path.split("."):
        result = (result or {}).get(key)
    return result


def _cell(result: dict | None, path: str) -> str:
    """``path``'s value; with rounds (bench.api_rounds) their median and range."""
    value = _get(result, path)
    spread = ((result or {}).get("rounds") or {}).get(path)
    if value is None:
        return "—"
    return f"{value} ({min(spread)}–{max(spread)})" if spread and len(spread) > 1 else str(value)


def backend_rows(apis: dict[str, dict], workers: dict) -> list[tuple[str, list[str], str]]:
    """(measure, a cell per backend, target): the API with a worker, and the workers' own run."""
    rows = []
    if apis:
        threads = _get(next(iter(apis.values())), "ingest.http.threads")
        rows += [
            (f"POST /messages with the worker running — req/s ({threads} client threads)",
             [_cell(apis.get(b), "ingest.http.requests_per_s") for b in BACKENDS], "PostgreSQL ≥ SQLite"),
            ("POST /messages — p95 ms", [_cell(apis.get(b), "ingest.http.latency.p95_ms") for b in BACKENDS], ""),
            ("POST /turns + confirm (one turn) — p95 ms", [_cell(apis.get(b), "turn_total.http.p95_ms") for b in BACKENDS],
             "≤ 30"),
            ("POST /turns — p95 ms", [_cell(apis.get(b), "turns.http.p95_ms") for b in BACKENDS], ""),
            ("POST /turns/{id}/confirm — p95 ms", [_cell(apis.get(b), "confirm.http.p95_ms") for b in BACKENDS], ""),
        ]
    runs = workers.get("worker_by_backend") or {}
    if runs:
        def total(run: dict | None) -> str:
            if not run:
                return "—"
            seconds = run.get("seconds", {}).get("total")
            return str(seconds) if run.get("completed", True) else f"{seconds} (not finished)"

        n = next(iter(runs.values()))["messages"]
        rows += [
            (f"{n:,} messages → episodes, facts, vectors through a real worker — s", [total(runs.get(b)) for b in BACKENDS], ""),
            ("the same — CPU s (poster, worker and PostgreSQL's server processes)",
             [str(_get(runs.get(b), "cpu_seconds.total") or "—") for b in BACKENDS], ""),
        ]
    return rows


def _page_target(console: dict, name: str) -> float:
    """A console page's p95 target: the turn inspector has its own (100 ms), every other page the list target."""
    if name.startswith("turn inspector") and "inspector_target_p95_ms" in console:
        return console["inspector_target_p95_ms"]
    return console.get("target_p95_ms", 150)


def console_line(console: dict) -> str:
    """The console pages' p95, each against its target. On a machine busier than its cores (load average above
    the CPU count) a request's wall time is mostly waiting for a core: the targets are then judged on the CPU
    time the request took (``bench.console_bench`` records both), and the line says so."""
    pages = console["pages"]
    cpus, load = console.get("cpus"), console.get("load_average")
    busy = bool(cpus and load and load > cpus and all("cpu_p95_ms" in r for r in pages.values()))
    key = "cpu_p95_ms" if busy else "p95_ms"
    over = [name for name, r in pages.items() if r[key] > _page_target(console, name)]
    cells = ", ".join(f"{name} {r['p95_ms']}" + (f" (CPU {r['cpu_p95_ms']})" if "cpu_p95_ms" in r else "")
                      for name, r in pages.items())
    target = f"target ≤ {console.get('target_p95_ms', 150)}" + (
        f", the turn inspector ≤ {console['inspector_target_p95_ms']}" if "inspector_target_p95_ms" in console else "")
    verdict = f"**over it: {', '.join(over)}**" if over else "all met"
    how = (f"; load average {load} on {cpus} CPUs during the run, so the targets are judged on the CPU p95"
           if busy else "")
    return (f"Console pages (`python -m bench.console_bench`, server time in-process, p95 ms (CPU p95 ms), {target}, "
            f"{verdict}{how}): {cells}.")


def render() -> str:
    from bench.common import measured

    apis = {b: r for b in BACKENDS if (r := _load(f"api_{b}_worker"))}
    api, console, workers = _load("api"), _load("console"), _load("workers") or {}
    first = next(iter(apis.values()), None) or api or {}
    rounds = max((len(v) for r in apis.values() for v in (r.get("rounds") or {}).values()), default=1)
    how = measured(
        "python -m bench.api_rounds" + (f" --rounds {rounds}" if rounds > 1 else ""),
        "the scale store on each backend served as deployed (gunicorn -c config/gunicorn.py, 2 workers; a real Celery "
        "worker, 2 processes; task enqueueing on; DEBUG off), the client in a second process on the same cores; "
        "each turn stores the user's line first, as a bot does"
        + (f"; {rounds} interleaved rounds, each cell the median of the rounds (their range in brackets)" if rounds > 1
           else ""), first)
    lines = ["## Services at scale (`make bench`)", "", how, "",
             "| measure | SQLite | PostgreSQL | target |", "| --- | ---: | ---: | --- |"]
    lines += [f"| {label} | {' | '.join(cells)} | {target} |" for label, cells, target in backend_rows(apis, workers)]
    if api:
        ing, turns, confirm = api["ingest"], api["turns"], api["confirm"]
        lines += ["", f"HTTP against the direct service call (`python -m bench.api_bench`, {BACKENDS.get(api['backend'], '')}, "
                  f"{api['server']}; median / p95 ms): `POST /messages` {ing['http']['requests_per_s']} req/s from "
                  f"{ing['http']['threads']} threads against {ing['direct']['requests_per_s_single_thread']} direct from one; "
                  f"`POST /turns` {turns['http']['median_ms']} / {turns['http']['p95_ms']} against "
                  f"{turns['direct']['median_ms']} / {turns['direct']['p95_ms']} ({turns['ratio_median']}×); confirm "
                  f"{confirm['http']['median_ms']} / {confirm['http']['p95_ms']} against {confirm['direct']['median_ms']} / "
                  f"{confirm['direct']['p95_ms']} ({confirm['ratio_median']}×)."]
    if console:
        lines += ["", console_line(console)]
    if workers:
        emb, inproc = workers["embedding"], workers["in_process"]
        lines += ["", f"Workers (`python -m bench.worker_bench`, offline providers): the local embedding model "
                  f"({emb['model']}, batch {emb['batch']}, {emb['threads']} thread) **{emb['texts_per_s']} texts/s**; "
                  f"1,000 messages → {inproc['episodes']} episodes, {inproc['facts']} facts with vectors, {inproc['edges']} "
                  f"edges in **{inproc['seconds']['total']} s** in-process (summarise {inproc['seconds']['summarise']}, "
                  f"extract {inproc['seconds']['extract']}, embed {inproc['seconds']['embed']})."]
    return "\n".join(lines)


def main() -> None:
    from bench.common import BENCHMARKS_MD, replace_section

    section = render()
    replace_section(BENCHMARKS_MD, "<!-- services:start -->", "<!-- services:end -->", section)
    print(section)


if __name__ == "__main__":
    main()
