"""The recall matrix's data and arithmetic, without a deployment (``make eval`` lives it through the API)."""
from __future__ import annotations

import pytest

from bench import eval_matrix
from bench.eval_matrix import Case, Unit, score


def test_the_datasets_become_units_with_splits_and_forms():
    dulemon = eval_matrix.dulemon_units(4)
    assert [u.split for u in dulemon] == ["dev", "test", "dev", "test"]
    forms = {c.form for u in dulemon for c in u.cases}
    assert forms == {"line", "whole", "chat"}
    chat = next(c for c in dulemon[0].cases if c.form == "chat" and c.context)
    assert chat.context and chat.session == "dialogue" and all(at < chat.at for _r, _t, at in chat.context)
    whole = dulemon[0].cases[dulemon[0].cases.index(chat) - 1]
    assert whole.form == "whole" and whole.text.endswith(chat.text) and whole.text.count("\n") == len(chat.context)
    # the facts are the user's persona lines, dated before the dialogue
    assert all(at < dulemon[0].ask_at for _p, _t, _g, at in dulemon[0].facts)
    locomo = eval_matrix.locomo_units(1)[0]
    assert {c.form for c in locomo.cases} == {"line"} and locomo.preamble == []
    assert all(c.speaker in locomo.persons for c in locomo.cases)
    assert all(at < locomo.ask_at for _p, _t, _g, at in locomo.facts)
    # the dialogue is posted as it happened, before the questions, in the stream they are asked in
    times = [at for _p, _t, at, _r in locomo.dialogue]
    assert times == sorted(times) and times[-1] < locomo.ask_at
    assert {c.session for c in locomo.cases} == {eval_matrix.DIALOGUE_SESSION}
    assert {p for p, _t, _a, _r in locomo.dialogue} == set(locomo.persons)
    # each observation was heard in one of its own evidence turns (most have one)
    refs = {r for _p, _t, _a, r in locomo.dialogue}
    assert len(locomo.sources) > 0.9 * len(locomo.facts)
    assert all(ref in refs and ref in locomo.facts[n][2] for n, ref in locomo.sources.items())


def test_small_talk_lines_are_not_the_gates_bank():
    from memory.engine.background import BANK

    lines = {line for group in eval_matrix.SMALL_TALK.values() for line in group}
    assert not lines & set(BANK)


def test_score_reads_the_prompt_labels_per_split():
    units = [
        Unit("D", "a", "dev", "zh", ["u"], [], [Case("line", "x", {"g1", "g2"}, 0)]),
        Unit("D", "b", "test", "zh", ["u"], [], [Case("line", "y", {"g3"}, 0)]),
    ]
    lived = {"ours": {"answers": [
        {"cases": [[{"g1"}, set(), {"g2"}]], "small_talk": [0, 2]},
        {"cases": [[set()] * 5 + [{"g3"}]], "small_talk": [1, 1]},  # the 6th fact is past R@5
    ]}}
    base = [{"bm25s": [[{"g1"}]], "dense": [[]]}, {"bm25s": [[{"g3"}]], "dense": [[{"g3"}]]}]
    out = score(units, lived, base)["D"]
    assert out["cells"]["line"]["ours"]["dev"] == {"mean": 1.0, "n": 1}
    assert out["cells"]["line"]["ours"]["test"] == {"mean": 0.0, "n": 1}
    assert out["cells"]["line"]["bm25s"]["dev"]["mean"] == 0.5 and out["cells"]["line"]["dense"]["test"]["mean"] == 1.0
    assert out["small_talk"]["ours"]["dev"]["mean"] == 1.0 and out["small_talk"]["ours"]["all"]["mean"] == 1.0


@pytest.mark.parametrize(("lang", "unanswerable"), [("cn", 0), ("en", 1)])
def test_memorybank_labels_point_at_pairs_that_hold_their_quote(lang, unanswerable):
    import json

    bank, questions = eval_matrix.memorybank_data(lang)
    labels = eval_matrix.memorybank_labels(lang)
    assert set(labels) == {name.strip() for name in bank} == set(questions)
    assert [len(labels[n]) for n in questions] == [len(q) for q in questions.values()]
    assert sum(len(q) for q in questions.values()) == 100
    assert sum(not evidence for per_user in labels.values() for evidence in per_user) == unanswerable
    bank = {name.strip(): person for name, person in bank.items()}
    entries = json.loads(eval_matrix.MEMORYBANK_LABELS[lang].read_text(encoding="utf-8"))["labels"]
    for entry in entries:
        history = bank[entry["user"]]["history"]
        pairs = [history[date][j] for date, j in entry["evidence"]]  # an index past the day's pairs raises
        assert len(entry["quote"]) <= 20
        if pairs:
            assert any(entry["quote"] in p["query"] + p["response"] for p in pairs), entry
        else:
            assert entry["quote"] == ""


def test_memorybank_units_are_test_only_with_the_three_forms():
    units = eval_matrix.memorybank_units(2)
    assert [u.split for u in units] == ["test", "test"] and units[0].lang == "zh"
    unit = units[0]
    # every pair is two facts of the user (query, response), dated before the questions
    assert len(unit.facts) == 2 * sum(len(day) for day in eval_matrix.memorybank_data()[0]["张曼婷"]["history"].values())
    assert all(at < unit.ask_at for _p, _t, _g, at in unit.facts)
    assert {c.form for c in unit.cases} == {"line", "whole", "chat"}
    line, whole, chat = unit.cases[:3]
    assert line.gold == whole.gold == chat.gold == {"0:2023-04-30:3"}  # 《流浪地球》
    assert whole.text.endswith(line.text) and whole.text.count("\n") == len(chat.context)
    assert chat.session and all(at < chat.at for _r, _t, at in chat.context)
    assert {r for r, _t, _a in chat.context} == {"user", "assistant"}
    labelled = {g for _p, _t, gs, _a in unit.facts for g in gs}
    assert all(c.gold <= labelled for c in unit.cases)
    # the ten days are posted as the chat they were: each memory heard in its own line
    said = {ref: (person, text) for person, text, _a, ref in unit.dialogue}
    assert len(said) == len(unit.facts) == len(unit.sources)
    assert all(said[unit.sources[n]][1] == text for n, (_p, text, _g, _a) in enumerate(unit.facts))
    assert {person for person, _t in said.values()} == {"user", ""}  # "": the companion's lines


def test_a_partial_matrix_leaves_the_full_report_alone():
    from bench.common import RESULTS_DIR

    full = eval_matrix.parse_args([])
    assert not any(eval_matrix.skipped_datasets(full).values()) and not full.no_markdown
    assert full.output == RESULTS_DIR / "eval_matrix.json"
    args = eval_matrix.parse_args(["--datasets", "MemoryBank"])
    skip = eval_matrix.skipped_datasets(args)
    assert [name for name, skipped in skip.items() if not skipped] == ["MemoryBank"] and set(skip) == set(eval_matrix.DATASETS)
    assert args.no_markdown and args.output == RESULTS_DIR / "eval_matrix-memorybank.json"
    with pytest.raises(SystemExit):
        eval_matrix.parse_args(["--datasets", "Nope"])
    # a diagnostic profile: nothing it measures replaces the product's matrix
    tuned = eval_matrix.parse_args(["--profile", '{"told_gain": 0.5}'])
    eval_matrix.skipped_datasets(tuned)
    assert tuned.profile == {"told_gain": 0.5} and tuned.no_markdown and tuned.output != RESULTS_DIR / "eval_matrix.json"


def test_case_rows_keep_each_methods_top_labels_in_rank_order():
    units = [Unit("D", "a", "test", "zh", ["u"], [], [Case("line", "x", {"g1"}, 0)])]
    lived = {"ours": {"answers": [{"cases": [[set(), {"g2", "g1"}] + [set()] * 4], "small_talk": []}]}}
    base = [{"bm25s": [[{"g1"}]], "dense": [[]]}]
    [row] = eval_matrix.case_rows(units, lived, base)
    assert row["gold"] == ["g1"] and row["form"] == "line" and row["unit"] == "a"
    assert row["top"]["ours"] == [[], ["g1", "g2"], [], [], []]  # the sixth fact is past R@5
    assert row["top"]["bm25s"] == [["g1"]] and row["top"]["dense"] == []
