"""Smoke run of the retrieval-quality evaluation: 1 LoCoMo conversation, 20 questions.

Runs ``python -m bench.eval`` in a subprocess (the evaluation configures Django on its
own throwaway store, which cannot happen inside pytest's already configured process).
The shared data folder is required: without it this test fails, it does not skip.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import data_dir

REPO = Path(__file__).resolve().parents[2]


def test_eval_smoke_locomo_subset(tmp_path):
    locomo = data_dir() / "locomo" / "locomo10.json"
    assert locomo.is_file(), (
        f"LoCoMo data missing at {locomo}: the evaluation reads ../shared/data (or $MEMORY_DATA_DIR); "
        "this test must not be skipped"
    )
    out = tmp_path / "eval.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "MEMORY_DB")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.eval", "--conversations", "1", "--questions", "20", "--skip-memdaily",
         "--output", str(out), "--no-markdown"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text(encoding="utf-8"))
    lo = results["locomo"]
    assert lo["questions"] == 20
    assert lo["facts"] > 0 and lo["turns"] > 0 and lo["episodes"] > 0
    tables = {**lo["methods"], **lo["diagnostics"], **lo["episodes_session_level"]}
    assert {"ours_lexical", "ours_lexical_dense", "dense_only", "bm25s_facts", "fts5_raw_turns"} <= set(tables)
    for name, method in tables.items():
        groups = [method["overall"], *method["by_category"].values()]
        for metrics in groups:
            for key, value in metrics.items():
                if key == "n":
                    continue
                assert 0.0 <= value <= 1.0, (name, key, value)
        overall = method["overall"]
        assert overall["n"] == 20
        assert overall["R@10"] >= overall["R@5"] >= overall["R@3"] >= overall["R@1"], (name, overall)
    # something is found at all: the baselines are not all zero on real data
    assert max(m["overall"]["R@10"] for m in tables.values()) > 0
