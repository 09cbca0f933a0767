"""SQLite's write-ahead log goes back into the database file off the request path.

A web process checkpoints only past ``SQLITE_WEB_WAL_AUTOCHECKPOINT`` pages; a worker's
connections at SQLite's own 1000 pages; the beat runs a passive checkpoint every minute.
"""
from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.db.backends.signals import connection_created

from memory import backends
from memory.pipeline.tasks import wal_checkpoint_task

pytestmark = pytest.mark.django_db


def _autocheckpoint() -> int:
    with connection.cursor() as cur:
        cur.execute("PRAGMA wal_autocheckpoint")
        return int(cur.fetchone()[0])


@pytest.mark.sqlite_only("PRAGMA wal_autocheckpoint")
def test_a_web_connection_leaves_checkpoints_to_workers_and_a_worker_takes_them():
    assert _autocheckpoint() == django_settings.SQLITE_WEB_WAL_AUTOCHECKPOINT == 10_000
    try:
        backends.checkpoint_on_commit()  # what a Celery worker does at start (config/celery.py)
        assert _autocheckpoint() == 1000
        backends.sqlite.set_autocheckpoint(connection, 5)
        connection_created.send(sender=type(connection), connection=connection)  # a connection opened later
        assert _autocheckpoint() == 1000
    finally:
        connection_created.disconnect(dispatch_uid="memory.backends.sqlite.checkpoint_on_commit")
        backends.sqlite.set_autocheckpoint(connection, django_settings.SQLITE_WEB_WAL_AUTOCHECKPOINT)


@pytest.mark.sqlite_only("PRAGMA wal_checkpoint")
def test_a_web_connection_lets_the_log_grow_and_the_task_copies_it_back(tmp_path, monkeypatch):
    # the project's own connection settings on a database file (the test database lives in memory)
    from django.db.backends.sqlite3.base import DatabaseWrapper

    web = DatabaseWrapper({**connection.settings_dict, "NAME": str(tmp_path / "wal.sqlite3")}, alias="wal")
    try:
        with web.cursor() as cur:
            cur.execute("CREATE TABLE t(x)")
            for i in range(1200):  # one commit each, as requests write: no commit checkpoints below 10,000 pages
                cur.execute("INSERT INTO t VALUES (%s)", [str(i)[-1] * 4000])
        monkeypatch.setattr(backends.sqlite, "connection", web)
        busy, log, done = wal_checkpoint_task()
        assert busy == 0 and log > 1000 and done == log  # every frame was still in the log
        assert wal_checkpoint_task()[2] == log  # nothing new: the same frames, already copied
    finally:
        web.close()


@pytest.mark.postgresql_only("the server checkpoints by itself")
def test_postgresql_needs_no_checkpoint_task():
    assert wal_checkpoint_task() is None
    backends.checkpoint_on_commit()  # nothing to set


def test_the_beat_checkpoints_every_minute():
    entry = django_settings.CELERY_BEAT_SCHEDULE["memory-wal-checkpoint"]
    assert entry["task"] == "memory.tasks.wal_checkpoint_task"
    assert entry["schedule"].minute == set(range(60))
