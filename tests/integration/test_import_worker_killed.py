"""A real worker is SIGKILLed in the middle of an import: the next worker finishes the job.

The import is slowed from outside (``tests/integration/slow_worker.py --import-delay``:
a sleep after each progress write, *between* its 20-chunk transactions), the worker is killed once the job has
reported progress, and a worker started again under the same node name
re-queues the job it finds marked with its name (memory.dispatch.jobs.recover_orphaned_jobs).
The job ends ``done`` with every chunk stored once; it never stays ``running``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests import dbenv
from tests.integration.test_worker import READY, ROOT, Worker, poll, query
from tests.redis_url import TEST_REDIS_URL

pytestmark = pytest.mark.integration

CHUNKS = 200

START_IMPORT = r"""
import json, sys, django
django.setup()
from memory import pipeline
text = "\n\n".join(f"第{i}条知识：编号{i}的茶叶产自第{i}号山谷。" for i in range(int(sys.argv[1])))
job = pipeline.start_import(text=text, origin_name="it.txt")  # enqueued on commit, as in production
print(json.dumps({"job": job.pk, "batch": job.params["batch_id"]}))
"""


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    client = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        pytest.fail(f"no Redis at {TEST_REDIS_URL}: start it with `redis-server --daemonize yes`")
    client.flushdb()
    values = dict(os.environ)
    values.update(
        DJANGO_SETTINGS_MODULE="config.settings", MEMORY_DB=str(tmp_path / "memory.sqlite3"), REDIS_URL=TEST_REDIS_URL,
        MEMORY_ENQUEUE_TASKS="1", EMBEDDING_PROVIDER="none", LLM_BASE_URL="", LLM_MODEL="", PYTHONPATH=str(ROOT),
        LOG_LEVEL="INFO",
    )
    dbenv.migrated_store(values)
    values["_TMP"] = str(tmp_path)
    yield values
    client.flushdb()


def test_an_import_killed_with_its_worker_is_finished_by_the_next_worker(env):
    log = Path(env["_TMP"]) / "worker.log"
    slow = Worker(env, log, slow=("--import-delay", "0.5"))
    started = [slow]
    try:
        assert slow.wait_for_log("ready.", READY), log.read_text()[-3000:]
        done = subprocess.run([sys.executable, "-c", START_IMPORT, str(CHUNKS)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        ids = json.loads(done.stdout.strip().splitlines()[-1])

        def job_row():
            return query(env, "SELECT status, progress, total, worker, attempts, error FROM jobs WHERE id = ?",
                         (ids["job"],))[0]

        assert poll(lambda: job_row()[1] >= 20, 30), (job_row(), log.read_text()[-3000:])
        slow.kill()
        status, progress, total, worker, attempts, _ = job_row()
        assert (status, attempts) == ("running", 1) and 20 <= progress < total == CHUNKS
        assert worker.startswith("it-worker@")

        offset = len(log.read_text("utf-8", errors="replace"))
        again = Worker(env, log)
        started.append(again)
        assert again.wait_for_log("ready.", READY, after=offset), log.read_text()[-3000:]
        # returns when done (seconds alone); a loose bound for a loaded machine (a niced worker waits for CPU)
        assert poll(lambda: job_row()[0] in ("done", "failed"), 240), (job_row(), log.read_text()[-3000:])
        status, progress, total, worker, attempts, error = job_row()
        assert (status, progress, attempts, error) == ("done", CHUNKS, 2, ""), job_row()
        assert "job_requeued" in log.read_text("utf-8", errors="replace")[offset:]
        assert query(env, "SELECT count(*) FROM knowledge WHERE import_batch_id = ?", (ids["batch"],))[0][0] == CHUNKS
        assert query(env, "SELECT status, added FROM import_batches WHERE id = ?", (ids["batch"],))[0] == ("done", CHUNKS)
    finally:
        for each in started:
            each.stop()
