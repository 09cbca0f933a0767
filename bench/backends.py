"""Both database backends in one ``make bench``: the scale store on SQLite and the same store on PostgreSQL.

The scale database of ``bench.build_db`` is a SQLite file; its PostgreSQL twin is made
by ``manage.py copy_store`` (same ids, same rows, postings rebuilt) once and cached as
the database ``<BENCH_PG_PREFIX>_scale`` (``_scale_0_1`` for the 10 % one) until the
SQLite file or the migrations change. Benchmarks that write get a fresh clone of it
(``CREATE DATABASE … TEMPLATE``, seconds) and drop it afterwards, as they copy the
SQLite file.

    BENCH_BACKENDS=sqlite,postgresql   (default: both when PostgreSQL answers, else sqlite)
    BENCH_PG_SERVER=postgres://postgres@127.0.0.1:5432
    BENCH_PG_PREFIX=memory_bench        (every database the benchmarks create starts with it)

A *target* is either a ``Path`` (SQLite file) or a ``postgres://`` URL.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SQLITE, POSTGRESQL = "sqlite", "postgresql"
LABELS = {SQLITE: "SQLite", POSTGRESQL: "PostgreSQL"}
Target = Path | str


def server() -> str:
    return os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432").rstrip("/")


def prefix() -> str:
    return os.environ.get("BENCH_PG_PREFIX", "memory_bench")


def is_pg(target: Target) -> bool:
    return str(target).startswith(("postgres://", "postgresql://"))


def postgres_available() -> bool:
    try:
        import psycopg

        psycopg.connect(f"{server()}/postgres", connect_timeout=3).close()
    except Exception:  # no driver, no server: the SQLite column only
        return False
    return True


def requested(value: str | None = None) -> list[str]:
    """Backends to measure: ``value`` / ``BENCH_BACKENDS`` or both when PostgreSQL answers."""
    text = value or os.environ.get("BENCH_BACKENDS", "")
    if not text:
        return [SQLITE, POSTGRESQL] if postgres_available() else [SQLITE]
    aliases = {"sqlite": SQLITE, "sqlite3": SQLITE, "postgresql": POSTGRESQL, "postgres": POSTGRESQL, "pg": POSTGRESQL}
    words = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [w for w in words if w not in aliases]
    if unknown:
        raise SystemExit(f"unknown backend(s) {unknown}: use sqlite, postgresql")
    return list(dict.fromkeys(aliases[w] for w in words))


# --- databases ----------------------------------------------------------------------------------


def _admin():
    import psycopg

    return psycopg.connect(f"{server()}/postgres", autocommit=True)


def url(name: str) -> str:
    return f"{server()}/{name}"


def create(name: str, *, template: str | None = None) -> str:
    """A new empty database, or a copy of ``template``: copied as files (PostgreSQL 15's default
    writes the whole copy to the WAL, and a scale store's gigabyte of it set checkpoints going
    during the measurement that followed)."""
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else ""))
    return url(name)


def drop(name_or_url: str) -> None:
    name = name_or_url.rsplit("/", 1)[-1]
    with _admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def exists(name: str) -> bool:
    with _admin() as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None


def env_for(target: Target, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this environment) pointed at ``target``."""
    env = dict(os.environ if base is None else base)
    if is_pg(target):
        env["DATABASE_URL"] = str(target)
        env.pop("MEMORY_DB", None)
    else:
        env["MEMORY_DB"] = str(target)
        env.pop("DATABASE_URL", None)
    return env


def connect(target: Target):
    """A DB-API connection to ``target`` (read-only use by the benchmarks; ``?``-free SQL only)."""
    if is_pg(target):
        import psycopg

        return psycopg.connect(str(target), autocommit=True)
    import sqlite3

    return sqlite3.connect(target, timeout=30)


def query(target: Target, sql: str) -> list[tuple]:
    conn = connect(target)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


def _signature(sqlite_file: Path) -> str:
    stat = sqlite_file.stat()
    migrations = ",".join(sorted(p.name for p in ROOT.glob("*/migrations/0*.py")))
    return f"{stat.st_size}:{int(stat.st_mtime)}:{migrations}"


def scale_copy(sqlite_file: Path, *, sample: int = 20) -> dict[str, Any]:
    """The PostgreSQL twin of a scale SQLite file (copied by ``copy_store`` when missing or stale).

    Returns ``{"url", "copy_seconds", "recalls"}`` (the copy's own check: same top ids of a
    recall sample on both databases).
    """
    marker = sqlite_file.with_suffix(".postgresql.json")
    name = f"{prefix()}_{sqlite_file.stem.replace('-', '_').replace('.', '_')}"
    signature = _signature(sqlite_file)
    if marker.exists():
        known = json.loads(marker.read_text())
        if known.get("signature") == signature and known.get("url") == url(name) and exists(name):
            return known
    target = create(name)
    env = env_for(sqlite_file, {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings",
                                "MEMORY_ENQUEUE_TASKS": "False", "LOG_LEVEL": "WARNING"})
    print(f"copying {sqlite_file.name} to PostgreSQL ({name}) with manage.py copy_store …", flush=True)
    done = subprocess.run([sys.executable, "manage.py", "copy_store", "--to", target, "--sample", str(sample)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        drop(name)
        raise RuntimeError(f"copy_store failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    lines = done.stdout.splitlines()
    seconds = next((float(x.split()[2]) for x in lines if x.startswith("done in ")), None)
    recalls = next((x.split(":", 1)[1].strip() for x in lines if x.startswith("same top ids")), "")
    known = {"url": target, "signature": signature, "copy_seconds": seconds, "recalls": recalls}
    marker.write_text(json.dumps(known))
    with _admin() as conn:  # the copy's gigabyte of dirty pages written now, not during the measurements next
        conn.execute("CHECKPOINT")
    return known


def clone(template_url: str, tag: str) -> str:
    """A fresh database cloned from ``template_url`` (for a benchmark that writes); drop it afterwards."""
    return create(f"{prefix()}_{tag}_{os.getpid()}", template=template_url.rsplit("/", 1)[-1])


# --- report ------------------------------------------------------------------------------------


def read_table(by_backend: dict[str, dict], backends: Sequence[str]) -> list[str]:
    """Markdown rows: every read path's median / p95 on each backend."""
    names = [n for n in by_backend[backends[0]] if "median_ms" in by_backend[backends[0]][n]]
    lines = ["| path | " + " | ".join(f"{LABELS[b]} median / p95 ms" for b in backends) + " |",
             "| --- | " + " | ".join("---:" for _ in backends) + " |"]
    for name in names:
        cells = []
        for b in backends:
            r = by_backend.get(b, {}).get(name)
            cells.append(f"{r['median_ms']} / {r['p95_ms']}" if r else "—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines
