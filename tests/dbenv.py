"""The store a test's subprocesses (workers, web servers, drivers) use: the suite's backend, fresh.

On SQLite a test points its processes at a file of its own (``MEMORY_DB``). When the suite
runs on PostgreSQL (``DATABASE_URL``), :func:`store_env` creates a throwaway database named
after the configured one (``<name>_it_<random>``), points ``DATABASE_URL`` at it and drops
it when the test session ends; :func:`query` reads either.

:func:`migrated_store` gives the fresh store its schema too: ``manage.py migrate`` runs once per
test session into a template store (~2 s of CPU each time it would otherwise run), and each store
is a copy of it (SQLite: the file; PostgreSQL: ``CREATE DATABASE … TEMPLATE``).
"""
from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
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
    values["DATABASE_URL"] = _new_database(url)
    return values


def _new_database(url: str, template: str | None = None) -> str:
    """The URL of a new PostgreSQL database beside ``url``'s (a copy of ``template`` when given), dropped at exit."""
    import psycopg

    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/')}_it_{uuid.uuid4().hex[:10]}"[:63]
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    atexit.register(_drop, admin, name)
    return urlunsplit(parts._replace(path=f"/{name}"))


ROOT = Path(__file__).resolve().parents[1]
_TEMPLATES: dict[str, str] = {}  # backend URL ("" for SQLite) → the migrated template store of this session


def _migrate(values: dict[str, str]) -> None:
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True,
                   timeout=300, env={**values, "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONPATH": str(ROOT),
                                     "MEMORY_ENQUEUE_TASKS": "0", "EMBEDDING_PROVIDER": "none"})


def _template(values: dict[str, str]) -> str:
    """The migrated template of the suite's backend: a SQLite file, or a PostgreSQL database name."""
    url = os.environ.get("DATABASE_URL", "").strip()
    if url in _TEMPLATES:
        return _TEMPLATES[url]
    if not url:
        folder = tempfile.mkdtemp(prefix="memory-template-")
        atexit.register(shutil.rmtree, folder, True)
        path = str(Path(folder) / "template.sqlite3")
        _migrate({**{k: v for k, v in values.items() if k != "DATABASE_URL"}, "MEMORY_DB": path})
        with sqlite3.connect(path) as db:  # everything in the main file: a plain copy is then the whole store
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        _TEMPLATES[url] = path
    else:
        template = store_env({**values})
        _migrate(template)
        _TEMPLATES[url] = urlsplit(template["DATABASE_URL"]).path.lstrip("/")
    return _TEMPLATES[url]


def migrated_store(values: dict[str, str]) -> dict[str, str]:
    """:func:`store_env`, migrated: ``values`` (``MEMORY_DB`` set) gets a fresh store with every migration applied."""
    template = _template(values)
    url = os.environ.get("DATABASE_URL", "").strip()
    if not url:
        values.pop("DATABASE_URL", None)
        shutil.copyfile(template, values["MEMORY_DB"])
        return values
    values["DATABASE_URL"] = _new_database(url, template)
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
