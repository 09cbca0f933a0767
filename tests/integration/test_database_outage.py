"""PostgreSQL goes away under load and comes back: 503 + Retry-After meanwhile, one log line, nothing lost.

gunicorn (``config/gunicorn.py``, two workers of two threads, DEBUG off) reaches a PostgreSQL
database of this test only through a TCP proxy (``tests/tcp_proxy.py``); the server itself is
never touched. Four clients post messages as fast as they are answered, each with its own
``external_message_id``, and never resend. Meanwhile the proxy

1. closes every connection and refuses new ones (``Connection refused``: a stopped server);
2. answers every new connection as a server that is starting up (SQLSTATE 57P03);
3. forwards again (the server is back).

Asserted: while it is down every answer is 503 with ``Retry-After`` and says whether the
request may have been applied; one that says "not applied" is not stored; every 2xx message
is stored; the web processes log at most one line per second and no traceback; the same
processes answer 2xx again within a second of the return (no restart).
"""
from __future__ import annotations

import http.client
import json
import math
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests import dbenv
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration,
              pytest.mark.postgresql_only("a PostgreSQL of the test's own behind a proxy that the test breaks")]

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 4
#: An access line of gunicorn (config/logs.py WebLogger.access_fmt): one per request, not a log line about the outage.
ACCESS = re.compile(r"^\[[^\]]*: INFO/web\] ")
NOT_APPLIED = "the database is unavailable; the request was not applied, retry shortly"
MAY_HAVE = "may have been applied; resend it with the same external_message_id"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def starting_up(sock: socket.socket) -> None:
    """Play a PostgreSQL server that is starting up: refuse TLS, read the startup packet, answer FATAL 57P03."""
    while True:
        length, code = struct.unpack("!ii", _recv_exact(sock, 8))
        if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest: not here
            sock.sendall(b"N")
            continue
        _recv_exact(sock, length - 8)
        break
    fields = b"SFATAL\0VFATAL\0C57P03\0Mthe database system is starting up\0\0"
    sock.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)


class Load:
    """``CLIENTS`` threads posting messages; every answer recorded with when its request started."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.results: list[dict] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(CLIENTS)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _run(self, client: int) -> None:
        n = 0
        while not self._stop.is_set():
            ext = f"c{client}-{n}"
            n += 1
            body = json.dumps({"stream": {"platform": "qq", "kind": "group", "external_id": f"outage-{client}",
                                          "name": f"群{client}"},
                               "sender": {"platform": "qq", "external_id": f"u{client}", "name": f"用户{client}"},
                               "role": "user", "content": f"第{n}条消息：我明天去杭州看西湖", "external_message_id": ext})
            started = time.monotonic()
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                conn.request("POST", "/api/v1/messages", body=body.encode(),
                             headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
                response = conn.getresponse()
                record = {"ext": ext, "status": response.status, "body": response.read().decode(),
                          "retry_after": response.getheader("Retry-After"), "started": started,
                          "ended": time.monotonic()}
            except OSError as exc:
                record = {"ext": ext, "status": 0, "body": repr(exc), "retry_after": None, "started": started,
                          "ended": time.monotonic()}
            finally:
                conn.close()
            with self._lock:
                self.results.append(record)


@pytest.fixture
def deployment(tmp_path):
    values = dict(os.environ)
    values.update(DJANGO_SETTINGS_MODULE="config.settings", MEMORY_DB=str(tmp_path / "unused.sqlite3"),
                  MEMORY_ENQUEUE_TASKS="0", EMBEDDING_PROVIDER="none", LLM_BASE_URL="", PYTHONPATH=str(ROOT),
                  DJANGO_DEBUG="0", DJANGO_SECRET_KEY="outage-test-" + "k" * 40, LOG_LEVEL="INFO",
                  PYTHONUNBUFFERED="1", WEB_CONCURRENCY="2", GUNICORN_THREADS="2")
    dbenv.migrated_store(values)
    direct = values["DATABASE_URL"]
    token = subprocess.run([sys.executable, "manage.py", "create_api_token", "outage-bot", "--scope", "bot"],
                           cwd=ROOT, env=values, capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    parts = urlsplit(direct)
    proxy = TcpProxy(parts.port or 5432, target_host=parts.hostname or "127.0.0.1")
    web_env = {**values, "DATABASE_URL": urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@"
                                                                          f"127.0.0.1:{proxy.port}"))}
    port = _free_port()
    log = tmp_path / "web.log"
    handle = open(log, "ab")
    web = subprocess.Popen([str(Path(sys.executable).with_name("gunicorn")), "-c", "config/gunicorn.py", "config.wsgi",
                            "--bind", f"127.0.0.1:{port}"],
                           cwd=ROOT, env=web_env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    handle.close()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _health(port) != 200:
            assert web.poll() is None, log.read_text()[-3000:]
            time.sleep(0.3)
        assert _health(port) == 200, log.read_text()[-3000:]
        yield {"port": port, "token": token, "proxy": proxy, "log": log, "direct": {**values}}
    finally:
        if web.poll() is None:
            os.killpg(web.pid, signal.SIGTERM)
            try:
                web.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(web.pid, signal.SIGKILL)
                web.wait(timeout=10)
        proxy.close()


def _health(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    except OSError:
        return 0
    finally:
        conn.close()


def _log_lines(log: Path, start: int, end: int | None = None) -> list[str]:
    text = log.read_bytes()[start:end].decode("utf-8", errors="replace")
    return [line for line in text.splitlines() if line.strip() and not ACCESS.match(line)]


def test_a_database_outage_answers_503_logs_once_and_loses_nothing(deployment):
    proxy, log = deployment["proxy"], deployment["log"]
    booted = log.read_text("utf-8", errors="replace").count("Booting worker")
    load = Load(deployment["port"], deployment["token"])
    load.start()
    try:
        time.sleep(2.0)
        offset = log.stat().st_size
        down = time.monotonic()
        proxy.refuse()
        time.sleep(3.0)
        health_down = _health(deployment["port"])
        proxy.answer(starting_up)
        time.sleep(2.0)
        proxy.restore()
        up = time.monotonic()
        time.sleep(4.0)
        outage_lines = _log_lines(log, offset)
    finally:
        load.stop()
    results = load.results
    text = log.read_text("utf-8", errors="replace")

    statuses = {r["status"] for r in results}
    assert statuses <= {200, 201, 503}, [r for r in results if r["status"] not in (200, 201, 503)][:3]
    refused = [r for r in results if r["status"] == 503]
    assert len(refused) >= 10, len(refused)
    for r in refused:
        assert r["retry_after"] and int(r["retry_after"]) > 0, r
        detail = json.loads(r["body"])["detail"]
        assert detail == NOT_APPLIED or MAY_HAVE in detail, detail
    assert health_down == 503

    stored = {row[0] for row in dbenv.query(deployment["direct"], "SELECT external_message_id FROM messages")}
    answered = [r["ext"] for r in results if r["status"] in (200, 201)]
    assert set(answered) <= stored, sorted(set(answered) - stored)[:5]
    not_applied = [r["ext"] for r in refused if json.loads(r["body"])["detail"] == NOT_APPLIED]
    assert not set(not_applied) & stored, sorted(set(not_applied) & stored)[:5]  # "not applied" is the truth

    # back without a restart: the same two workers answer every request within a second of the return
    after = [r for r in results if r["started"] > up + 1.0]
    assert len(after) >= 10 and {r["status"] for r in after} <= {200, 201}, [r for r in after if r["status"] >= 300][:3]
    assert text.count("Booting worker") == booted

    # one line per outage per process, not a line (or a traceback) per request
    seconds = up + 4.0 - down
    assert "Traceback" not in text, text[text.index("Traceback") - 500:][:3000]
    assert len(outage_lines) <= math.ceil(seconds), "\n".join(outage_lines)
    assert any("database_unavailable" in line for line in outage_lines), "\n".join(outage_lines[:20])
    may_have = [r["ext"] for r in refused if json.loads(r["body"])["detail"] != NOT_APPLIED]
    print(f"{len(results)} requests, {len(answered)} stored with 2xx, {len(not_applied)} 503 not applied,"
          f" {len(may_have)} 503 may have been applied ({len(set(may_have) & stored)} of them stored),"
          f" {len(outage_lines)} log lines in {seconds:.1f} s:", *outage_lines, sep="\n")
