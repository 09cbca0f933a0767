"""bench/ingest_wal.py: where PostgreSQL's work for each ingested message goes, on a tiny scale store."""
from __future__ import annotations

import json
import uuid

import pytest

from bench import backends, ingest_wal, scale

pytestmark = pytest.mark.skipif(not backends.postgres_available(), reason="needs the PostgreSQL server")


def test_the_insert_and_both_vector_writes_are_measured_and_the_clone_dropped(tmp_path, monkeypatch):
    prefix = f"mc_wal_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("BENCH_PG_PREFIX", prefix)  # every database this run creates starts with it
    scale.ensure_store(scale.store_path(tmp_path, 0.01), 0.01, False)
    try:
        ingest_wal.main(["--scales", "0.01", "--dir", str(tmp_path), "--messages", "30",
                         "--output", str(tmp_path / "wal.json")])
        one = json.loads((tmp_path / "wal.json").read_text())["scales"][0]
        assert one["messages"] == 30 and one["streams"] >= 1
        for step in ("insert", "vector_update", "vector_insert_own_table"):
            assert one[step]["ms"] > 0 and one[step]["wal_bytes"] > 0 and one[step]["blocks_hit"] > 0, step
        assert "messages" in one["insert"]["wal_by_relation"]
        assert "probe_message_vectors" in one["vector_insert_own_table"]["wal_by_relation"]
        # the UPDATE writes a new version of the whole row into each of the messages' indexes
        assert one["vector_insert_own_table"]["wal_bytes"] < one["vector_update"]["wal_bytes"]
        left = backends.query(f"{backends.server()}/postgres",
                              f"SELECT datname FROM pg_database WHERE datname LIKE '{prefix}%'")
        assert left == [(f"{prefix}_scale_0_01",)]  # the kept copy; the measured clone is gone
    finally:
        for (name,) in backends.query(f"{backends.server()}/postgres",
                                      f"SELECT datname FROM pg_database WHERE datname LIKE '{prefix}%'"):
            backends.drop(name)
