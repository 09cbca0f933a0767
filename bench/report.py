"""Render the API, console and worker benchmark results into BENCHMARKS.md.

Reads ``bench/results/{api,console,workers}.json`` (written by ``bench.api_bench``,
``bench.console_bench`` and ``bench.worker_bench``) and rewrites the section
between ``<!-- services:start -->`` and ``<!-- services:end -->``.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def render() -> str:
    lines = ["<!-- services:start -->", "## Services at scale (`make bench`)", ""]
    api = _load("api")
    if api:
        ing, turns, confirm = api["ingest"], api["turns"], api["confirm"]
        lines += [
            f"### Bot API — `python -m bench.api_bench` ({api['server']}, client in a second process on the same 2 cores)",
            "",
            "| path | HTTP | direct service call | HTTP / direct |",
            "| --- | --- | --- | ---: |",
            f"| POST /messages throughput (target ≥ 300 req/s) | {ing['http']['requests_per_s']} req/s ({ing['http']['threads']} client threads) "
            f"| {ing['direct']['requests_per_s_single_thread']} req/s (1 thread) | — |",
            f"| POST /messages median / p95 | {ing['http']['latency']['median_ms']} / {ing['http']['latency']['p95_ms']} ms "
            f"| {ing['direct']['median_ms']} / {ing['direct']['p95_ms']} ms | {ing['http']['latency']['median_ms'] / ing['direct']['median_ms']:.1f} |",
            f"| POST /turns median / p95 (target p95 ≤ 30 ms) | {turns['http']['median_ms']} / {turns['http']['p95_ms']} ms "
            f"| {turns['direct']['median_ms']} / {turns['direct']['p95_ms']} ms | {turns['ratio_median']} |",
            f"| POST /turns/{{id}}/confirm median / p95 (target p95 ≤ 30 ms) | {confirm['http']['median_ms']} / {confirm['http']['p95_ms']} ms "
            f"| {confirm['direct']['median_ms']} / {confirm['direct']['p95_ms']} ms | {confirm['ratio_median']} |",
            "",
            f"Targets met: {api.get('targets_met')}. Server CPU per ingested message: "
            f"{ing['http']['server_cpu_ms_per_request']} ms.",
            "",
        ]
        cpu = api.get("direct_cpu")
        if cpu:
            lines += [
                f"Load average before the run: {api.get('load_average_before')} (2 cores shared). CPU time of the "
                f"direct calls (the process's own time, whatever the load): prepare median / p95 "
                f"{cpu['turns']['median_ms']} / {cpu['turns']['p95_ms']} ms, confirm "
                f"{cpu['confirm']['median_ms']} / {cpu['confirm']['p95_ms']} ms.",
                "",
            ]
        ctx = (api.get("context") or {}).get("http")
        if ctx:
            lines += [
                "Each turn is lived as a bot lives it: the user's line is stored first (`POST /messages`, not timed) "
                "and the turn is prepared on it; the messages posted before the turns got their vectors as the "
                "embedding backfill gives them. Per measured turn the conversation held "
                f"{ctx['mean_context_messages']} recent messages, {ctx['mean_context_vectors']} of them with a vector "
                f"(the confirm's cosine is the weighted max over the turn's vector and theirs), and "
                f"{ctx['mean_context_user_lines']} user lines among the newest 3 (each a lexical query of its own).",
                "",
            ]
    console = _load("console")
    if console:
        lines += [
            "### Console — `python -m bench.console_bench` (server time in-process, target p95 ≤ 150 ms)",
            "",
            "| page | median ms | p95 ms |",
            "| --- | ---: | ---: |",
        ]
        lines += [f"| {name} | {r['median_ms']} | {r['p95_ms']} |" for name, r in console["pages"].items()]
        lines.append("")
    workers = _load("workers")
    if workers:
        emb, inproc, worker = workers["embedding"], workers["in_process"], workers.get("worker") or {}
        lines += [
            "### Workers — `python -m bench.worker_bench` (offline providers)",
            "",
            f"- Local embedding model ({emb['model']}, batch {emb['batch']}, {emb['threads']} thread): "
            f"**{emb['texts_per_s']} texts/s** (model load {emb['load_s']} s).",
            f"- 1,000 messages → {inproc['episodes']} episodes, {inproc['facts']} facts with vectors, "
            f"{inproc['edges']} edges: **{inproc['seconds']['total']} s** in-process "
            f"(post {inproc['seconds']['post']}, summarise {inproc['seconds']['summarise']}, "
            f"extract {inproc['seconds']['extract']}, embed {inproc['seconds']['embed']}).",
        ]
        if worker:
            lines.append(
                f"- The same through a real Celery worker ({worker['worker_processes']} processes, Redis): "
                f"**{worker['seconds']['total']} s** from the first post until nothing is due and no vector is missing."
            )
        lines.append("")
    lines.append("<!-- services:end -->")
    return "\n".join(lines)


def render_backends() -> str | None:
    """One table: the same scale store on SQLite and on PostgreSQL, read paths, API with a worker, workers.

    Reads ``speed.json`` (``read_by_backend``), ``api_<backend>_worker.json`` and ``workers.json``
    (``worker_by_backend``); ``None`` when no run measured PostgreSQL.
    """
    speed, workers = _load("speed") or {}, _load("workers") or {}
    reads = speed.get("read_by_backend") or {}
    apis = {b: _load(f"api_{b}_worker") for b in ("sqlite", "postgresql")}
    apis = {b: r for b, r in apis.items() if r}
    runs = workers.get("worker_by_backend") or {}
    if "postgresql" not in reads and "postgresql" not in apis and "postgresql" not in runs:
        return None
    cols = ["sqlite", "postgresql"]

    def cell(value) -> str:
        return "—" if value is None else str(value)

    rows: list[tuple[str, list, str]] = []
    for name in (reads.get("sqlite") or {}):
        if "p95_ms" in reads["sqlite"][name]:
            target = "≤ 30" if name.startswith("turn ") else "≤ 10"  # a turn's prepare and confirm: 30 ms
            rows.append((f"{name} — p95 ms", [(reads.get(b) or {}).get(name, {}).get("p95_ms") for b in cols], target))
    if apis:
        first = next(iter(apis.values()))

        def api(path: str) -> list:
            """``path``'s value on each backend; with rounds (bench.api_rounds) their median and range."""
            out = []
            for b in cols:
                value = apis.get(b) or {}
                for key in path.split("."):
                    value = value.get(key) or {}
                spread = ((apis.get(b) or {}).get("rounds") or {}).get(path)
                out.append(f"{value} ({min(spread)}–{max(spread)})" if spread and len(spread) > 1 else (value or None))
            return out

        rows.append((f"POST /messages with the worker running — req/s ({first['ingest']['http']['threads']} client threads)",
                     api("ingest.http.requests_per_s"), "PostgreSQL ≥ SQLite"))
        rows.append(("POST /messages — p95 ms", api("ingest.http.latency.p95_ms"), ""))
        for key, label in (("turn_total", "POST /turns + confirm (one turn) — p95 ms"), ("turns", "POST /turns — p95 ms"),
                           ("confirm", "POST /turns/{id}/confirm — p95 ms")):
            rows.append((label, api(f"{key}.http.p95_ms"), "≤ 30" if key == "turn_total" else ""))
    if runs:
        n = next(iter(runs.values()))["messages"]
        def total(run: dict | None):
            if not run:
                return None
            seconds = run.get("seconds", {}).get("total")
            return seconds if run.get("completed", True) else f"{seconds} (not finished)"

        rows.append((f"{n} messages → episodes, facts, vectors through a real worker — s",
                     [total(runs.get(b)) for b in cols], ""))
        rows.append(("the same — CPU s (poster + worker + PostgreSQL's server processes)",
                     [(runs.get(b) or {}).get("cpu_seconds", {}).get("total") for b in cols], ""))
    copy = speed.get("postgresql_copy") or {}
    rounds = max((len(v) for r in apis.values() for v in (r.get("rounds") or {}).values()), default=1)
    lines = ["<!-- backends:start -->", "## SQLite and PostgreSQL side by side (`make bench`)", "",
             "The same scale store on both backends, measured in one run on this machine "
             f"({(speed.get('when') or '?')}); the PostgreSQL store is the SQLite scale database moved by "
             f"`manage.py copy_store` ({copy.get('copy_seconds')} s; same top ids of its recall sample on both: "
             f"{copy.get('recalls') or '—'}). The API rows run gunicorn (2 workers) with task enqueueing on and a real "
             "Celery worker (2 processes) beside it, as deployed (`python -m bench.api_bench --worker --backend …`)"
             + (f", in {rounds} interleaved rounds (SQLite, PostgreSQL, SQLite, …; `python -m bench.api_rounds`): "
                "each cell is the median of the rounds, their range in brackets" if rounds > 1 else "") + ".", "",
             "| measure | SQLite | PostgreSQL | target |", "| --- | ---: | ---: | --- |"]
    lines += [f"| {label} | {cell(a)} | {cell(b)} | {target} |" for label, (a, b), target in rows]
    lines += ["", "<!-- backends:end -->"]
    return "\n".join(lines)


def main() -> None:
    from bench.common import BENCHMARKS_MD, replace_section

    section = render()
    body = section.removeprefix("<!-- services:start -->").removesuffix("<!-- services:end -->").strip("\n")
    replace_section(BENCHMARKS_MD, "<!-- services:start -->", "<!-- services:end -->", body, title="Benchmarks")
    print(section)
    both = render_backends()
    if both:
        body = both.removeprefix("<!-- backends:start -->").removesuffix("<!-- backends:end -->").strip("\n")
        replace_section(BENCHMARKS_MD, "<!-- backends:start -->", "<!-- backends:end -->", body, title="Benchmarks")
        print(both)


if __name__ == "__main__":
    main()
