"""tests/dbenv.migrated_store: each integration store is a fresh, fully migrated copy of one template."""
from __future__ import annotations

import os

import pytest
from django.db.migrations.loader import MigrationLoader

from tests import dbenv

pytestmark = pytest.mark.integration  # the template is made by a `manage.py migrate` subprocess


def test_migrated_stores_are_independent_copies_with_every_migration_applied(tmp_path):
    first = dbenv.migrated_store({**os.environ, "MEMORY_DB": str(tmp_path / "first.sqlite3")})
    second = dbenv.migrated_store({**os.environ, "MEMORY_DB": str(tmp_path / "second.sqlite3")})
    if "DATABASE_URL" in first:  # PostgreSQL: a database of its own each
        assert first["DATABASE_URL"] != second["DATABASE_URL"]

    on_disk = {(app, name) for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations}
    for store in (first, second):
        assert set(dbenv.query(store, "SELECT app, name FROM django_migrations")) == on_disk
        assert dbenv.query(store, "SELECT count(*) FROM meta WHERE key = 'dbenv-probe'") == [(0,)]

    assert dbenv.query(first, "INSERT INTO meta (key, value) VALUES ('dbenv-probe', '1') RETURNING key") == [("dbenv-probe",)]
    assert dbenv.query(first, "SELECT value FROM meta WHERE key = 'dbenv-probe'") == [("1",)]
    assert dbenv.query(second, "SELECT count(*) FROM meta WHERE key = 'dbenv-probe'") == [(0,)]
    third = dbenv.migrated_store({**os.environ, "MEMORY_DB": str(tmp_path / "third.sqlite3")})
    assert dbenv.query(third, "SELECT count(*) FROM meta WHERE key = 'dbenv-probe'") == [(0,)]  # the template too
