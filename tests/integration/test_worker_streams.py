"""Several streams at once through a real worker (2 processes) on the suite's backend.

Three drivers post 60 messages each to their own group stream at the same time, all
from the same sender, so the worker extracts the same person's facts from two streams
at once and commits two streams' cursors at once. On PostgreSQL (read committed) that
once failed a batch with a duplicate fact or a BM25 statistics race — a task that
raises re-enqueues nothing, so the stream stalled — and let one stream's cursor
overwrite another's (the batch was extracted twice). Every stream must end exactly
where one clean pass leaves it: one episode, three extraction batches, the cursor at
its 36th message, every fact embedded, and no task raised.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_worker import READY, ROOT, Worker, env, poll, query, redis_test_db  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration

STREAMS = ("ms-0", "ms-1", "ms-2")


def _post_at_once(values: dict[str, str], n: int) -> dict[str, list[int]]:
    drivers = {
        stream: subprocess.Popen(
            [sys.executable, "-m", "tests.integration.driver", "post", "--stream", stream, "--kind", "group",
             "--n", str(n)],
            cwd=ROOT, env=values, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for stream in STREAMS
    }
    ids = {}
    for stream, proc in drivers.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        ids[stream] = json.loads(out.strip().splitlines()[-1])
    return ids


def test_streams_extracted_at_once_end_as_one_pass_would(env):  # noqa: F811  (the fixture)
    log = Path(env["_TMP"]) / "worker-streams.log"
    worker = Worker(env, log)
    try:
        assert worker.wait_for_log("ready.", READY), log.read_text()[-3000:]
        ids = _post_at_once(env, 60)
        stream_of = {s: query(env, "SELECT stream_id FROM messages WHERE id = ?", (ids[s][0],))[0][0] for s in STREAMS}

        def done():
            extracts = query(env, "SELECT count(*) FROM pipeline_events WHERE kind = 'memory_extract'")[0][0]
            episodes = query(env, "SELECT count(*) FROM episodes WHERE kind = 'conversation'")[0][0]
            pending = query(env, "SELECT count(*) FROM facts WHERE embedding IS NULL")[0][0]
            return extracts >= 3 * len(STREAMS) and episodes == len(STREAMS) and pending == 0

        finished = poll(done, 2 * READY)
        text = log.read_text("utf-8", errors="replace")
        assert finished, (query(env, "SELECT kind, stream_id, payload FROM pipeline_events"), text[-4000:])
        assert "raised unexpected" not in text, text[-4000:]
        cursors = json.loads(query(env, "SELECT value FROM meta WHERE key = 'fact_extract_cursor'")[0][0])
        assert cursors == {str(stream_of[s]): ids[s][35] for s in STREAMS}
        for stream in STREAMS:
            sid = stream_of[stream]
            # 60 → 48 → 36 → 24 after the cursor: three batches, each extracted once
            assert query(env, "SELECT count(*) FROM pipeline_events WHERE kind = 'memory_extract' AND stream_id = ?",
                         (sid,))[0][0] == 3
            assert query(env, "SELECT count(*) FROM messages WHERE stream_id = ? AND episode_id IS NULL",
                         (sid,))[0][0] == 44
        assert query(env, "SELECT count(*) FROM facts")[0][0] > 0
    finally:
        worker.stop()
