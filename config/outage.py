"""A database that cannot be reached: 503 with ``Retry-After``, one log line per outage, and the truth.

PostgreSQL refusing connections, starting up, shutting down, or a connection lost in the
middle of a request is not a bug of the request: every request meeting it answers ``503``
with ``Retry-After`` (the API its JSON error, the console a short page) instead of a 500 with
a traceback, and the service recovers on its own — the next request opens a new connection
(Django closes a broken one at the end of the request, ``CONN_HEALTH_CHECKS`` before reuse).

**Logged once per outage**, not once per request: the first failure after
:data:`QUIET_SECONDS` without one writes ``database_unavailable``; while it lasts, at most one
``database_still_unavailable`` line per :data:`REPEAT_SECONDS` counts the refused requests
(per process). Django's own ``Service Unavailable: <path>`` line of each such response is
dropped (``config.logs.OutageReported``).

**What was applied.** The PostgreSQL backend (``config/postgresql/base.py``) counts, per
request, the writes that were committed and those whose outcome is unknown (the connection
broke after a ``COMMIT`` or an autocommitted write was sent). With neither, the request was
not applied and says so; otherwise it says it may have been applied — a message is then
resent with the same ``external_message_id`` (a repeat is never stored twice).
"""
from __future__ import annotations

import logging
import threading
import time

import psycopg
from django.db import DatabaseError, InterfaceError, OperationalError, connection

logger = logging.getLogger("memory.database")

#: A failure this long after the previous one starts a new outage (a new first line).
QUIET_SECONDS = 5.0
#: While an outage lasts, at most one line this often (per process).
REPEAT_SECONDS = 10.0
#: What a client is asked to wait before it tries again.
RETRY_AFTER_SECONDS = 5

#: SQLSTATE classes of a server that cannot serve now: 08 connection exception; 57P operator
#: intervention (57P01 admin shutdown, 57P02 crash shutdown, 57P03 "the database system is starting up").
UNAVAILABLE_SQLSTATES = ("08", "57P")

_lock = threading.Lock()
_last_failure: float | None = None
_last_line = 0.0
_started = 0.0
_refused = 0


def unavailable(exc: BaseException) -> bool:
    """True when ``exc`` says the database cannot be reached or is not serving, not that a statement failed."""
    if not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    cause = exc.__cause__  # SQLite's errors have none of psycopg's causes: "database is locked" is its own 503
    if isinstance(cause, psycopg.InterfaceError):  # "the connection is closed"
        return True
    if isinstance(exc, InterfaceError) and cause is None:  # Django's own "connection already closed"
        return "closed" in str(exc)
    if not isinstance(cause, psycopg.OperationalError):
        return False
    state = cause.sqlstate
    # no SQLSTATE: libpq's own error — the connection failed or was lost (no server sent a reason)
    return state is None or state.startswith(UNAVAILABLE_SQLSTATES)


def applied() -> tuple[int, int]:
    """``(committed, unknown)`` writes of the current request on the default connection."""
    return getattr(connection, "writes_committed", 0), getattr(connection, "writes_unknown", 0)


def may_have_been_applied() -> bool:
    committed, unknown = applied()
    return bool(committed or unknown)


def report(exc: BaseException, where: str) -> None:
    """Count one request refused for ``exc``; log it only when it starts an outage or a while has passed."""
    global _last_failure, _last_line, _started, _refused
    now = time.monotonic()
    with _lock:
        if _last_failure is None or now - _last_failure > QUIET_SECONDS:
            _started, _refused, _last_line = now, 0, now
            line = ("database_unavailable where=%s error=%s: answering 503 until it is back", where, _describe(exc))
        elif now - _last_line >= REPEAT_SECONDS:
            _last_line = now
            line = ("database_still_unavailable for=%.0fs refused=%d error=%s", now - _started, _refused + 1,
                    _describe(exc))
        else:
            line = None
        _last_failure = now
        _refused += 1
    if line is not None:
        logger.warning(*line)


def detail(request_path: str, method: str) -> str:
    """What a refused request says about itself (API and console alike)."""
    if not may_have_been_applied():
        return "the database is unavailable; the request was not applied, retry shortly"
    if method == "POST" and request_path.rstrip("/").endswith("/messages"):
        return ("the database connection was lost while the request was being applied: it may have been applied;"
                " resend it with the same external_message_id (a repeat is not stored twice)")
    return ("the database connection was lost while the request was being applied: it may have been applied;"
            " check before resending it")


def mark(request) -> None:
    """Tell ``config.logs.OutageReported`` that this request's 503 is already counted."""
    try:
        request.database_outage = True
    except AttributeError:
        pass


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, DatabaseError) and exc.__cause__ is not None and getattr(exc.__cause__, "sqlstate", None):
        text = f"[{exc.__cause__.sqlstate}] {text}"
    return f"{type(exc).__name__}: {text}"[:300]
