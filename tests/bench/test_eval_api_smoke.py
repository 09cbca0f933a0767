"""Smoke run of the evaluation lived through the API: a slice of LoCoMo and MemDaily.

Runs ``python -m bench.eval_api`` in a subprocess: it deploys gunicorn and a real celery
worker on a fresh SQLite file with the test Redis database (``MEMORY_TEST_REDIS_URL``,
flushed), posts 3 sessions of one LoCoMo conversation and one MemDaily haystack, waits
for the worker to be idle and asks a few questions over HTTP. About a minute.
The shared data folder is required: without it this test fails, it does not skip.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import eval_api
from bench.common import data_dir
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


@pytest.mark.integration
def test_eval_api_smoke(tmp_path):
    assert (data_dir() / "locomo" / "locomo10.json").is_file() and (data_dir() / "memdaily").is_dir(), (
        f"evaluation data missing under {data_dir()} (../shared/data or $MEMORY_DATA_DIR); this test must not be skipped"
    )
    out = tmp_path / "eval_api.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "MEMORY_DB", "REDIS_URL")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.eval_api", "--conversations", "1", "--sessions", "3", "--questions",
         str(QUESTIONS), "--memdaily-haystacks", "1", "--memdaily-questions", str(MD_QUESTIONS),
         "--redis-url", TEST_REDIS_URL, "--output", str(out), "--per-question", str(tmp_path / "questions.jsonl"),
         "--no-markdown"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text(encoding="utf-8"))

    # deployed with the defaults: enqueueing on, local embeddings, no LLM
    dep = r["deployment"]
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
    assert "### LoCoMo via the API" in text and "### MemDaily via the API" in text
    assert "Target (LoCoMo R@5 ≥ 1.05 × bm25s" in text


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
