"""``make run``'s terminal: the console's address once it answers, and Ctrl-C stops everything.

The runner (``python -m scripts.run``, what ``make run`` starts after set-up) runs in a
pseudo-terminal as a person would start it, on a migrated store of its own; Ctrl-C is
the terminal's SIGINT to its foreground process group.
"""
from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bench.common import free_port
from tests import dbenv
from tests.redis_url import TEST_REDIS_URL

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found |= {int(p) for p in task.read_text().split()}
    return found


def _read(fd: int, seconds: float) -> bytes:
    out = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal closed: every writer has exited
                break
            if not chunk:
                break
            out += chunk
    return out


def test_make_run_prints_the_address_once_when_it_answers_and_ctrl_c_stops_everything(tmp_path):
    port = free_port()
    env = dict(os.environ, MEMORY_DB=str(tmp_path / "memory.sqlite3"), REDIS_URL=TEST_REDIS_URL,
               EMBEDDING_PROVIDER="none", WEB_CONCURRENCY="1", DJANGO_DEBUG="1", PYTHONPATH=str(ROOT))
    dbenv.migrated_store(env)
    leader, follower = pty.openpty()
    runner = subprocess.Popen(
        [sys.executable, "-m", "scripts.run", "--port", str(port), "--beat-schedule", str(tmp_path / "beat")],
        cwd=ROOT, env=env, stdin=follower, stdout=follower, stderr=follower, start_new_session=True,
    )
    os.close(follower)
    output = b""
    try:
        deadline = time.monotonic() + 120
        while b"Memory Console:" not in output and time.monotonic() < deadline and runner.poll() is None:
            output += _read(leader, 1)
        text = output.decode("utf-8", "replace")
        assert "Memory Console:" in text, text
        address = re.search(r"Memory Console: (\S+)", text).group(1)
        assert address == f"http://127.0.0.1:{port}/"
        with urllib.request.urlopen(f"{address}healthz", timeout=5) as answer:  # printed once it answers
            assert answer.status == 200
        output += _read(leader, 2)  # worker and beat settle
        children = _children(runner.pid)
        assert len(children) == 3, children  # web, worker, beat (Redis answers already)
        os.killpg(runner.pid, signal.SIGINT)  # Ctrl-C: the terminal signals its foreground group
        output += _read(leader, 40)
        assert runner.wait(timeout=30) == 0
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
        os.close(leader)
    text = output.decode("utf-8", "replace")
    assert text.count("Memory Console:") == 1, text
    assert "Traceback" not in text and "Segmentation" not in text, text
    assert text.rstrip().endswith("Stopped."), text[-2000:]
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()], "left running"
