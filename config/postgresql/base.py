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
"""
from __future__ import annotations

import select

import psycopg
from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
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
