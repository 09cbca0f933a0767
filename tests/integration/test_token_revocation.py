"""A revoked token is refused by another process within one second.

The prober is a separate Python process serving API requests through Django's
handler (its own token cache, its own database connection) against a file
database; the revocation is made by a third process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests import dbenv
from tests.integration.test_worker import ROOT

pytestmark = pytest.mark.integration

PROBE = r"""
import sys, time, django
django.setup()
from django.test import Client
client, token = Client(), sys.argv[1]
first_refusal = None
deadline = time.time() + 20
while time.time() < deadline:
    started = time.time()
    status = client.get("/api/v1/persons/1/facts", headers={"Authorization": f"Bearer {token}"}).status_code
    print(f"{started:.4f} {status}", flush=True)
    if status == 401 and first_refusal is None:
        first_refusal = started
    if first_refusal is not None and started - first_refusal > 1.5:
        break
    time.sleep(0.02)
"""

REVOKE = r"""
import time, django
django.setup()
from memory.api.auth import revoke_tokens
assert revoke_tokens(name="prober") == 1
print(f"{time.time():.4f}")
"""


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    values = dict(os.environ)
    values.update(DJANGO_SETTINGS_MODULE="config.settings", MEMORY_DB=str(tmp_path / "memory.sqlite3"),
                  MEMORY_ENQUEUE_TASKS="0", EMBEDDING_PROVIDER="none", PYTHONPATH=str(ROOT))
    dbenv.migrated_store(values)
    return values


def test_a_revoked_token_is_refused_by_another_process_within_a_second(env):
    token = subprocess.run([sys.executable, "manage.py", "create_api_token", "prober", "--scope", "bot"], cwd=ROOT,
                           env=env, capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    probe = subprocess.Popen([sys.executable, "-c", PROBE, token], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             text=True)
    try:
        first = probe.stdout.readline().split()
        assert first and first[1] in ("200", "404"), first  # the token is valid
        time.sleep(0.5)  # the prober's cache now holds the token
        done = subprocess.run([sys.executable, "-c", REVOKE], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        revoked_at = float(done.stdout.strip().splitlines()[-1])
        out, _ = probe.communicate(timeout=30)
    finally:
        probe.kill()
    lines = [(float(t), int(s)) for t, s in (line.split() for line in out.splitlines() if line.strip())]
    assert any(s != 401 and t > revoked_at - 0.3 for t, s in lines)  # valid (and cached) up to the revocation
    late = [s for t, s in lines if t > revoked_at + 1.0]
    assert late and set(late) == {401}, json.dumps(lines)
    first_refusal = min(t for t, s in lines if s == 401)
    print(f"refused {first_refusal - revoked_at:.3f} s after the revocation committed")
