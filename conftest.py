"""Shared pytest configuration; app-specific fixtures live in tests/*/conftest.py."""
from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sqlite_only(reason): checks SQLite internals (FTS5 tables, PRAGMAs, the database file); "
        "skipped on PostgreSQL (DATABASE_URL)",
    )
    config.addinivalue_line("markers", "postgresql_only(reason): needs PostgreSQL (DATABASE_URL)")


def pytest_collection_modifyitems(config, items):
    import pytest
    from django.conf import settings

    postgresql = bool(settings.DATABASE_URL)
    for item in items:
        marker = item.get_closest_marker("sqlite_only" if postgresql else "postgresql_only")
        if marker is not None:
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(reason=f"{marker.name}: {reason}"))
