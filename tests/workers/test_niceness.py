"""A worker yields the CPU to the web processes: it raises its niceness (and its own session group's) at start."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os, django
django.setup()
from config.celery import lower_priority
print(lower_priority(), os.nice(0))
from tests.workers.test_niceness import autogroup_nice
print(autogroup_nice())
"""


def autogroup_nice() -> int | None:
    """This process's session group's niceness; None without ``sched_autogroup`` or in the root group.

    The root group (init's session, and every process that never started a session of
    its own, as under some CI launchers) reads as an empty file.
    """
    try:
        with open("/proc/self/autogroup") as group:
            fields = group.read().split()
    except OSError:
        return None
    return int(fields[-1]) if fields else None


def probe(niceness: str, *, own_session: bool) -> tuple[list[int], int | None]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "WORKER_NICENESS": niceness}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, start_new_session=own_session)
    assert done.returncode == 0, done.stderr
    first, group = done.stdout.strip().splitlines()[-2:]
    return [int(x) for x in first.split()], None if group == "None" else int(group)


def test_worker_raises_its_niceness_and_its_own_session_group():
    base = os.nice(0)
    (returned, now), group = probe(str(base + 7), own_session=True)
    assert returned == now == base + 7
    if group is not None:  # kernels with sched_autogroup: the worker leads its session, its group is lowered too
        assert group == base + 7


def test_worker_never_lowers_its_niceness_nor_touches_a_shared_session_group():
    base = os.nice(0)
    (returned, now), group = probe("0", own_session=True)
    assert returned == now == base
    (returned, now), shared = probe(str(base + 5), own_session=False)
    assert returned == now == base + 5
    # In the caller's session the group (shared with the caller, or the root group) keeps its weight.
    assert shared == autogroup_nice()
