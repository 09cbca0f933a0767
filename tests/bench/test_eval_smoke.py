"""Smoke run of the retrieval-quality evaluation: 2 LoCoMo conversations, 20 questions each.

Runs ``python -m bench.eval`` in a subprocess (the evaluation configures Django on its
own throwaway store, which cannot happen inside pytest's already configured process).
Two conversations are the fewest that give the held-out block a dev and a test half.
The shared data folder is required: without it this test fails, it does not skip.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import eval as bench_eval
from bench import eval_locomo
from bench.common import SECTION_BY_MARKER, check_section, data_dir
from memory.engine.tuning import WHITELIST

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = 20  # per conversation
HELDOUT_METHODS = {
    "ours_lexical_default", "ours_lexical_dense_default", "ours_lexical_tuned", "ours_lexical_dense_tuned",
    "dense_only", "bm25s_facts", "fts5_raw_turns",
}


def check_method(name: str, method: dict, n: int) -> None:
    for metrics in [method["overall"], *method["by_category"].values()]:
        for key, value in metrics.items():
            if key != "n":
                assert 0.0 <= value <= 1.0, (name, key, value)
    overall = method["overall"]
    assert overall["n"] == n, (name, overall)
    assert overall["R@10"] >= overall["R@5"] >= overall["R@3"] >= overall["R@1"], (name, overall)


@pytest.mark.sqlite_only("bench.eval always builds a throwaway SQLite store (bench/common.py drops DATABASE_URL): "
                        "the PostgreSQL suite would repeat the identical run")
def test_eval_smoke_locomo_subset(tmp_path):
    locomo = data_dir() / "locomo" / "locomo10.json"
    assert locomo.is_file(), (
        f"LoCoMo data missing at {locomo}: the evaluation reads ../shared/data (or $MEMORY_DATA_DIR); "
        "this test must not be skipped"
    )
    out = tmp_path / "eval.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "MEMORY_DB")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.eval", "--conversations", "2", "--questions", str(QUESTIONS), "--skip-memdaily",
         "--output", str(out), "--no-markdown"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,  # ~40 s alone; 120 s ran out at load 10
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text(encoding="utf-8"))
    lo = results["locomo"]
    assert lo["questions"] == 2 * QUESTIONS
    assert lo["facts"] > 0 and lo["turns"] > 0 and lo["episodes"] > 0
    tables = {**lo["methods"], **lo["diagnostics"], **lo["episodes_session_level"]}
    assert {"ours_lexical", "ours_lexical_dense", "dense_only", "bm25s_facts", "fts5_raw_turns"} <= set(tables)
    for name, method in tables.items():
        check_method(name, method, 2 * QUESTIONS)
    # something is found at all: the baselines are not all zero on real data
    assert max(m["overall"]["R@10"] for m in tables.values()) > 0

    # held-out block: conversation 0 tunes, conversation 1 reports
    held = lo["heldout"]
    assert held["dev_conversations"] == lo["conversations"][:1]
    assert held["test_conversations"] == lo["conversations"][1:]
    assert held["dev_questions"] == held["test_questions"] == QUESTIONS
    # per question: lexical + fused under the default profile and under the reference profile
    assert held["rerank_check"]["rankings"] == 4 * 2 * QUESTIONS
    assert held["rerank_check"]["mismatches"] == 0, held["rerank_check"]
    assert len(held["grid"]) >= 24
    for row in held["grid"]:
        for knob, value in row["params"].items():
            assert WHITELIST[knob].min <= value <= WHITELIST[knob].max, row
    assert held["default_dev"]["params"] == {k: WHITELIST[k].legacy for k in held["knobs"]}
    best = max((g["dev_ndcg5"], g["dev_r5"]) for g in held["grid"])
    assert (held["chosen"]["dev_ndcg5"], held["chosen"]["dev_r5"]) == best
    assert set(held["methods"]) == HELDOUT_METHODS
    for name, method in held["methods"].items():
        check_method(name, method, QUESTIONS)

    # the swapped fold: every question held out once, paired intervals around the pooled difference
    cv = held["cross_validated"]
    assert [f["tested_on"] for f in cv["folds"]] == [lo["conversations"][1:], lo["conversations"][:1]]
    assert cv["questions"] == 2 * QUESTIONS
    for name, method in cv["methods"].items():
        check_method(name, method, 2 * QUESTIONS)
    assert cv["methods"]["bm25s_facts"]["overall"] == tables["bm25s_facts"]["overall"]  # same questions, all of them
    for d in cv["r5_difference"].values():
        assert d["low"] <= d["mean"] <= d["high"]

    # the report renders the held-out result and judges the target on it, within the section's budget
    text = bench_eval.render(results)
    assert "Held out: the profile tuned on the dev conversations" in text and "— target " in text
    assert "Both folds (40 questions)" in text
    for method in lo["methods"].values():
        assert method["label"] in text
    check_section(SECTION_BY_MARKER[bench_eval.START], text)


def test_heldout_split_and_skip():
    assert eval_locomo.split_conversations(["a", "b", "c", "d", "e"]) == (["a", "c", "e"], ["b", "d"])
    assert eval_locomo.split_conversations(["a", "b"]) == (["a"], ["b"])
    held = eval_locomo.heldout([], ["a"], {})
    assert held["test_conversations"] == [] and "skipped" in held and "methods" not in held
    lo = {"conversations": ["a"], "methods": {n: {"overall": {"R@5": 0.1}} for n in
                                              ("ours_lexical_dense", "bm25s_facts", "dense_only")},
          "heldout": held}
    assert "not judged" in bench_eval._verdict(lo)


def test_paired_bootstrap_interval():
    same = eval_locomo.paired_bootstrap([0.5, 0.2, 1.0], [0.5, 0.2, 1.0])
    assert same == {"mean": 0.0, "low": 0.0, "high": 0.0}
    better = eval_locomo.paired_bootstrap([1.0] * 50 + [0.0] * 50, [0.0] * 100)
    assert better["mean"] == 0.5 and 0.35 < better["low"] < 0.5 < better["high"] < 0.65
