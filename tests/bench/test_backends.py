"""bench/backends.py: which backends a run measures and how a target is addressed."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench import backends


def test_requested_names_and_aliases(monkeypatch):
    assert backends.requested("pg, sqlite") == ["postgresql", "sqlite"]
    assert backends.requested("sqlite,sqlite3") == ["sqlite"]
    monkeypatch.setenv("BENCH_BACKENDS", "postgres")
    assert backends.requested() == ["postgresql"]
    with pytest.raises(SystemExit, match="mysql"):
        backends.requested("sqlite,mysql")


def test_env_points_at_one_backend_only():
    pg = backends.env_for("postgres://u@h:5432/x", {"MEMORY_DB": "/tmp/a.sqlite3", "KEEP": "1"})
    assert pg == {"DATABASE_URL": "postgres://u@h:5432/x", "KEEP": "1"}
    lite = backends.env_for(Path("/tmp/b.sqlite3"), {"DATABASE_URL": "postgres://u@h/x"})
    assert lite == {"MEMORY_DB": "/tmp/b.sqlite3"}
    assert backends.is_pg("postgresql://h/x") and not backends.is_pg(Path("postgres.sqlite3"))


def test_read_table_puts_backends_side_by_side():
    by = {"sqlite": {"recall": {"median_ms": 1.0, "p95_ms": 2.0}, "whole_table:facts": {"rows": 3}},
          "postgresql": {"recall": {"median_ms": 1.5, "p95_ms": 3.0}}}
    assert backends.read_table(by, ["sqlite", "postgresql"]) == [
        "| path | SQLite median / p95 ms | PostgreSQL median / p95 ms |",
        "| --- | ---: | ---: |",
        "| recall | 1.0 / 2.0 | 1.5 / 3.0 |",
    ]
