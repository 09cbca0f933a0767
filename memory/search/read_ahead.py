"""Read ahead: a block of code (a turn's prepare, its confirm) names the reads it will make, and
they are made once — on PostgreSQL together, in one round trip before the block starts.

Why: a turn reads a dozen small things (the stream's recent messages, the present persons'
facts, the due facts, the episodes' cues, the resident indexes' change logs …) from code spread
over several modules. Made one by one, each is a round trip to PostgreSQL; several are made more
than once (each query line of a turn scores the same persons' facts). So the turn declares them
first, and the code that needs a result asks for it by the same :class:`Read` value, wherever it is.

The contract
============

* A :class:`Read` is a value: a ``key`` (what its result is remembered under — two reads with
  the same key are the same read), an SQL statement with its parameters, and ``convert`` making
  the result from the rows. It does not change memory.
* :func:`one_state` opens a block. Inside it :func:`read` returns the result of a read, made at
  most once per block: already made if the block was opened with it (``reads=``), else made on
  first use. :func:`once` does the same for any computation (a scope built from reads, a count).
  Outside a block both simply compute, every time: code that uses them works unchanged when it
  is not called from a turn.
* On PostgreSQL :func:`one_state` sends the declared reads, and the change-log polls of the
  resident indexes of ``tables`` (:mod:`memory.search.lexical_index`), as one round trip. Each
  statement of that round trip has its own snapshot; code that needs two results to agree must
  reconcile them (:func:`memory.search.lexical.scope_of` does).
* Inside a block nothing is refreshed: a block sees the state it read, even after it wrote.
  Code that writes and must read its write again calls :func:`drop` for that read (a turn's
  sweep that froze facts re-reads the scope it had read ahead).
* A read declared before its parameters were known (a query for "the present persons' facts"
  written as a subquery) may answer a read of the same columns made once they are:
  :func:`serve_from` files its rows under the other read's key; :func:`has` says whether a read was
  made in this block.
* :func:`kept_state` is :func:`one_state` with a state the caller keeps from one block to the
  next (a fit replays the same turns under each parameter set it tries, against one snapshot).

Only the tables' refresh belongs to the resident indexes; they hand it to this module through
:func:`register_tables_ahead` so this module knows nothing of them.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.db import connection

from memory import backends

__all__ = [
    "Read", "drop", "has", "kept_state", "once", "one_state", "read", "register_tables_ahead", "serve_from", "within",
]

_state: ContextVar[dict | None] = ContextVar("read_ahead_state", default=None)

#: One statement of a round trip: ``(sql, params, binary)`` (:func:`memory.backends.postgresql.read_together`).
Statement = tuple[str, Sequence[Any], bool]
#: Given the FTS tables a block reads: the statements to send ahead and what to do with their rows.
TablesAhead = Callable[[Sequence[str]], tuple[list[Statement], Callable[[list], None]]]
_tables_ahead: TablesAhead | None = None


@dataclass(frozen=True)
class Read:
    """A read a block will make (:func:`read`), known before it starts: the key its result is
    remembered under, its statement, and ``convert`` making the result of its rows."""

    key: tuple
    sql: str
    params: Sequence[Any]
    convert: Callable[[list[tuple]], Any] = list
    binary: bool = False  # large bytea columns (vectors): :func:`memory.backends.fetch_binary`


def register_tables_ahead(ahead: TablesAhead) -> None:
    """How the resident indexes poll their change logs with a block's reads (:mod:`memory.search.lexical_index`)."""
    global _tables_ahead
    _tables_ahead = ahead


@contextmanager
def one_state(*tables: str, reads: Sequence[Read] = ()) -> Iterator[None]:
    """A block whose reads are made once (module docstring). ``tables``: the FTS tables it reads
    through their resident indexes (each brought up to date once); ``reads``: the reads it will
    make. On PostgreSQL both go in one round trip before the block."""
    token = _state.set({})
    try:
        if backends.is_postgresql() and (len(tables) > 1 or reads):
            _read_together(tables, reads)
        yield
    finally:
        _state.reset(token)


@contextmanager
def kept_state(state: dict) -> Iterator[None]:
    """As :func:`one_state`, with a state the caller keeps from one block to the next: what the
    blocks read is read once for all of them, and nothing kept is refreshed while the caller keeps
    ``state``."""
    token = _state.set(state)
    try:
        yield
    finally:
        _state.reset(token)


@contextmanager
def within() -> Iterator[None]:
    """The block around, or a new one with nothing read ahead when there is none: what the code
    inside reads, it reads once (a caller outside a turn — the inspector, the playground — too)."""
    if _state.get() is not None:
        yield
        return
    token = _state.set({})
    try:
        yield
    finally:
        _state.reset(token)


def read(r: Read) -> Any:
    """The result of ``r``: inside a block made once (or already, with the block's other reads), else now."""

    def run() -> Any:
        if r.binary:
            return r.convert(backends.fetch_binary(r.sql, r.params))
        with connection.cursor() as cur:
            cur.execute(r.sql, r.params)
            return r.convert(cur.fetchall())

    return once(r.key, run)


def once(key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()``, once per ``key`` inside a block (every time outside one)."""
    state = _state.get()
    if state is None:
        return compute()
    if key not in state:
        state[key] = compute()
    return state[key]


def holds(key: tuple) -> bool:
    """Whether the block around has a value for ``key`` (:func:`once`'s) already."""
    state = _state.get()
    return state is not None and key in state


def has(r: Read) -> bool:
    """Whether the block around has the result of ``r`` already (read ahead, or read before)."""
    return holds(r.key)


def drop(r: Read) -> None:
    """Inside a block: forget the result of ``r``, so it is read again when next needed (the block
    has since changed what it reads)."""
    state = _state.get()
    if state is not None:
        state.pop(r.key, None)


def serve_from(ahead: Read, target: Read, keep: Callable[[tuple], bool] | None = None) -> None:
    """Inside a block: when ``ahead`` (a read of the same columns as ``target``, its result the
    list of rows) was read before ``target``'s parameters were known, its rows — those ``keep``
    keeps — are ``target``'s result, so reading ``target`` sends nothing."""
    state = _state.get()
    if state is not None and ahead.key in state and target.key not in state:
        rows = state[ahead.key]
        state[target.key] = target.convert([row for row in rows if keep is None or keep(row)])


def _read_together(tables: Sequence[str], reads: Sequence[Read]) -> None:
    """PostgreSQL: the tables' change-log polls and ``reads`` in one round trip, before the block."""
    ahead, apply = _tables_ahead(tables) if _tables_ahead is not None and tables else ([], None)
    results = backends.postgresql.read_together([*ahead, *((r.sql, r.params, r.binary) for r in reads)])
    if apply is not None:
        apply(results[:len(ahead)])
    state = _state.get()
    for r, rows in zip(reads, results[len(ahead):], strict=True):
        state[r.key] = r.convert(rows)
