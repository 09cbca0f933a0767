"""The offline-extraction evaluation: coverage of gold messages and precision over hand-checked labels."""
from __future__ import annotations

import json

from bench import eval_extraction
from bench.common import data_dir

# Two trajectories in MemDaily's shape, written for this test (no dataset text).
DATA = {
    "01_simple_roles": [
        {
            "tid": 0,
            "message_list": [
                {"mid": 0, "message": "赵文静是我的表姐，其家乡是安徽合肥。"},
                {"mid": 1, "message": "赵文静的生日是7月9日。"},
                {"mid": 2, "message": "今天天气真热。"},
            ],
            "question_list": [{"qid": 0, "question": "表姐的家乡？", "target_step_id": [0, 1]}],
        },
        {
            "tid": 1,
            "message_list": [
                {"mid": 0, "message": "你觉得周末去哪好？"},
                {"mid": 1, "message": "编程马拉松的地点是苏州。"},
            ],
            "question_list": [{"qid": 0, "question": "编程马拉松在哪？", "target_step_id": [0, 1]}],
        },
    ]
}


def test_coverage_counts_gold_messages_with_a_fact_and_names_carry_over_the_batch():
    messages, produced, _ = eval_extraction.extract_all(DATA)

    result = eval_extraction.evaluate(messages, produced, [])

    facts = {(p.message, p.content) for p in produced}
    assert ("01_simple_roles:0:1", "用户的表姐赵文静的生日是7月9日") in facts
    assert (result["gold_messages"], result["gold_with_a_fact"]) == (4, 3)
    assert (result["messages"], result["messages_with_a_fact"]) == (5, 3)
    assert result["coverage_gold"] == 0.75 and result["coverage_all"] == 0.6


def test_precision_is_over_labels_still_produced_and_counts_the_stale_ones():
    _, produced, _ = eval_extraction.extract_all(DATA)
    labels = [
        {"message": "01_simple_roles:0:0", "fact": "用户的表姐是赵文静", "correct": True, "reason": "r", "group": "g"},
        {"message": "01_simple_roles:1:1", "fact": "编程马拉松的地点是苏州", "correct": False, "reason": "r", "group": "g"},
        {"message": "01_simple_roles:0:2", "fact": "用户觉得今天天气真热", "correct": False, "reason": "r", "group": "g"},
    ]

    p = eval_extraction.precision(produced, labels)

    assert (p["checked"], p["correct"], p["stale"], p["precision"]) == (2, 1, 1, 0.5)
    assert p["by_group"] == {"g": {"checked": 2, "correct": 1, "precision": 0.5}}
    assert [w["fact"] for w in p["wrong"]] == ["编程马拉松的地点是苏州"]


def test_the_labels_file_holds_identifiers_and_verdicts_only():
    labels = json.loads(eval_extraction.LABELS.read_text(encoding="utf-8"))["labels"]

    assert len([lab for lab in labels if lab["group"] == "random"]) >= 50
    for lab in labels:
        assert set(lab) == {"message", "fact", "correct", "reason", "group"}
        assert isinstance(lab["correct"], bool) and lab["reason"]
        assert len(lab["message"].split(":")) == 3


def test_on_memdaily_roles_the_gold_coverage_is_at_least_half():
    folder = data_dir() / "memdaily"
    assert folder.is_dir(), f"MemDaily missing at {folder}; this test must not be skipped"
    data = {name: json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
            for name in ("01_simple_roles", "01_simple_events")}

    messages, produced, _ = eval_extraction.extract_all(data)
    result = eval_extraction.evaluate(messages, produced, eval_extraction.read_labels())

    assert result["coverage_gold"] >= 0.5
    assert result["precision"]["precision"] is None or result["precision"]["precision"] >= 0.8
