"""A real ``celery -A config worker`` against the real Redis and a file-based SQLite database.

Everything runs in separate processes, as in production: the worker
subprocess, and a driver subprocess that posts messages through the HTTP API
(its on-commit hooks enqueue the stream checks). This process only watches
the database file through ``sqlite3`` and the worker's log.

1. 60 messages → an episode with cues, facts with embeddings and association
   edges appear, and every message gets its vector (without the beat), also
   lines that start no summary or extraction.
2. The worker is SIGKILLed while a summarisation transaction is open (the
   transaction is held open by ``slow_worker --summary-delay``): no half-written
   episode exists, and after a restart under the same node name the batch is
   summarised exactly once. The worker is slowed from outside
   (``tests/integration/slow_worker.py``: a sleep after the episode is written).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests import dbenv
from tests.redis_url import TEST_REDIS_URL

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = TEST_REDIS_URL
NODE = "it-worker@%h"
READY = 180  # seconds a worker may take to start or to finish its work: polls return as soon as it is done (~5 s alone; both CI suites at once load 2 cores)


def _celery() -> str:
    local = Path(sys.executable).with_name("celery")
    return str(local) if local.exists() else (shutil.which("celery") or "celery")


@pytest.fixture(scope="module")
def redis_test_db():
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        # `make test` needs Redis (.ci/run starts it); `make test-fast` leaves integration tests out.
        pytest.fail(f"no Redis at {REDIS_URL}: start it with `redis-server --daemonize yes` (or run `make test-fast`)")
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture(scope="module")
def env(tmp_path_factory, redis_test_db) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("worker")
    values = dict(os.environ)
    values.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        MEMORY_DB=str(tmp / "memory.sqlite3"),
        REDIS_URL=REDIS_URL,
        MEMORY_ENQUEUE_TASKS="1",
        EMBEDDING_PROVIDER="local",
        LLM_BASE_URL="",
        LLM_MODEL="",
        PYTHONPATH=str(ROOT),
        LOG_LEVEL="INFO",
    )
    dbenv.migrated_store(values)
    values["_TMP"] = str(tmp)
    return values


class Worker:
    """``celery worker`` under the node name ``NODE``; ``slow`` runs it through ``tests.integration.slow_worker``."""

    def __init__(self, env: dict[str, str], log: Path, *, slow: tuple[str, ...] = (), concurrency: str = "2",
                 **extra: str):
        self.log = log
        handle = open(log, "ab")
        args = ["-A", "config", "worker", "-n", NODE, f"--concurrency={concurrency}", "--loglevel=INFO",
                "--without-mingle", "--without-gossip"]
        command = [sys.executable, "-m", "tests.integration.slow_worker", *slow, "--", *args] if slow else [_celery(), *args]
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT, env={**env, **extra}, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )
        handle.close()

    def wait_for_log(self, needle: str, timeout: float, *, after: int = 0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log.read_text("utf-8", errors="replace")[after:]:
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def post(env: dict[str, str], *, stream: str, n: int, start: int = 0) -> list[int]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.driver", "post", "--stream", stream, "--n", str(n),
         "--start", str(start)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def query(env: dict[str, str], sql: str, params: tuple = ()) -> list[tuple]:
    return dbenv.query(env, sql, params)


def poll(check, timeout: float, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = check()
    return value


def test_worker_builds_memory_and_survives_a_kill(env):
    log = Path(env["_TMP"]) / "worker.log"
    started: list[Worker] = []

    def start(slow: tuple[str, ...] = ()) -> Worker:
        started.append(Worker(env, log, slow=slow))
        return started[-1]

    worker = start()
    try:
        assert worker.wait_for_log("ready.", READY), log.read_text()[-3000:]
        # started as deployed, it yields the CPU to the web processes (settings.WORKER_NICENESS)
        assert os.getpriority(os.PRIO_PROCESS, worker.proc.pid) == max(os.nice(0), 10)

        # --- 1. 60 messages through the API ---------------------------------------------------
        ids = post(env, stream="it-1", n=60)
        stream_id = query(env, "SELECT stream_id FROM messages WHERE id = ?", (ids[0],))[0][0]

        def built():
            episodes = query(env, "SELECT count(*) FROM episodes e WHERE e.stream_id = ? AND e.kind = 'conversation'"
                                  " AND EXISTS (SELECT 1 FROM episode_cues c WHERE c.episode_id = e.id)",
                             (stream_id,))[0][0]
            embedded = query(env, "SELECT count(*) FROM facts WHERE embedding IS NOT NULL"
                                  " AND embedding_q8 IS NOT NULL")[0][0]
            edges = query(env, "SELECT count(*) FROM memory_edges")[0][0]
            extracts = query(env, "SELECT count(*) FROM pipeline_events WHERE kind = 'memory_extract'")[0][0]
            pending_vectors = query(env, "SELECT count(*) FROM facts WHERE embedding IS NULL")[0][0]
            # the messages too, soon after they were stored (no beat runs here: MESSAGE_VECTOR_DELAY)
            pending_vectors += query(env, "SELECT count(*) FROM messages WHERE embedding IS NULL")[0][0]
            return (episodes == 1 and embedded > 0 and edges > 0 and extracts == 3 and pending_vectors == 0) and (
                episodes, embedded, edges
            )

        assert poll(built, READY), (query(env, "SELECT kind, payload FROM pipeline_events"), log.read_text()[-3000:])
        # 60 pending → one batch of 16 → 44 < 48; extraction 60 → 48 → 36 → 24 after the cursor.
        assert query(env, "SELECT count(*) FROM messages WHERE episode_id IS NULL")[0][0] == 44
        assert query(env, "SELECT min(id), max(id) FROM messages WHERE episode_id IS NOT NULL")[0] == (ids[0], ids[15])
        cursor = json.loads(query(env, "SELECT value FROM meta WHERE key = 'fact_extract_cursor'")[0][0])
        assert cursor == {str(stream_id): ids[35]}

        # a few lines that summarise and extract nothing are embedded all the same, seconds later
        # (MESSAGE_VECTOR_DELAY; no beat runs here), before a turn's confirm reads them
        lines = post(env, stream="it-vectors", n=3)
        marks = ", ".join("?" * len(lines))
        assert poll(lambda: query(env, f"SELECT count(*) FROM messages WHERE id IN ({marks})"
                                       " AND embedding IS NOT NULL", tuple(lines))[0][0] == 3, READY)
        worker.stop()

        # --- 2. SIGKILL inside the summarisation transaction ---------------------------------
        offset = len(log.read_text("utf-8", errors="replace"))
        slow = start(slow=("--summary-delay", "30"))
        assert slow.wait_for_log("ready.", READY, after=offset)
        more = post(env, stream="it-1", n=4, start=60)  # 48 pending → the second batch is due
        assert slow.wait_for_log(f"summary_delay_open stream={stream_id}", 30, after=offset), log.read_text()[-3000:]
        slow.kill()

        assert query(env, "SELECT count(*) FROM episodes WHERE stream_id = ?", (stream_id,))[0][0] == 1
        assert query(env, "SELECT count(*) FROM messages WHERE episode_id IS NULL AND stream_id = ?", (stream_id,))[0][0] == 48
        assert query(env, "SELECT count(*) FROM episode_cues c LEFT JOIN episodes e ON e.id = c.episode_id"
                          " WHERE e.id IS NULL")[0][0] == 0
        if not env.get("DATABASE_URL"):  # SQLite's own check of the file a killed worker wrote to
            assert query(env, "PRAGMA integrity_check")[0][0] == "ok"

        # --- 3. restart under the same node name: the batch is completed, once ---------------
        offset = len(log.read_text("utf-8", errors="replace"))
        worker = start()
        assert worker.wait_for_log("ready.", READY, after=offset)

        def second_episode():
            rows = query(env, "SELECT id, kind FROM episodes WHERE stream_id = ? ORDER BY id", (stream_id,))
            return len(rows) >= 2 and rows

        rows = poll(second_episode, READY)  # the restarted worker restores the killed batch: ~5 s alone
        assert rows and [kind for _, kind in rows] == ["conversation", "conversation"], log.read_text()[-3000:]
        archived = query(env, "SELECT min(id), max(id), count(*) FROM messages WHERE episode_id = ?", (rows[1][0],))
        assert archived[0] == (ids[16], ids[31], 16)
        assert query(env, "SELECT count(*) FROM episode_cues WHERE episode_id = ?", (rows[1][0],))[0][0] > 0
        time.sleep(1.0)  # a duplicate would show up now
        assert query(env, "SELECT count(*) FROM episodes WHERE stream_id = ?", (stream_id,))[0][0] == 2
        assert more[-1] > ids[-1]
    finally:
        for each in started:
            each.stop()
