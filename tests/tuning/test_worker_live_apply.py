"""A profile applied in the web process is seen by a real Celery worker within about a second.

Starts ``celery worker`` on a private Redis database and queue against a file SQLite
database, so it neither needs nor disturbs anything else running on the machine.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memory import overrides
from tests import dbenv
from tests.redis_url import TEST_REDIS_URL

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = TEST_REDIS_URL

WEB = r"""
import json, sys, time, django
django.setup()
from memory.dispatch.jobs import job_create
from memory.models import Job
from tuning import services, tasks

QUEUE = sys.argv[1]

def probe(timeout=20.0):
    job = job_create(kind="tuning_probe")
    tasks.probe_overrides_task.apply_async(args=[job.pk], queue=QUEUE)
    deadline = time.time() + timeout
    while time.time() < deadline:
        job.refresh_from_db()
        if job.status == "done":
            return job.result
        time.sleep(0.02)
    raise SystemExit("probe timed out")

before = probe(60.0)  # also waits for the worker to come up
services.save_profile("hops", {"ppr_hops": 3, "bm25_weight": 2})
services.apply_profile("hops")
applied_at = time.monotonic()  # one clock for every process of the machine
seen = None
stale_sent = []  # when each probe answered with the old overrides was sent, in seconds after the apply
while time.monotonic() - applied_at < 20:
    sent = time.monotonic() - applied_at
    result = probe()
    if result["overrides"]:
        seen = result
        break
    stale_sent.append(sent)
print(json.dumps({"before": before, "seen": seen, "stale_sent": stale_sent,
                  "elapsed": time.monotonic() - applied_at}), flush=True)
"""


def _redis_up() -> bool:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5).ping()
        return True
    except Exception:  # noqa: BLE001
        return False


def test_apply_reaches_a_celery_worker_within_a_second(tmp_path):
    assert _redis_up(), f"no Redis at {REDIS_URL}: start it with `redis-server --daemonize yes` (or `make test-fast`)"
    celery = shutil.which("celery", path=str(Path(sys.executable).parent)) or shutil.which("celery")
    assert celery, "celery executable not found"
    queue = f"tuning-it-{os.getpid()}"
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings_test",
            "MEMORY_DB": str(tmp_path / "worker.sqlite3"),
            "REDIS_URL": REDIS_URL,
            "PYTHONPATH": str(ROOT),
            "MEMORY_ENQUEUE_TASKS": "False",
            "EMBEDDING_PROVIDER": "none",
        }
    )
    dbenv.migrated_store(env)
    worker = subprocess.Popen(
        [celery, "-A", "config", "worker", "-Q", queue, "--pool=solo", "--concurrency=1", "--without-gossip",
         "--without-mingle", "--without-heartbeat", "--loglevel=WARNING", "-n", f"{queue}@%h"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        web = subprocess.run([sys.executable, "-c", WEB, queue], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=120)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    assert web.returncode == 0, web.stderr[-3000:]
    out = json.loads(web.stdout.strip().splitlines()[-1])
    assert out["before"]["overrides"] == {} and out["before"]["profile"] == "default"
    assert out["seen"] is not None, out
    assert out["seen"]["profile"] == "hops"
    assert out["seen"]["overrides"] == {"ppr_hops": 3, "bm25_weight": 2.0}
    assert out["seen"]["pid"] != os.getpid()
    # "Within a second" as a mechanism rather than the wall clock of a loaded machine: a probe runs in the worker
    # after it was sent, so one sent a refresh interval after the apply must find the profile — only earlier ones
    # may still answer from the worker's cache.
    assert overrides.REFRESH_INTERVAL_S == 1.0
    assert all(sent < overrides.REFRESH_INTERVAL_S for sent in out["stale_sent"]), out
    # No wall-clock bound beyond the loop's own 20 s: on a loaded machine one probe's round trip can take seconds,
    # and the stale probes' send times above are what "within a second" means.
