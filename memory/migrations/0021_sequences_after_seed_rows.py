"""PostgreSQL: move the id sequences past the rows migration 0002 created with explicit ids.

0002 creates the owner person and the desktop stream with ``pk=1``. SQLite's next id is
``max(rowid) + 1`` anyway; a PostgreSQL sequence does not see explicit ids, so the next
stream or person would be given id 1 again (an IntegrityError that ``resolve_stream``
turns into "Stream matching query does not exist"). Idempotent; nothing on SQLite.
"""
from __future__ import annotations

from django.db import migrations

from memory.backends import sql_for

TABLES = ("persons", "streams")


class Migration(migrations.Migration):
    dependencies = [("memory", "0020_postgresql")]

    operations = [
        sql_for(postgresql=[
            f"SELECT setval(pg_get_serial_sequence('{t}', 'id'), coalesce(max(id), 1), max(id) IS NOT NULL) FROM {t}"
            for t in TABLES
        ]),
    ]
