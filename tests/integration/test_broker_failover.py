"""Half-open broker connections after a failover: the work stored meanwhile catches up within one sweep.

A real worker, a real beat and the web side (``tests.integration.driver``: the API through
Django's handler) reach Redis only through a TCP proxy (``tests/tcp_proxy.py``). After a
first stream is summarised through it (every process now holds pooled connections), the
proxy blackholes every connection — open, never forwarded, never closed: no process learns
of it from TCP — and 60 messages are stored into a second stream meanwhile (their checks
cannot be enqueued). Then the failover ends: new connections reach Redis, the old ones stay
blackholed for ever. The beat's sweep of due streams runs every ``STREAM_CHECKS_INTERVAL``
(shortened to 20 s here; 5 min deployed), so the stored messages must be summarised within
one such interval after the fault ends (plus the summarisation itself): every process
must find its stale connections dead and retry on fresh ones, not wait for a second sweep
(or for kombu's default 25 s health checks).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.integration.test_worker import READY, ROOT, Worker, _celery, env, poll, post, query, redis_test_db  # noqa: F401
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration

SWEEP_S = 20
#: The summarisation of one batch once its task arrives (no model: the local summariser), on a loaded machine.
SUMMARY_S = 20
FAULT_S = 8


def _episodes(values: dict[str, str], stream: str) -> int:
    return query(values, "SELECT count(*) FROM episodes e JOIN streams s ON s.id = e.stream_id"
                         " WHERE s.external_id = ? AND e.kind = 'conversation'", (stream,))[0][0]


def test_messages_stored_behind_a_blackholed_broker_are_summarised_within_one_sweep(env, tmp_path):  # noqa: F811
    parts = urlsplit(env["REDIS_URL"])
    proxy = TcpProxy(parts.port or 6379, target_host=parts.hostname or "127.0.0.1")
    values = {**env, "REDIS_URL": urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}")), "EMBEDDING_PROVIDER": "none",
              "STREAM_CHECKS_INTERVAL": str(SWEEP_S), "REDIS_HEALTH_CHECK_INTERVAL": "3", "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "worker.log"
    beat_log = tmp_path / "beat.log"
    # one pool process: the one whose pooled connections went half-open runs the sweep after the fault
    worker = Worker(values, log, concurrency="1")
    handle = open(beat_log, "ab")
    beat = subprocess.Popen([_celery(), "-A", "config", "beat", "--loglevel=INFO", "--schedule",
                             str(tmp_path / "beat-schedule")],
                            cwd=ROOT, env=values, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    handle.close()
    try:
        assert worker.wait_for_log("ready.", READY), log.read_text()[-3000:]
        # through the proxy, healthy: every process now holds pooled connections
        post(values, stream="before", n=60)
        assert poll(lambda: _episodes(values, "before") >= 1, READY), log.read_text()[-3000:]
        # the beat too (a loaded machine starts it late): its first sweep is sent SWEEP_S after it starts
        # (the sends of routine tasks are not logged: config/logs.py), so wait for that through the healthy proxy
        assert poll(lambda: "beat: Starting" in beat_log.read_text("utf-8", errors="replace"), READY)
        beat_started = time.monotonic()
        time.sleep(max(0.0, beat_started + SWEEP_S + 5 - time.monotonic()))

        proxy.blackhole()
        started = time.monotonic()
        post(values, stream="during", n=60)  # stored; their checks cannot reach Redis
        time.sleep(max(0.0, FAULT_S - (time.monotonic() - started)))
        assert _episodes(values, "during") == 0
        offset = len(log.read_text("utf-8", errors="replace"))
        proxy.heal()  # the failover is over: new connections work, the old ones stay blackholed
        healed = time.monotonic()

        caught_up = poll(lambda: _episodes(values, "during") >= 1, SWEEP_S + SUMMARY_S, interval=0.5)
        took = time.monotonic() - healed
        assert caught_up, (f"not summarised {took:.0f} s after the fault ended", log.read_text()[-4000:],
                           beat_log.read_text()[-2000:])
        print(f"summarised {took:.1f} s after the fault ended (sweep every {SWEEP_S} s)")
        # the first sweep after the fault got through: none gave up on a stale connection
        after = log.read_text("utf-8", errors="replace")[offset:]
        assert "stream_check_enqueue_failed" not in after, after[-4000:]
        assert beat.poll() is None and worker.proc.poll() is None
    finally:
        worker.stop()
        if beat.poll() is None:
            os.killpg(beat.pid, signal.SIGTERM)
            try:
                beat.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(beat.pid, signal.SIGKILL)
        proxy.close()

