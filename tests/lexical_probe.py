"""What a lexical index holds, read straight from the backend (FTS5 tables or PostgreSQL postings)."""
from __future__ import annotations

from django.db import connection


def docs(table: str, term: str) -> int:
    """How many indexed rows of ``table`` (``facts_fts`` …) hold ``term`` (0 when none)."""
    if connection.vendor == "postgresql":
        from memory.backends import postgresql

        return postgresql.document_frequencies(table, [term]).get(term, 0)
    with connection.cursor() as cur:
        cur.execute(f"SELECT doc FROM {table}_vocab WHERE term = %s", [term])
        row = cur.fetchone()
    return int(row[0]) if row else 0


def rows(table: str) -> int:
    """Indexed rows of ``table`` (uncached)."""
    if connection.vendor == "postgresql":
        from memory.backends import postgresql

        return postgresql.document_count(table)
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table}_docsize")
        return int(cur.fetchone()[0])
