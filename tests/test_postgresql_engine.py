"""config/postgresql: a kept connection's health check asks the server only when something is amiss."""
from __future__ import annotations

import time

import pytest
from django.db import connection

pytestmark = [
    pytest.mark.postgresql_only("the engine of DATABASE_URL; SQLite's connections have nothing to check"),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_an_idle_healthy_connection_is_usable_without_a_query(monkeypatch):
    connection.ensure_connection()
    assert connection.vendor == "postgresql" and connection.settings_dict["ENGINE"] == "config.postgresql"

    def no_query(*args, **kwargs):
        raise AssertionError("the health check asked the server")

    monkeypatch.setattr(connection.connection, "cursor", no_query)
    assert connection.is_usable()


def test_a_connection_the_server_ended_is_found_broken_and_replaced():
    import psycopg

    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with psycopg.connect(connection.connection.info.dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 10
    while connection.is_usable() and time.monotonic() < deadline:  # the server's goodbye reaches the socket
        time.sleep(0.02)
    assert not connection.is_usable()
    connection.health_check_done = False
    connection.close_if_health_check_failed()  # what a request's first query does
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        assert cur.fetchone()[0] != pid


def test_a_connection_inside_a_transaction_is_asked(monkeypatch):
    from django.db import transaction

    asked = []
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        real = connection.connection.cursor
        monkeypatch.setattr(connection.connection, "cursor", lambda *a, **k: asked.append(1) or real(*a, **k))
        assert connection.is_usable()
    assert asked  # not idle: Django's SELECT 1


def test_a_statement_run_again_is_prepared_once_per_connection():
    """Server-side binding with psycopg's preparing (PG_PREPARE_THRESHOLD, 5): a statement seen five times
    is prepared on its next run."""
    connection.ensure_connection()
    assert connection.connection.prepare_threshold == 5

    def prepared() -> int:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%+ 41%'")
            return cur.fetchone()[0]

    for i in range(4):
        with connection.cursor() as cur:
            cur.execute("SELECT %s::int + 41", [i])
            assert cur.fetchone()[0] == i + 41
    assert prepared() == 0
    for _ in range(2):  # seen five times: prepared on the next
        with connection.cursor() as cur:
            cur.execute("SELECT %s::int + 41", [9])
    assert prepared() == 1
