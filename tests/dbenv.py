"""The store a test's subprocesses (workers, web servers, drivers) use: the suite's backend, fresh.

On SQLite a test points its processes at a file of its own (``MEMORY_DB``). When the suite
runs on PostgreSQL (``DATABASE_URL``), :func:`store_env` creates a throwaway database named
after the configured one (``<name>_it_<random>``), points ``DATABASE_URL`` at it and drops
it when the test session ends; :func:`query` reads either.
"""
from __future__ import annotations

import atexit
import os
import sqlite3
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit


def _drop(admin: str, name: str) -> None:
    import psycopg

    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error:
        pass


def store_env(values: dict[str, str]) -> dict[str, str]:
    """Give ``values`` (a subprocess environment with ``MEMORY_DB`` set) a fresh store of the suite's backend."""
    url = os.environ.get("DATABASE_URL", "").strip()
    if not url:
        values.pop("DATABASE_URL", None)
        return values
    import psycopg

    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/')}_it_{uuid.uuid4().hex[:10]}"[:63]
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    atexit.register(_drop, admin, name)
    values["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{name}"))
    return values


def query(values: dict[str, str], sql: str, params: tuple = ()) -> list[tuple[Any, ...]]:
    """Run one read against the store ``values`` points at (``?`` placeholders)."""
    url = values.get("DATABASE_URL")
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), params).fetchall()]
    with sqlite3.connect(values["MEMORY_DB"], timeout=30) as db:
        return db.execute(sql, params).fetchall()
