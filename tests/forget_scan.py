"""Read every table and column of the store for forgotten words and index tokens (both backends).

The tables and columns come from the schema itself (SQLite: ``sqlite_master`` and
``table_xinfo``, which list virtual tables, FTS5 shadow tables and fts5vocab tables too;
PostgreSQL: ``information_schema``, and ``pg_stats``: the values the planner sampled), so a
table added later is read as well. Every value is
read: text and JSON as text (SQLite's JSON columns store non-ASCII as ``\\uXXXX``: both
spellings are looked for), binary values as bytes (UTF-8 of each needle).

:func:`needles` turns forgotten texts into what must not survive: the texts themselves and
their index tokens (jieba words and CJK pairs, ``memory.engine.tokenize.index_tokens``) of two
characters or more (numbers aside) that no kept text contains.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from django.db import connection

from memory.engine.tokenize import index_tokens


def needles(forgotten: Iterable[str], kept: Iterable[str] = ()) -> list[str]:
    """The forgotten texts and their distinctive index tokens (absent from every ``kept`` text)."""
    kept = list(kept)
    kept_tokens = {t for text in kept for t in index_tokens(text).split()}
    out: list[str] = []
    for text in forgotten:
        out.append(text)
        for token in index_tokens(text).split():
            if (len(token) >= 2 and not token.isdigit() and token not in kept_tokens
                    and not any(token in k for k in kept)):
                out.append(token)
    return list(dict.fromkeys(out))


def tables() -> list[tuple[str, list[str]]]:
    """Every table of the store with all its columns (SQLite: rowid too, for FTS5's shadow tables)."""
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            names = [r[0] for r in cur.fetchall()]
            out = []
            for name in names:
                cur.execute(f"SELECT name FROM pragma_table_xinfo('{name}')")
                out.append((name, [r[0] for r in cur.fetchall()]))
            return out
        cur.execute(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c"
            " JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
            " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
            " ORDER BY c.table_name, c.ordinal_position"
        )
        out: dict[str, list[str]] = {}
        for table, column in cur.fetchall():
            out.setdefault(table, []).append(column)
        # the planner's samples of every column (most common values, histogram bounds), as text
        out["pg_stats"] = ["most_common_vals", "histogram_bounds", "most_common_elems"]
        return sorted(out.items())


def _spellings(needle: str) -> tuple[list[str], list[bytes]]:
    text = [needle, json.dumps(needle)[1:-1]]  # as written, and as an ASCII-escaped JSON string
    return list(dict.fromkeys(text)), [s.encode("utf-8") for s in dict.fromkeys(text)]


def scan(found_in: Sequence[str]) -> list[tuple[str, str, str]]:
    """``(table, column, needle)`` for every needle found in any value of any column of any table."""
    spelled = {n: _spellings(n) for n in found_in}
    hits: set[tuple[str, str, str]] = set()
    sqlite = connection.vendor == "sqlite"
    for table, columns in tables():
        for column in columns:
            select = f'SELECT "{column}" FROM "{table}"' if sqlite else _pg_select(table, column)
            with connection.cursor() as cur:
                cur.execute(select)
                for row in cur.fetchall():
                    for value in row:
                        if value is None:
                            continue
                        if isinstance(value, memoryview):
                            value = value.tobytes()
                        for needle, (texts, blobs) in spelled.items():
                            if isinstance(value, bytes):
                                if any(b in value for b in blobs):
                                    hits.add((table, column, needle))
                            elif any(t in str(value) for t in texts):
                                hits.add((table, column, needle))
    return sorted(hits)


def _pg_select(table: str, column: str) -> str:
    """A PostgreSQL column as text, or as bytes when it is ``bytea``."""
    if table == "pg_stats":
        return f"SELECT {column}::text FROM pg_stats WHERE schemaname = current_schema()"
    with connection.cursor() as cur:
        cur.execute("SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema()"
                    " AND table_name = %s AND column_name = %s", [table, column])
        (kind,) = cur.fetchone()
    if kind == "bytea":
        return f'SELECT "{column}" FROM "{table}"'
    return f'SELECT "{column}"::text FROM "{table}"'
