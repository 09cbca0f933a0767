"""A database that cannot be reached: 503 with Retry-After, one log line per outage, and what was applied.

The whole outage, under load through gunicorn and a proxy, is tests/integration/test_database_outage.py;
here each mechanism on its own: which errors mean "unavailable", the rate-limited line, Django's
per-request line dropped, the answer of a request refused before it wrote (not applied) and of
one whose write was lost in flight (may have been applied: resend with the same external id).
"""
from __future__ import annotations

import logging
import socket

import psycopg
import pytest
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, connection

from config import outage
from config.logs import OutageReported
from memory.models import Message
from tests.api.conftest import person, stream

NOT_APPLIED = "the database is unavailable; the request was not applied, retry shortly"


def _wrapped(django_class, cause: BaseException) -> BaseException:
    exc = django_class(*cause.args)
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize("cause, expected", [
    (psycopg.OperationalError("connection failed: connection to server at \"127.0.0.1\", port 5432 failed:"
                              " Connection refused"), True),
    (psycopg.errors.lookup("57P03")("the database system is starting up"), True),
    (psycopg.errors.lookup("57P01")("terminating connection due to administrator command"), True),
    (psycopg.errors.lookup("08006")("connection failure"), True),
    (psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"), True),
    (psycopg.errors.lookup("57014")("canceling statement due to statement timeout"), False),
    (psycopg.errors.lookup("55P03")("could not obtain lock on row"), False),
    (psycopg.errors.lookup("53300")("sorry, too many clients already"), False),
])
def test_what_counts_as_the_database_being_unavailable(cause, expected):
    assert outage.unavailable(_wrapped(OperationalError, cause)) is expected


def test_statement_errors_and_sqlite_are_not_an_outage():
    assert not outage.unavailable(_wrapped(IntegrityError, psycopg.errors.lookup("23505")("duplicate key")))
    assert not outage.unavailable(OperationalError("database is locked"))  # SQLite: busy, its own 503
    assert not outage.unavailable(DatabaseError("something else"))
    assert outage.unavailable(_wrapped(InterfaceError, psycopg.InterfaceError("the connection is closed")))


def test_an_outage_is_logged_once_then_at_most_every_ten_seconds(caplog, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(outage.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(outage, "_last_failure", None)
    exc = _wrapped(OperationalError, psycopg.errors.lookup("57P03")("the database system is starting up"))
    with caplog.at_level(logging.WARNING, logger="memory.database"):
        for _ in range(200):  # 200 refused requests in 25 s
            outage.report(exc, "POST /api/v1/messages")
            clock[0] += 0.125
        clock[0] += outage.QUIET_SECONDS + 1  # a second outage later on
        outage.report(exc, "POST /api/v1/messages")
    lines = [r.getMessage() for r in caplog.records if r.name == "memory.database"]
    assert [line.split()[0] for line in lines] == ["database_unavailable", "database_still_unavailable",
                                                    "database_still_unavailable", "database_unavailable"]
    assert "[57P03]" in lines[0] and "refused=81" in lines[1]


def test_djangos_line_of_each_refused_request_is_dropped():
    class Request:
        database_outage = True

    def record(status: int, request) -> logging.LogRecord:
        made = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Service Unavailable: %s",
                                 ("/api/v1/messages",), None)
        made.status_code, made.request = status, request
        return made

    keep = OutageReported()
    assert not keep.filter(record(503, Request()))
    assert keep.filter(record(503, object()))  # a 503 of anything else (a busy SQLite, the broker) stays
    assert keep.filter(record(500, Request()))


# --- through the API, on PostgreSQL -------------------------------------------------------------------------

pg = pytest.mark.postgresql_only("the connection counters live in the PostgreSQL backend (config/postgresql/)")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _message(ext: str) -> dict:
    return {"stream": stream(), "sender": person(), "role": "user", "content": "我明天去杭州", "external_message_id": ext}


@pg
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_refused_connection_answers_503_not_applied_and_recovers(api, caplog, monkeypatch):
    assert api.post("messages", _message("m-0")).status_code == 201  # the token is cached from here on
    monkeypatch.setattr(outage, "_last_failure", None)
    real_port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = _closed_port()
    try:
        with caplog.at_level(logging.WARNING):
            answers = [api.post("messages", _message(f"m-{i}")) for i in range(1, 6)]
    finally:
        connection.close()
        connection.settings_dict["PORT"] = real_port
    for response in answers:
        assert response.status_code == 503, response.content
        assert response["Retry-After"] == str(outage.RETRY_AFTER_SECONDS)
        assert response.json()["detail"] == NOT_APPLIED
        assert response.wsgi_request.database_outage is True
    ours = [r for r in caplog.records if r.name == "memory.database"]
    assert len(ours) == 1 and "database_unavailable" in ours[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)  # no traceback

    again = api.post("messages", _message("m-1"))  # back: the same request is stored now
    assert again.status_code == 201, again.content
    assert sorted(Message.objects.values_list("external_message_id", flat=True)) == ["m-0", "m-1"]


@pg
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_write_lost_in_flight_may_have_been_applied_and_is_resent_safely(api):
    assert api.post("messages", _message("warm")).status_code == 201

    def lost_after_commit(execute, sql, params, many, context):
        result = execute(sql, params, many, context)  # autocommitted: the row is stored
        if "INSERT INTO messages" in sql:
            cause = psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
            raise _wrapped(OperationalError, cause)  # … and the answer never arrives
        return result

    with connection.execute_wrapper(lost_after_commit):
        response = api.post("messages", _message("m-lost"))
    assert response.status_code == 503
    assert response["Retry-After"]
    assert "may have been applied; resend it with the same external_message_id" in response.json()["detail"]
    stored = Message.objects.get(external_message_id="m-lost")

    again = api.post("messages", _message("m-lost"))  # the resend the answer asked for: stored once
    assert again.status_code == 200 and again.json()["id"] == stored.pk
    assert Message.objects.filter(external_message_id="m-lost").count() == 1


@pg
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_console_page_and_the_health_check_answer_503_while_the_database_is_away(client, django_user_model,
                                                                                   monkeypatch):
    from django.urls import reverse

    user = django_user_model.objects.create_superuser("outage-admin", password="x" * 12)
    client.force_login(user)
    assert client.get(reverse("console:dashboard")).status_code == 200
    monkeypatch.setattr(outage, "_last_failure", None)
    real_port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = _closed_port()
    try:
        page = client.get(reverse("console:dashboard"), headers={"Accept-Language": "en"})
        health = client.get("/healthz")
    finally:
        connection.close()
        connection.settings_dict["PORT"] = real_port
    assert page.status_code == 503 and page["Retry-After"] == str(outage.RETRY_AFTER_SECONDS)
    assert "nothing was changed" in page.content.decode()
    assert health.status_code == 503 and health.wsgi_request.database_outage is True
    assert client.get(reverse("console:dashboard")).status_code == 200
