"""PostgreSQL: a revision bump reads a non-numeric ``meta`` value as 0 instead of failing.

0020's ``memory_bump_revision`` cast the counter with ``split_part(value, '-', 1)::bigint``,
so any value not starting with digits made every trigger calling it (fact, cue and
knowledge deletes and token changes) raise. SQLite's ``CAST(value AS INTEGER)`` reads such
a value as 0; the function now does the same (memory/backends/postgresql.py). Nothing on SQLite.
"""
from __future__ import annotations

from django.db import migrations

from memory.backends import postgresql as pg
from memory.backends import sql_for


class Migration(migrations.Migration):
    dependencies = [("memory", "0022_message_tokens_as_terms")]

    operations = [sql_for(postgresql=[pg.BUMP_REVISION_FUNCTION])]
