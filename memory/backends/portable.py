"""SQL text that both backends accept, for the statements the project builds by hand."""
from __future__ import annotations

from collections.abc import Sized


def in_placeholders(values: Sized) -> str:
    """The placeholders of ``IN (…)`` for ``values``: ``%s,%s,…`` — ``NULL`` when there are none.

    PostgreSQL rejects an empty ``IN ()`` as a syntax error (SQLite accepts it); ``x IN (NULL)``
    holds for no row on both. Every ``IN`` list of parameters is built here, so an empty one
    cannot reach the server.
    """
    return ",".join(["%s"] * len(values)) or "NULL"
