"""bench/scale.py: the bench store at several scales, measured and reported side by side.

The smoke run builds a tiny store (1 % of the bench's) and measures it as ``make bench-scale``
does, without the API part; the integration test adds the API as deployed (gunicorn, a real
Celery worker) for the warm-up and resident-memory figures. The report is checked on results
of three scales and two backends.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import scale
from bench.common import SECTION_BY_MARKER, check_section
from tests.redis_url import TEST_REDIS_URL

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MEMORY_DB", "DJANGO_SETTINGS_MODULE")}
    return {**env, "LOG_LEVEL": "WARNING"}


def _run(tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "results" / "scale.json"
    subprocess.run([sys.executable, "-m", "bench.scale", "--scales", "0.01", "--backends", "sqlite", "--dir",
                    str(tmp_path / "stores"), "--calls", "3", "--output", str(out), "--no-markdown", *extra],
                   cwd=REPO, env=_env(), check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.read_text())


def _measured(results: dict, backend: str = "sqlite") -> dict[str, tuple[str, float | None]]:
    return {name: (unit, value) for name, unit, value in scale.figures(results["scales"][0]["backends"][backend])}


def test_smoke_a_small_store_measured_as_make_bench_scale_does(tmp_path):
    results = _run(tmp_path, "--no-api")
    one = results["scales"][0]
    assert one["counts"]["persons"] == 20 and one["counts"]["messages"] == 2000
    assert one["calibration"]["before"]["loop_1e7_s"] > 0 and one["calibration"]["after"]["cpus"] >= 1
    figures = _measured(results)
    for name, _ in scale.READ_ROWS:  # every read path measured, in ms
        unit, (wall, cpu) = figures[name]
        assert unit == "p95 ms (CPU)" and 0 < wall < 10_000 and 0 < cpu < 10_000, (name, wall, cpu)
    assert 0 < figures["message statistics load"][1] < 60
    assert 100 < figures["reading process RSS"][1] < 4000  # a Django process with numpy and jieba loaded
    assert figures["sweep (1 % due)"][1] is not None and figures["add_fact"][1] > 0
    assert "ingest as deployed (4 threads)" not in figures  # --no-api
    report = (tmp_path / "results" / "scale.md").read_text()
    assert "| figure | unit | 0.01× |" in report and "a Python loop of 10⁷ additions" in report
    assert (tmp_path / "results" / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the store is kept and reused by the next run (no second build)
    kept = (tmp_path / "stores" / "scale-0.01.sqlite3").stat().st_mtime
    again = _run(tmp_path, "--no-api")
    assert (tmp_path / "stores" / "scale-0.01.sqlite3").stat().st_mtime == kept
    assert again["scales"][0]["counts"]["build_seconds"] == one["counts"]["build_seconds"]


@pytest.mark.integration
def test_the_api_part_reports_warm_up_and_resident_memory(tmp_path):
    results = _run(tmp_path, "--messages", "40", "--turns", "12", "--redis-url", TEST_REDIS_URL)
    figures = _measured(results)
    assert figures["ingest as deployed (4 threads)"][1] > 0
    assert 0 < figures["POST /turns + confirm"][1] < 5_000
    warm = figures["warm-up: web worker fork → first turn"][1]
    assert 0 < warm < 120  # a worker loads the URLconf, jieba and the embedder before its first turn
    settled = results["scales"][0]["backends"]["sqlite"]["api"]["residency"]["warm_up"]["settled"]
    assert figures["warm-up: its resident indexes built after that"][1] == settled["seconds"] >= 0
    assert "timed_out" not in settled and settled["cpu_s"] >= 0  # the warm-up thread ends: ingest meets a warmed server
    assert 150 < figures["web worker RSS (warmed, largest)"][1] < 4000
    assert 100 < figures["Celery pool process RSS (largest)"][1] < 4000
    assert figures["worker catch-up: ingested messages embedded"][1] is not None
    api = results["scales"][0]["backends"]["sqlite"]["api"]
    assert api["errors"] == {"ingest": [], "turns": []}
    ingest = api["ingest"]["http"]
    assert ingest["streams"] == min(scale.INGEST_STREAMS, results["scales"][0]["counts"]["streams"])
    shares = ingest["cpu_ms_per_request"]
    assert set(shares) == {"web", "client", "worker", "other"} and shares["web"] > 0 and shares["client"] > 0
    assert len(api["residency"]["web_workers_rss_mb"]) == 2  # gunicorn's 2 workers, as deployed


def test_the_ingest_streams_are_spread_evenly_over_the_store():
    from bench.api_bench import spread

    assert spread(list(range(2000)), 200) == list(range(0, 2000, 10))
    assert spread(list(range(150)), 200) == list(range(150)) and spread([1, 2], 0) == [1, 2]
    assert spread(list(range(10)), 3) == [0, 3, 6]


def test_the_ingest_posts_each_message_as_one_of_its_streams_speakers(tmp_path):
    """The same traffic at every scale: a stream's messages come from the people who talk in it, not from
    any of the store's persons (ten times more of them at 10×, each page of the sender index written cold)."""
    import sqlite3

    from bench.api_bench import speakers

    db = tmp_path / "store.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "CREATE TABLE streams (id INTEGER PRIMARY KEY, platform TEXT, kind TEXT, external_id TEXT);"
            "CREATE TABLE identities (person_id INTEGER, platform TEXT, external_id TEXT);"
            "CREATE TABLE messages (id INTEGER PRIMARY KEY, stream_id INTEGER, sender_person_id INTEGER);"
            "INSERT INTO streams VALUES (1, 'bench', 'group', 'g1'), (2, 'bench', 'direct', 'd1'), (3, 'bench', 'group', 'g2');"
            "INSERT INTO identities VALUES (10, 'bench', 'u10'), (11, 'bench', 'u11'), (12, 'bench', 'u12');"
            "INSERT INTO messages (stream_id, sender_person_id) VALUES (1, 10), (1, 11), (1, 10), (2, 12), (2, NULL),"
            " (3, 12);"
        )
    found = speakers(db, [("group", "g1"), ("direct", "d1")])
    assert found == {("group", "g1"): ["u10", "u11"], ("direct", "d1"): ["u12"]}  # g2 not asked for


def _fake_scale(s: float, backend_names: tuple[str, ...]) -> dict:
    """Results of one scale as measure_scale writes them, each figure growing with the scale."""
    read = {key: {"median_ms": s, "p95_ms": 2 * s, "cpu_p95_ms": s} for _, key in scale.READ_ROWS}
    read[scale.STATISTICS] = {"seconds": 0.1 * s}
    read["process_rss_mb"] = 300 + 200 * s
    write = {"sweep (1 % due)": {"ms": 5 * s}, "decay_edges (all edges)": {"ms": 50 * s}, "add_fact": {"per_second": 900}}
    api = {"ingest": {"http": {"requests_per_s": 380.0, "server_cpu_ms_per_request": 2.5}}, "turn_total": {"http": {"p95_ms": 20 + s}},
           "turns": {"http": {"p95_ms": 10 + s}}, "context": {"message_vectors": {"seconds": 4.0}},
           "residency": {"warm_up": {"seconds": 5 + s}, "web_workers_rss_mb": [400 + 10 * s, 390.0],
                         "celery_rss_mb": {"main": 120.0, "pool": [350.0, 360 + s]}}}
    counts = {"persons": int(2000 * s), "facts": int(20000 * s), "knowledge": int(25000 * s), "messages": int(200000 * s),
              "edges": int(100000 * s), "build_seconds": 60 * s}
    cal = {"loop_1e7_s": 0.41, "load_average": [1.5, 1.0, 1.0], "cpus": 2}
    return {"scale": s, "counts": counts, "store_gb": 1.25 * s, "calibration": {"before": cal, "after": cal},
            "backends": {b: {"read": read, "write": write, "api": api, **({"copy_seconds": 100 * s} if b == "postgresql" else {})}
                         for b in backend_names}}


def test_one_table_per_backend_with_the_scales_side_by_side(tmp_path):
    results = {"command": "python -m bench.scale --scales 1,3,10", "backends": ["sqlite", "postgresql"], "seconds": 4000.0,
               "scales": [_fake_scale(1, ("sqlite", "postgresql")), _fake_scale(3, ("sqlite", "postgresql")),
                          _fake_scale(10, ("sqlite",))]}
    full = scale.render_full(results)
    assert full.count("| figure | unit |") == 2
    assert "| figure | unit | 1× | 3× | 10× | 10× / 1× |" in full  # SQLite: three scales and the growth
    assert "| figure | unit | 1× | 3× | 3× / 1× |" in full  # PostgreSQL was not measured at 10×
    assert "| spread (hops 2) | p95 ms (CPU) | 2.00 (1.00) | 6.00 (3.00) | 20.0 (10.0) | 10.0× |" in full
    assert "| web worker RSS (warmed, largest) | MB | 410.0 | 430.0 | 500.0 | 1.2× |" in full
    assert "| warm-up: web worker fork → first turn | s | 6.00 | 8.00 | 15.0 | 2.5× |" in full
    assert "PostgreSQL copy 300 s" in full and "1-minute load 1.5 / 1.5 on 2 cores" in full
    section = scale.render_section(results)
    check_section(SECTION_BY_MARKER["<!-- scale:start -->"], section)  # within its budget, no dates
    assert "| figure | SQLite 1× | SQLite 3× | SQLite 10× | PostgreSQL 1× | PostgreSQL 3× |" in section
    assert "| Celery pool process RSS (largest) (MB) | 361.0 | 363.0 | 370.0 | 361.0 | 363.0 |" in section
    out = tmp_path / "scale.json"
    scale.write_reports(results, out, markdown=False)
    assert out.with_suffix(".png").stat().st_size > 10_000 and out.with_suffix(".md").read_text().startswith("# How")


def test_merge_keeps_what_a_run_did_not_measure_and_says_which_run_measured_which():
    earlier = {"command": "python -m bench.scale --scales 1,3", "backends": ["sqlite", "postgresql"], "seconds": 900.0,
               "scales": [_fake_scale(1, ("sqlite", "postgresql")), _fake_scale(3, ("sqlite", "postgresql"))]}
    later = {"command": "python -m bench.scale --scales 3,10 --backends sqlite --merge", "backends": ["sqlite"],
             "seconds": 2000.0, "scales": [_fake_scale(3, ("sqlite",)), _fake_scale(10, ("sqlite",))]}
    merged = scale.merge(earlier, later)
    assert [s["scale"] for s in merged["scales"]] == [1, 3, 10]
    three = merged["scales"][1]
    assert three["backends"]["sqlite"] is later["scales"][0]["backends"]["sqlite"]  # measured again: the new run's
    assert three["backends"]["postgresql"]["read"] == earlier["scales"][1]["backends"]["postgresql"]["read"]  # kept
    assert three["backends"]["postgresql"]["calibration"] == earlier["scales"][1]["calibration"]
    assert merged["backends"] == ["sqlite", "postgresql"]
    assert [(r["command"], r["scales"], r["backends"]) for r in merged["runs"]] == [
        ("python -m bench.scale --scales 1,3", [1], ["sqlite", "postgresql"]),
        ("python -m bench.scale --scales 1,3", [3], ["postgresql"]),
        ("python -m bench.scale --scales 3,10 --backends sqlite --merge", [3, 10], ["sqlite"])]
    text = scale.runs_text(merged)
    assert text == ("1× from `python -m bench.scale --scales 1,3` in 900 s; 3× (PostgreSQL) from "
                    "`python -m bench.scale --scales 1,3` in 900 s; 3×, 10× (SQLite) from "
                    "`python -m bench.scale --scales 3,10 --backends sqlite --merge` in 2,000 s")
    full = scale.render_full(merged)
    assert "| figure | unit | 1× | 3× | 10× | 10× / 1× |" in full and "| figure | unit | 1× | 3× | 3× / 1× |" in full
    assert "Merged runs: 1× from" in full and "- 3× PostgreSQL: " in full
    section = scale.render_section(merged)
    check_section(SECTION_BY_MARKER["<!-- scale:start -->"], section)
    assert "| figure | SQLite 1× | SQLite 3× | SQLite 10× | PostgreSQL 1× | PostgreSQL 3× |" in section
    # PostgreSQL at 10× later, alone: SQLite's 10× stays beside it
    pg10 = {"command": "python -m bench.scale --scales 10 --backends postgresql --merge", "backends": ["postgresql"],
            "seconds": 5000.0, "scales": [_fake_scale(10, ("postgresql",))]}
    again = scale.merge(merged, pg10)
    assert sorted(again["scales"][2]["backends"]) == ["postgresql", "sqlite"]
    assert [(r["scales"], r["backends"]) for r in again["runs"]] == [
        ([1], ["sqlite", "postgresql"]), ([3], ["postgresql"]), ([3], ["sqlite"]), ([10], ["sqlite"]),
        ([10], ["postgresql"])]
    section = scale.render_section(again)
    check_section(SECTION_BY_MARKER["<!-- scale:start -->"], section)
    assert "| figure | SQLite 1× | SQLite 3× | SQLite 10× | PostgreSQL 1× | PostgreSQL 3× | PostgreSQL 10× |" in section
    # a run recorded before runs named their backends, measured again on its backend: nothing is invented
    old_style = {"command": "a", "backends": ["sqlite", "postgresql"], "seconds": 1.0,
                 "scales": [_fake_scale(1, ("sqlite", "postgresql")), _fake_scale(10, ("sqlite",))]}
    redo = scale.merge(old_style, {"command": "b", "backends": ["sqlite"], "seconds": 2.0,
                                   "scales": [_fake_scale(10, ("sqlite",))]})
    assert list(redo["scales"][1]["backends"]) == ["sqlite"]
    assert [(r["command"], r["scales"]) for r in redo["runs"]] == [("a", [1]), ("b", [10])]
    assert scale.merge(None, later) is later and scale.merge(earlier, earlier) is earlier


def test_a_store_records_the_code_that_built_it_not_the_code_after(tmp_path, monkeypatch):
    """A checkout that moves during a long build (a merge brings a migration) must not be recorded as
    the store's: the store would claim a migration it never had, and no migrate would run."""
    import subprocess as sp

    from bench import run

    checkout = {"signature": "0001.py;build_db=old"}

    def build(*args, **kwargs):  # the merge lands while the builder runs
        checkout["signature"] = "0001.py,0002.py;build_db=new"
        return sp.CompletedProcess(args, 0, stdout="{'persons': 20}\n")

    monkeypatch.setattr(run, "schema_signature", lambda: checkout["signature"])
    monkeypatch.setattr(run.subprocess, "run", build)
    counts = run.ensure_db(tmp_path / "s.sqlite3", 0.01, rebuild=True)
    assert counts["schema"] == "0001.py;build_db=old"


def test_the_warm_up_before_and_after_is_one_line_of_the_section_within_its_budget():
    results = {"command": "python -m bench.scale --scales 1,3,10", "backends": ["sqlite", "postgresql"], "seconds": 4000.0,
               "scales": [_fake_scale(1, ("sqlite", "postgresql")), _fake_scale(3, ("sqlite", "postgresql")),
                          _fake_scale(10, ("sqlite",))]}
    one = {"before": {"warm_up_s": 16.03, "web_worker_rss_mb": 378.9}, "after": {"warm_up_s": 6.91, "web_worker_rss_mb": 379.0}}
    warm = {"command": "python -m bench.warm_up --before DIR --scales 3", "rounds": 2, "scales": [{"scale": 3.0, "backends": {"sqlite": one}}],
            "calibration": {"before": {"load_average": [2.5]}, "after": {"load_average": [5.22]}}}
    section = scale.render_section(results, warm)
    check_section(SECTION_BY_MARKER["<!-- scale:start -->"], section)
    assert len(section.splitlines()) == len(scale.render_section(results).splitlines()) + 1
    assert ("SQLite 3× 16.03 → **6.91 s** (RSS 378.9 → 379 MB)" in section
            and "medians of 2 alternating rounds, busy machine: 1-minute load up to 5.22" in section)


def test_warm_up_runs_merge_by_scale_and_backend_and_the_line_names_every_command():
    from bench import warm_up

    one = {"before": {"warm_up_s": 9.0, "web_worker_rss_mb": 340.0}, "after": {"warm_up_s": 7.0, "web_worker_rss_mb": 341.0}}
    cal = {"before": {"load_average": [2.0]}, "after": {"load_average": [3.0]}}
    first = {"command": "a", "rounds": 2, "calibration": cal,
             "scales": [{"scale": 1.0, "backends": {"sqlite": one}}, {"scale": 3.0, "backends": {"sqlite": one}}]}
    second = {"command": "b --merge", "rounds": 2, "calibration": {**cal, "after": {"load_average": [6.5]}},
              "scales": [{"scale": 3.0, "backends": {"postgresql": one}}]}
    merged = warm_up.merge(first, second)
    assert [sorted(s["backends"]) for s in merged["scales"]] == [["sqlite"], ["postgresql", "sqlite"]]
    line = scale.warm_up_line(merged)
    assert "(`a`; `b --merge`," in line and "load up to 6.5" in line and "PostgreSQL 3× 9 → **7 s**" in line
