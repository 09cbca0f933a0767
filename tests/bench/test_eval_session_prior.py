"""bench.eval_session_prior's scoring rules on hand-made rows (the harness itself needs the LoCoMo data)."""
from __future__ import annotations

import numpy as np

from bench.eval_session_prior import recall_at_5


def _row(split="dev"):
    # six facts: 0-4 in session 0 (weak), 5 in session 1 (gold), a little weaker than the best of session 0
    return {
        "split": split,
        "fact_bm25": np.array([3.0, 2.9, 2.8, 2.7, 2.6, 2.5]), "fact_cos": np.zeros(6),
        "session_bm25": np.array([0.0, 4.0]), "session_cos": np.array([0.0, 0.5]),
        "of_session": np.array([0, 0, 0, 0, 0, 1]),
        "fact_session_cos": np.array([[0.0, 0.0]] * 5 + [[0.0, 0.0]]),
        "evidence": [{"D1:1"}, {"D1:2"}, {"D1:3"}, {"D1:4"}, {"D1:5"}, {"D2:1"}], "gold": {"D2:1"},
    }


def test_a_fact_of_the_session_the_question_matches_is_lifted_into_the_first_five():
    rows = [_row()]
    assert recall_at_5(rows, "dev", 0.5, 0.0, "provenance") == 0.0  # sixth on its own score
    assert recall_at_5(rows, "dev", 0.5, 0.5, "provenance") == 1.0
    assert recall_at_5(rows, "dev", 0.5, 0.5, "content") == 0.0  # no closeness to any summary: no lift


def test_each_split_is_scored_on_its_own_rows():
    rows = [_row("dev"), {**_row("test"), "gold": {"D1:1"}}]
    assert recall_at_5(rows, "dev", 0.5, 0.5, "provenance") == 1.0
    assert recall_at_5(rows, "test", 0.5, 0.0, "provenance") == 1.0


def test_the_neighbourhood_rule_lifts_the_fact_whose_turns_match_within_its_window_and_session():
    row = {**_row(),
           # turns 0-5 in session 0, 6-8 in session 1; fact i was heard in turn i (fact 5: turn 7); only turn 6
           # holds the question's word
           "turn_terms": [set()] * 6 + [{"sunris"}, set(), set()], "q_idf": {"sunris": 2.0},
           "turn_session": np.array([0] * 6 + [1] * 3), "fact_turn": np.array([0, 1, 2, 3, 4, 7])}
    assert recall_at_5([row], "dev", 0.5, 0.5, "neighbourhood", 0) == 0.0  # its own turn does not match
    assert recall_at_5([row], "dev", 0.5, 0.5, "neighbourhood", 1) == 1.0  # the turn before it does
    # fact 4 (turn 4) is two turns from the match but in the other session: never lifted
    assert recall_at_5([{**row, "gold": {"D1:5"}, "fact_bm25": np.array([3.0, 2.9, 2.8, 2.7, 2.0, 2.9])}],
                       "dev", 0.5, 0.5, "neighbourhood", 2) == 0.0
