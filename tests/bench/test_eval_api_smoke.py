"""Smoke run of the evaluation lived through the API: a slice of LoCoMo and MemDaily.

Runs ``python -m bench.eval_api`` in a subprocess: it deploys gunicorn and a real celery
worker on the suite's backend — a fresh SQLite file, or on PostgreSQL a throwaway database of
its own (``tests/dbenv.py``), never the ``DATABASE_URL`` one — with the test Redis database
(``MEMORY_TEST_REDIS_URL``, flushed), posts 3 sessions of one LoCoMo conversation and one MemDaily haystack, waits
for the worker to be idle and asks a few questions over HTTP. About a minute.
The shared data folder is required: without it this test fails, it does not skip.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import eval_api
from bench.common import SECTION_BY_MARKER, check_section, data_dir
from tests import dbenv
from tests.redis_url import TEST_REDIS_URL

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = 8  # LoCoMo, from the first 3 sessions of conv-26 (which has more than that)
MD_QUESTIONS = 5


def check_method(name: str, method: dict, n: int, keys: tuple[str, ...]) -> None:
    groups = method.get("by_category") or method.get("by_type") or {}
    for metrics in [method["overall"], *groups.values()]:
        for key, value in metrics.items():
            if key != "n":
                assert 0.0 <= value <= 1.0, (name, key, value)
    assert method["overall"]["n"] == n, (name, method["overall"])
    values = [method["overall"][k] for k in keys]
    assert values == sorted(values), (name, method["overall"])  # R@k never falls as k grows


def _child_sessions(pid: int) -> list[int]:
    """The direct children of ``pid`` (gunicorn, the celery worker: each leads a session of its own)."""
    children = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return children


def _run_and_reap(cmd: list[str], *, env: dict[str, str], timeout: float, log: Path) -> tuple[int, str]:
    """Run ``cmd`` in a session of its own, output to ``log``; on timeout nothing it started outlives this call.

    SIGTERM first (``bench.eval_api`` then stops its deployment in a ``finally``), SIGKILL for whatever is
    left: the command's own process group and the groups of the servers it started.
    """
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        proc.wait(timeout=timeout)
        return proc.returncode, log.read_text(errors="replace")
    except BaseException:
        groups = [proc.pid, *_child_sessions(proc.pid)]
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.wait()
        raise


@pytest.mark.integration
def test_eval_api_smoke(tmp_path):
    assert (data_dir() / "locomo" / "locomo10.json").is_file() and (data_dir() / "memdaily").is_dir(), (
        f"evaluation data missing under {data_dir()} (../shared/data or $MEMORY_DATA_DIR); this test must not be skipped"
    )
    out = tmp_path / "eval_api.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "MEMORY_DB", "REDIS_URL")}
    database_url = dbenv.store_env({}).get("DATABASE_URL", "")  # on PostgreSQL a throwaway database, else SQLite
    returncode, output = _run_and_reap(
        [sys.executable, "-m", "bench.eval_api", "--conversations", "1", "--sessions", "3", "--questions",
         str(QUESTIONS), "--memdaily-haystacks", "1", "--memdaily-questions", str(MD_QUESTIONS),
         "--redis-url", TEST_REDIS_URL, "--output", str(out), "--per-question", str(tmp_path / "questions.jsonl"),
         "--no-markdown", *(["--database-url", database_url] if database_url else [])],
        env=env, timeout=300, log=tmp_path / "eval_api.log",
    )
    assert returncode == 0, output[-6000:]
    r = json.loads(out.read_text(encoding="utf-8"))

    # deployed on the suite's backend with the defaults: enqueueing on, local embeddings, no LLM
    dep = r["deployment"]
    assert dep["database"] == ("postgresql" if database_url else "sqlite")
    assert dep["MEMORY_ENQUEUE_TASKS"] is True and dep["EMBEDDING_PROVIDER"] == "local" and not dep["DEBUG"]
    assert dep["LLM"].startswith("none")
    assert r["ingest"]["errors"] == 0 and r["queries"]["errors"] == 0, (r["ingest"], r["queries"])
    lo, md = r["locomo"], r["memdaily"]
    assert r["ingest"]["requests"] == lo["turns"] + lo["observations"] + md["messages"]
    # the real worker ran: it went idle, summarised the posted turns into episodes and embedded every fact
    wk = r["worker"]
    assert wk["idle"], wk
    assert wk["episodes"] >= 1 and wk["backlog"]["null_vectors"] == 0, wk
    assert wk["messages"] >= lo["turns"] + md["messages"]
    assert wk["facts"] >= lo["observation_facts"] > 0

    assert lo["conversations"] == ["conv-26"] and lo["questions"] == QUESTIONS
    assert lo["confirms_with_vector"] == QUESTIONS  # confirm embedded each question on the server
    per_question = [json.loads(line) for line in (tmp_path / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(per_question) == QUESTIONS and "per_question" not in lo
    assert all(0 < len(q["prompt_fact_ids"]) <= dep["FACT_RECALL_LIMIT"] for q in per_question)
    for name, method in {**lo["methods"], **lo["diagnostics"]}.items():
        check_method(name, method, QUESTIONS, ("R@1", "R@3", "R@5"))
    assert lo["methods"]["bm25s_facts"]["overall"]["R@5"] > 0  # the units carry the gold at all

    assert md["haystacks"] == 1 and md["trajectories"] == 26 and md["questions"] == MD_QUESTIONS
    for name, method in {**md["methods"], **md["diagnostics"]}.items():
        check_method(name, method, MD_QUESTIONS, ("R@1", "R@3", "R@5", "R@10"))
    assert md["methods"]["bm25s_messages"]["overall"]["R@10"] > 0

    assert set(r["targets"]) == {"locomo_r5_vs_bm25s_facts", "locomo_r5_vs_dense_only", "memdaily_inspect_r5_vs_bm25s"}
    text = eval_api.render(r)
    assert "| LoCoMo: `POST /turns` + confirm" in text and "| MemDaily: `POST /actions/inspect`" in text
    assert "≥ 1.05×: " in text and "machine calibration (before / after the run)" in text
    check_section(SECTION_BY_MARKER[eval_api.START], text)  # fits its place in BENCHMARKS.md


def test_asker_and_session_slice():
    assert eval_api.asker("When did Caroline go to the support group?", ["Caroline", "Melanie"]) == "Melanie"
    assert eval_api.asker("What do Caroline and Melanie share?", ["Caroline", "Melanie"]) == "Caroline"
    assert eval_api.asker("What is the name of the dog?", ["Caroline", "Melanie"]) == "Caroline"
    raw = {"qa": [{"question": "a", "evidence": ["D1:3"]}, {"question": "b", "evidence": ["D1:2", "D4:1"]},
                  {"question": "c", "evidence": []}, {"question": "d", "evidence": ["D2:5; D3:1"]}]}
    assert [q["question"] for q in eval_api.locomo_questions(raw, [1, 2, 3], None)] == ["a", "d"]
    assert [q["question"] for q in eval_api.locomo_questions(raw, [1, 2, 3, 4], 2)] == ["a", "b"]


def test_refuses_redis_db_zero(tmp_path):
    with pytest.raises(SystemExit, match="DB 0"):
        eval_api.Deployment(tmp_path, "redis://127.0.0.1:6379/0", log=print)  # not a test database
    with pytest.raises(SystemExit, match="DB 0"):
        eval_api.Deployment(tmp_path, "redis://127.0.0.1:6379", log=print)  # not a test database


def test_a_timed_out_run_leaves_no_process_behind(tmp_path):
    """What the smoke test relies on: a timeout kills the command and the servers it started in their own sessions."""
    pid_file = tmp_path / "server.pid"
    script = ("import subprocess, sys, time; "
              "p = subprocess.Popen(['sleep', '120'], start_new_session=True); "
              f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)")
    with pytest.raises(subprocess.TimeoutExpired):
        _run_and_reap([sys.executable, "-c", script], env=dict(os.environ), timeout=3, log=tmp_path / "log")
    stat = Path(f"/proc/{int(pid_file.read_text())}/stat")
    for _ in range(50):  # killed: gone, or a zombie until whatever is process 1 reaps it
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the server the command started is still running")
