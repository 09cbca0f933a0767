"""bench/eval_fit.py: the BENCHMARKS.md section it writes (the run itself lives LoCoMo through the API: make eval)."""
from __future__ import annotations

import pytest

from bench import eval_fit
from bench.common import SECTION_BY_MARKER, SectionError, check_section


def _ci(mean: float, low: float, high: float) -> dict:
    return {"mean": mean, "low": low, "high": high, "n": 400}


RESULTS = {
    "command": "python -m bench.eval_fit", "cpus": 2, "seconds": 1800.0,
    "split": {"dev": ["conv-26", "conv-41"], "test": ["conv-30", "conv-42"]},
    "fit": {"budget": 40, "evaluations": 38, "seconds": 600.0, "split": {"dev_turns": 500, "heldout_turns": 250},
            "heldout": {"base": {"recall": 0.51}, "chosen": {"recall": 0.55}, "gain": {"recall": _ci(0.04, 0.02, 0.06)}},
            "verdict": "better", "changed": {"relevance_weight": {"from": 0.6, "to": 0.8}}, "knobs": ["a", "b", "c"]},
    "test": {"turns": 700, "default": _ci(0.5, 0.47, 0.53), "fitted": _ci(0.53, 0.5, 0.56),
             "gain": _ci(0.03, 0.01, 0.05), "ndcg_gain": _ci(0.02, 0.0, 0.04), "changed_turns": 120},
}


def test_the_section_reports_both_profiles_on_the_test_turns_with_their_intervals():
    text = eval_fit.render(RESULTS)
    check_section(SECTION_BY_MARKER[eval_fit.START], text)  # within its line budget, no dates or hashes
    assert "| default | 700 | 0.500 [0.470, 0.530] |" in text
    assert "| fitted | 700 | 0.530 [0.500, 0.560] |" in text
    assert "| gain (paired) | 700 | +0.030 [+0.010, +0.050] |" in text
    assert "`python -m bench.eval_fit`" in text and "conv-26, conv-41" in text
    assert "`relevance_weight` 0.6 → 0.8" in text and "verdict “better”" in text
    assert "the fitted profile is better (the interval is above zero)" in text
    tied = eval_fit.render({**RESULTS, "test": {**RESULTS["test"], "gain": _ci(-0.003, -0.018, 0.012)}})
    assert "| gain (paired) | 700 | -0.003 [-0.018, +0.012] |" in tied and "not told apart (the interval holds zero)" in tied


def test_a_result_with_a_date_in_it_is_refused():
    with pytest.raises(SectionError):
        check_section(SECTION_BY_MARKER[eval_fit.START], eval_fit.render({**RESULTS, "command": "run 2026-12-04"}))


def test_the_command_line_names_only_what_differs_from_the_defaults():
    assert eval_fit.command_line(eval_fit.parse_args([])) == "python -m bench.eval_fit"
    assert eval_fit.command_line(eval_fit.parse_args(["--conversations", "4", "--budget", "8"])) == (
        "python -m bench.eval_fit --conversations 4 --budget 8")
