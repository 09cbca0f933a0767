"""bench.sketch_recall: its corpus (dialogue lines and clauses, never the questions) and its report."""
from __future__ import annotations

import json

import numpy as np

from bench import sketch_recall


def test_corpus_is_the_dialogues_and_the_queries_are_the_questions(tmp_path, monkeypatch):
    (tmp_path / "memdaily").mkdir()
    (tmp_path / "memdaily" / "01_simple_events.json").write_text(json.dumps([{
        "message_list": [{"message": "我将要参加金融科技精英论坛，地点在深圳。", "time": "2024年04月01日 周一 08:30"}],
        "question_list": [{"question": "论坛在哪里举行？", "answer": "深圳会展中心的三号馆"}]}]))
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "locomo10.json").write_text(json.dumps([{
        "conversation": {"session_1": [{"text": "I went to a painting class yesterday.", "dia_id": "D1:1"}]},
        "qa": [{"question": "What class did she take?", "answer": "painting", "evidence": ["D1:1"]}]}]))
    for lang in ("cn", "en"):
        folder = tmp_path / "memorybank-siliconfriend" / "eval_data" / lang
        folder.mkdir(parents=True)
        (folder / f"memory_bank_{lang}.json").write_text(json.dumps({"王峰": {"history": {"2023-05-01": [
            {"query": "今天跑了多久呢？", "response": "你今天在公园跑了五公里"}]}}}))
        (folder / f"probing_questions_{lang}.jsonl").write_text(json.dumps({"王峰": ["我在公园里跑了多久？"]}) + "\n")
    (tmp_path / "dulemon-samples").mkdir()
    (tmp_path / "dulemon-samples" / "samples.json").write_text(json.dumps({"user_said_persona": ["U1: 我 喜欢 运动 和 爬山"]}) + "\n")
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path))
    rows, questions = sketch_recall.corpus_and_questions()
    assert questions == sorted(["论坛在哪里举行？", "What class did she take?", "我在公园里跑了多久？"])
    assert "我将要参加金融科技精英论坛，地点在深圳。" in rows and "我将要参加金融科技精英论坛" in rows  # line and clause
    assert "你今天在公园跑了五公里" in rows and "我 喜欢 运动 和 爬山" in rows
    assert "今天跑了多久呢？" in rows and "深圳会展中心的三号馆" not in rows  # a user line; an answer
    assert not set(rows) & set(questions)
    assert {sketch_recall.split_of(q) for q in questions * 10} <= {"dev", "test"}
    assert sketch_recall.split_of("论坛在哪里举行？") == sketch_recall.split_of("论坛在哪里举行？")


def test_recall_is_one_with_every_row_a_candidate_and_the_report_shows_it():
    rng = np.random.default_rng(2)
    matrix = sketch_recall.matrix_of(rng.standard_normal((200, 16)).astype(np.float32))
    from memory.engine.quantize import quantize_vector

    queries = [quantize_vector(v) for v in rng.standard_normal((5, 16))]
    exact = [{i for i, _ in matrix.top_k(q, sketch_recall.K)} for q in queries]
    assert sketch_recall.recall(matrix, queries, exact, 200) == 1.0
    one = {"queries": 5, **{str(c): 0.5 for c in sketch_recall.CANDIDATES}}
    stats = {"median_ms": 1.0, "p95_ms": 2.0}
    text = sketch_recall.render({"rows": 200, "k": 15, "real": {"dev": one, "test": one}, "iid": {**one, "rows": 9},
                                 "time_ms": {kind: {"exact": stats, "sketch": stats} for kind in ("real", "iid")},
                                 "calibration": {}})
    assert "| real, test (200) | 5 | 0.5000 |" in text and "iid rows exact 1.0 / 2.0" in text
