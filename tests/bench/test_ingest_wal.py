"""bench/ingest_wal.py: where PostgreSQL's work for each ingested message goes, on a tiny scale store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench import backends

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not backends.postgres_available(), reason="needs the PostgreSQL server")


def _databases(prefix: str) -> list[str]:
    rows = backends.query(f"{backends.server()}/postgres", f"SELECT datname FROM pg_database WHERE datname LIKE '{prefix}%'")
    return sorted(name for (name,) in rows)


def test_the_insert_and_both_vector_writes_are_measured_and_the_clone_dropped(tmp_path):
    prefix = f"mc_wal_{uuid.uuid4().hex[:8]}"  # every database this run creates starts with it
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "MEMORY_DB", "DJANGO_SETTINGS_MODULE")}
    env.update(BENCH_PG_PREFIX=prefix, LOG_LEVEL="WARNING")
    build = ("import sys; from pathlib import Path; from bench import scale;"
             " scale.ensure_store(scale.store_path(Path(sys.argv[1]), 0.01), 0.01, False)")
    try:
        subprocess.run([sys.executable, "-c", build, str(tmp_path)], cwd=REPO, env=env, check=True, capture_output=True,
                       timeout=300)
        done = subprocess.run([sys.executable, "-m", "bench.ingest_wal", "--scales", "0.01", "--dir", str(tmp_path),
                               "--messages", "30", "--output", str(tmp_path / "wal.json")],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        one = json.loads((tmp_path / "wal.json").read_text())["scales"][0]
        assert one["messages"] == 30 and one["streams"] >= 1
        for step in ("insert", "vector_update", "vector_insert_own_table"):
            assert one[step]["ms"] > 0 and one[step]["wal_bytes"] > 0 and one[step]["blocks_hit"] > 0, step
        assert "messages" in one["insert"]["wal_by_relation"]
        assert "probe_message_vectors" in one["vector_insert_own_table"]["wal_by_relation"]
        # the UPDATE writes a new version of the whole row into each of the messages' indexes
        assert one["vector_insert_own_table"]["wal_bytes"] < one["vector_update"]["wal_bytes"]
        assert _databases(prefix) == [f"{prefix}_scale_0_01"]  # the kept copy; the measured clone is gone
    finally:
        for name in _databases(prefix):
            backends.drop(name)
