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
group = "/proc/self/autogroup"
print(open(group).read().split()[-1] if os.path.exists(group) else "none")
"""


def probe(niceness: str, *, own_session: bool) -> tuple[list[int], str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "WORKER_NICENESS": niceness}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=True, start_new_session=own_session)
    first, group = done.stdout.strip().splitlines()[-2:]
    return [int(x) for x in first.split()], group


def test_worker_raises_its_niceness_and_its_own_session_group():
    base = os.nice(0)
    (returned, now), group = probe(str(base + 7), own_session=True)
    assert returned == now == base + 7
    if group != "none":  # kernels with sched_autogroup: the worker leads its session, its group is lowered too
        assert int(group) == base + 7


def test_worker_never_lowers_its_niceness_nor_touches_a_shared_session_group():
    base = os.nice(0)
    (returned, now), group = probe("0", own_session=True)
    assert returned == now == base
    (returned, now), shared = probe(str(base + 5), own_session=False)
    assert returned == now == base + 5
    if shared != "none":  # in the caller's session: the group (shared with the caller) keeps its weight
        assert int(shared) == int(open("/proc/self/autogroup").read().split()[-1])
