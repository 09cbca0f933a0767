"""The local embedding model is loaded when a worker or a gunicorn worker starts, not on first use.

Both tests start the real server process (``celery worker``; ``gunicorn -c
config/gunicorn.py``, the configuration `make run` uses), wait for the logged
load (``embedder_preloaded … load_ms=…``), then make the process embed
something and check that the model was loaded exactly once.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests import dbenv
from tests.integration.test_worker import READY, ROOT, Worker, poll, query
from tests.redis_url import TEST_REDIS_URL

pytestmark = pytest.mark.integration

LOADED = "local_embedder_loaded"  # logged by memory.providers.local.load_model, once per load

START_IMPORT = r"""
import json, django
django.setup()
from memory import pipeline
job = pipeline.start_import(text="龙井产自杭州。\n\n碧螺春产自苏州。", origin_name="p.txt")
print(json.dumps({"job": job.pk}))
"""


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    import redis

    client = redis.Redis.from_url(TEST_REDIS_URL)
    client.flushdb()
    values = dict(os.environ)
    values.update(
        DJANGO_SETTINGS_MODULE="config.settings", MEMORY_DB=str(tmp_path / "memory.sqlite3"), REDIS_URL=TEST_REDIS_URL,
        MEMORY_ENQUEUE_TASKS="1", EMBEDDING_PROVIDER="local", LLM_BASE_URL="", LLM_MODEL="", PYTHONPATH=str(ROOT),
        LOG_LEVEL="INFO",
    )
    dbenv.migrated_store(values)
    values["_TMP"] = str(tmp_path)
    yield values
    client.flushdb()


def test_a_worker_loads_the_model_before_it_is_ready_and_never_again(env):
    log = Path(env["_TMP"]) / "worker.log"
    worker = Worker(env, log)
    try:
        assert worker.wait_for_log("ready.", READY), log.read_text()[-3000:]
        text = log.read_text("utf-8", errors="replace")
        match = re.search(r"embedder_preloaded label=local:\S+ load_ms=(\d+)", text)
        assert match, text[-3000:]
        assert text.index("embedder_preloaded") < text.index("ready.")
        done = subprocess.run([sys.executable, "-c", START_IMPORT], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        job_id = json.loads(done.stdout.strip().splitlines()[-1])["job"]
        assert poll(lambda: query(env, "SELECT status FROM jobs WHERE id = ?", (job_id,))[0][0] == "done", 30)
        embedded = query(env, "SELECT count(*) FROM knowledge WHERE embedding IS NOT NULL")[0][0]
        assert embedded == 2  # the pool child embedded with the model it inherited
        assert log.read_text("utf-8", errors="replace").count(LOADED) == 1, log.read_text()[-3000:]
    finally:
        worker.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_gunicorn_worker_loads_the_model_before_its_first_request(env):
    token = subprocess.run([sys.executable, "manage.py", "create_api_token", "preload"], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=True, timeout=60).stdout.strip().splitlines()[-1]
    port = _free_port()
    log = Path(env["_TMP"]) / "gunicorn.log"
    handle = open(log, "ab")
    web = subprocess.Popen(
        [str(Path(sys.executable).with_name("gunicorn")), "-c", "config/gunicorn.py", "config.wsgi",
         "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
    )
    handle.close()
    try:
        assert poll(lambda: "embedder_preloaded" in log.read_text("utf-8", errors="replace"), 60, 0.2), \
            log.read_text()[-3000:]
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/actions/consult", data=json.dumps({"query": "杭州的茶"}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}, method="POST",
        )
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
        first_request_s = time.perf_counter() - started
        assert log.read_text("utf-8", errors="replace").count(LOADED) == 1, log.read_text()[-3000:]
        print(f"first consult request after preload: {first_request_s * 1000:.0f} ms")
    finally:
        web.terminate()
        web.wait(timeout=20)
