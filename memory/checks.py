"""System checks: the memory layers cannot work without SQLite FTS5."""
from __future__ import annotations

import sqlite3
from typing import Any

from django.conf import settings
from django.core import checks


def fts5_available() -> bool:
    """True when the sqlite3 library this Python links against has FTS5."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE probe USING fts5(tokens)")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


@checks.register(checks.Tags.database)
def check_fts5(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        return errors  # PostgreSQL ranks from its own postings tables (memory/backends/postgresql.py)
    if not fts5_available():
        errors.append(
            checks.Error(
                f"SQLite {sqlite3.sqlite_version} has no FTS5 module.",
                hint="Install a Python whose sqlite3 is built with FTS5 (SQLite >= 3.35 with ENABLE_FTS5).",
                id="memory.E001",
            )
        )
    elif sqlite3.sqlite_version_info < (3, 35, 0):
        errors.append(
            checks.Error(f"SQLite {sqlite3.sqlite_version} is older than 3.35.", id="memory.E002")
        )
    return errors
