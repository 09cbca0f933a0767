"""A Celery worker in another network namespace does the background work (issue 12, item 6).

Runs ``scripts/demo_cluster.py``: a namespace with its own veth address, PostgreSQL and
Redis reached only through forwarders on the host's veth address, gunicorn on the host,
messages posted over HTTP; episodes, cues, facts and vectors must appear, written by the
namespace's worker (the only one answering), and nothing of the demo may be left behind.
Needs root and ``ip`` (true here and in CI); skipped otherwise.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis_url import TEST_REDIS_URL

pytestmark = [
    pytest.mark.integration,
    # the demo brings its own PostgreSQL database and network namespace whatever the suite's backend:
    # run once (by the SQLite suite), not twice at the same moment when .ci/run runs both suites
    pytest.mark.sqlite_only("the demo sets up its own PostgreSQL database: run once, by the SQLite suite"),
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and iproute2 (ip netns)"),
]

ROOT = Path(__file__).resolve().parents[2]


def _postgres() -> bool:
    try:
        import psycopg
    except ImportError:
        return False
    try:
        psycopg.connect(os.environ.get("DEMO_PG_SERVER", "postgres://postgres@127.0.0.1:5432/postgres"),
                        connect_timeout=3).close()
    except psycopg.OperationalError:
        return False
    return True


def _leftovers() -> str:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return names + links


def test_a_worker_in_another_namespace_builds_the_memory(tmp_path):
    if not _postgres():
        pytest.fail("no PostgreSQL at 127.0.0.1:5432 (or no psycopg): this test needs it (it must not be skipped)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)  # the demo creates and drops its own database
    done = subprocess.run(
        [sys.executable, "-m", "scripts.demo_cluster", "--redis-url", TEST_REDIS_URL, "--messages", "60",
         "--keep-logs", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:],
                                  (tmp_path / "worker.log").read_text()[-3000:] if (tmp_path / "worker.log").exists() else "")
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"ok"')))
    counts = report["counts"]
    assert report["ok"] and report["workers"] == [f"ns-worker@{report['namespace']}"]
    assert counts["messages"] == 60
    assert counts["episodes"] >= 1 and counts["cues"] >= 1 and counts["summarised"] >= 16
    assert counts["facts"] >= 1 and counts["fact_vectors"] == counts["facts"]
    assert counts["message_vectors"] >= 1
    # every database and Redis byte of the worker came from its own address over the veth
    assert report["bytes_over_veth"]["redis"] > 0 and report["bytes_over_veth"]["postgres"] > 0
    assert "127.0.0.1:" in done.stdout and "refused" in done.stdout
    # nothing left behind
    left = _leftovers()
    assert report["namespace"] not in left and report["namespace"].replace("mc-demo-", "mcd") + "h" not in left
