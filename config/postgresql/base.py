"""Django's PostgreSQL backend, with a cheaper connection health check.

``CONN_HEALTH_CHECKS`` makes Django ask whether a kept connection still works before its
first use in each request; Django's PostgreSQL backend asks the server (``SELECT 1``), one
round trip per request — a third of a message's (the message itself is one statement,
``memory.backends.postgresql.store_message``). Here an idle connection is first looked at
without asking: libpq's status, the transaction state, and whether anything waits on the
socket. A server that ended the session (a restart, ``pg_terminate_backend``, an idle
timeout) sends its reason and closes, so the socket reads ready; only then — or when the
connection is not idle — does the check fall back to Django's ``SELECT 1``. A connection
found broken is closed and the request opens a new one, as with Django's check.

It also counts, per request, the writes that were committed and those whose outcome is
unknown — the connection broke after their ``COMMIT`` or autocommitted statement was sent —
so a request refused for a lost database can say whether it may have been applied
(``config/outage.py``). Counting costs a string test per statement.
"""
from __future__ import annotations

import select

import psycopg
from django.core.signals import request_started
from django.db import InterfaceError, OperationalError, connections
from django.db.backends.postgresql import base

from config.outage import unavailable

#: How a statement that writes nothing stored starts (anything else may write; SET changes the session only).
_READS = ("SELECT", "SHOW", "EXPLAIN", "SET ", "RESET")


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.writes_committed = 0  # this request's writes known to be committed
        self.writes_unknown = 0  # this request's writes sent when the connection broke: committed or not
        self._transaction_wrote = False
        self.execute_wrappers.append(self._count_writes)

    def _count_writes(self, execute, sql, params, many, context):
        if isinstance(sql, str) and sql.lstrip()[:7].upper().startswith(_READS):
            return execute(sql, params, many, context)
        if not self.autocommit:  # inside a transaction: it counts at its COMMIT
            self._transaction_wrote = True
            return execute(sql, params, many, context)
        try:
            result = execute(sql, params, many, context)
        except (OperationalError, InterfaceError) as exc:
            if _lost(exc):
                self.writes_unknown += 1
            raise
        self.writes_committed += 1
        return result

    def _commit(self):
        wrote, self._transaction_wrote = self._transaction_wrote, False
        try:
            result = super()._commit()
        except (OperationalError, InterfaceError) as exc:
            if wrote and _lost(exc):
                self.writes_unknown += 1
            raise
        if wrote:
            self.writes_committed += 1
        return result

    def _rollback(self):
        self._transaction_wrote = False
        return super()._rollback()

    def is_usable(self) -> bool:
        conn = self.connection
        if conn is None or conn.closed:
            return False
        idle = (conn.pgconn.status == psycopg.pq.ConnStatus.OK
                and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)
        if idle:
            try:
                waiting, _, _ = select.select([conn.fileno()], [], [], 0)
            except (OSError, ValueError):  # the socket is gone
                return False
            if not waiting:
                return True
        return super().is_usable()  # something arrived unasked, or not idle: ask the server


def _lost(exc: BaseException) -> bool:
    """The connection broke while the statement was on its way or being answered (not before it was sent)."""
    # psycopg refuses a closed or broken connection before sending anything
    return unavailable(exc) and not str(exc.__cause__ or exc).startswith("the connection is")


def _new_request(**kwargs) -> None:
    for each in connections.all(initialized_only=True):
        if isinstance(each, DatabaseWrapper):
            each.writes_committed = each.writes_unknown = 0


request_started.connect(_new_request, dispatch_uid="config.postgresql.count_writes")
