"""Offline extractor on MemDaily: coverage and hand-checked precision (``python -m bench.eval_extraction``).

The heuristic extractor (:class:`memory.providers.heuristic.HeuristicExtractor`) is what
the default deployment uses without an LLM. Each MemDaily trajectory (≈ 9 user messages)
is one extraction batch, as the pipeline's 12-message batches would be; the facts of a
message are the ones that appear when it is added to the batch (so a name introduced
earlier in the trajectory — "张伟是我的表弟" — is known when "张伟的家乡是…" comes).

* **coverage** — the share of gold (evidence) messages, i.e. the ``target_step_id`` of a
  question, that yield at least one fact; and the share of all messages that do.
* **precision** — over the (message, fact) pairs hand-checked in
  ``bench/extraction_labels.json`` that the current extractor still produces. A label is
  keyed by the message identifier (``<file>:<tid>:<mid>``) and the exact fact content, with
  a verdict and a short reason — never the message text. Labels the extractor no longer
  produces are counted as stale: a later change of the rules should re-label
  (``--sample`` prints fresh pairs to check).

No database and no network: the extractor is a pure function, and the whole data set
(26,531 messages) takes seconds.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import (
    BENCHMARKS_MD,
    RESULTS_DIR,
    DataMissingError,
    calibration,
    load_memdaily,
    measured,
    replace_section,
    require_data,
)

if TYPE_CHECKING:
    from memory.providers import Extractor

LABELS = Path(__file__).resolve().parent / "extraction_labels.json"
START, END = "<!-- extraction:start -->", "<!-- extraction:end -->"
SAMPLE_SEED = 20240402
SPEAKER_REF, SPEAKER_NAME = "user", "用户"


@dataclass(frozen=True)
class Produced:
    message: str  # <file>:<tid>:<mid>
    gold: bool
    kind: str
    slot: str
    content: str
    person_ref: str


def extract_all(data: dict[str, list[dict]], extractor: Extractor | None = None) -> tuple[dict[str, bool], list[Produced], dict[str, str]]:
    """Run the extractor over every trajectory; return (message id → is gold, produced facts, id → text)."""
    from memory.providers import DialogueLine, Participant
    from memory.providers.heuristic import HeuristicExtractor

    extractor = extractor or HeuristicExtractor()
    people = [Participant(SPEAKER_REF, SPEAKER_NAME, 1)]
    messages: dict[str, bool] = {}
    texts: dict[str, str] = {}
    produced: list[Produced] = []
    for fname, trajectories in data.items():
        for tr in trajectories:
            gold = {int(t) for q in tr["question_list"] for t in q.get("target_step_id") or []}
            lines: list = []
            before = 0
            for m in tr["message_list"]:
                mid = f"{fname}:{tr['tid']}:{m['mid']}"
                messages[mid] = int(m["mid"]) in gold
                texts[mid] = m["message"]
                lines.append(DialogueLine("user", SPEAKER_REF, SPEAKER_NAME, m["message"]))
                facts = extractor.extract(lines, people, []).facts
                for f in facts[before:]:
                    produced.append(Produced(mid, messages[mid], f.kind, f.slot, f.content, f.person_ref))
                before = len(facts)
    return messages, produced, texts


def extract_dulemon(extractor: Extractor | None = None) -> tuple[dict[str, bool], list[Produced], dict[str, str]]:
    """The same over the DuLeMon sample sessions (natural chit-chat, no rule was written for them).

    Only user utterances count as messages; bot lines are in the batch as assistant
    lines (and must yield nothing). Gold = user utterances grounded in a persona line
    (``\tU3``). Message ids are ``dulemon:<session>:<utterance>``.
    """
    from memory.providers import DialogueLine, Participant
    from memory.providers.heuristic import HeuristicExtractor

    extractor = extractor or HeuristicExtractor()
    people = [Participant(SPEAKER_REF, SPEAKER_NAME, 1)]
    path = require_data("dulemon-samples", "samples.json")
    messages: dict[str, bool] = {}
    texts: dict[str, str] = {}
    produced: list[Produced] = []
    for session, raw in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not raw.strip():
            continue
        lines: list = []
        before = 0
        for index, utterance in enumerate(json.loads(raw)["conversation"]):
            text, _, tag = utterance.partition("\t")
            role, _, body = text.partition(": ")
            body = body.replace(" ", "")  # the sessions come word-segmented
            user = role.strip() == "Usr"
            lines.append(DialogueLine("user", SPEAKER_REF, SPEAKER_NAME, body) if user
                         else DialogueLine("assistant", None, "bot", body))
            facts = extractor.extract(lines, people, []).facts
            mid = f"dulemon:{session}:{index}"
            if user:
                messages[mid] = tag.strip().startswith("U")
                texts[mid] = body
            for f in facts[before:]:
                produced.append(Produced(mid, messages.get(mid, False), f.kind, f.slot, f.content, f.person_ref))
            before = len(facts)
    return messages, produced, texts


def read_labels(path: Path = LABELS) -> list[dict]:
    if not path.exists():
        return []
    return json.loads(path.read_text(encoding="utf-8"))["labels"]


def precision(produced: list[Produced], labels: list[dict]) -> dict:
    current = {(p.message, p.content) for p in produced}
    live = [lab for lab in labels if (lab["message"], lab["fact"]) in current]
    correct = sum(1 for lab in live if lab["correct"])
    groups: dict[str, list[bool]] = defaultdict(list)
    for lab in live:
        groups[lab.get("group", "")].append(bool(lab["correct"]))
    return {
        "by_group": {g: {"checked": len(v), "correct": sum(v), "precision": round(sum(v) / len(v), 4)}
                     for g, v in sorted(groups.items())},
        "labelled": len(labels),
        "checked": len(live),
        "correct": correct,
        "stale": len(labels) - len(live),
        "precision": round(correct / len(live), 4) if live else None,
        "wrong": [{"message": lab["message"], "fact": lab["fact"], "reason": lab["reason"]}
                  for lab in live if not lab["correct"]],
    }


def evaluate(messages: dict[str, bool], produced: list[Produced], labels: list[dict]) -> dict:
    with_fact = {p.message for p in produced}
    gold = [m for m, g in messages.items() if g]
    by_entity: dict[str, list[bool]] = defaultdict(list)
    for m in gold:
        by_entity[m.split(":")[0].split("_")[-1]].append(m in with_fact)
    return {
        "messages": len(messages),
        "messages_with_a_fact": sum(1 for m in messages if m in with_fact),
        "coverage_all": round(sum(1 for m in messages if m in with_fact) / len(messages), 4),
        "gold_messages": len(gold),
        "gold_with_a_fact": sum(1 for m in gold if m in with_fact),
        "coverage_gold": round(sum(1 for m in gold if m in with_fact) / len(gold), 4) if gold else 0.0,
        "gold_by_entity": {e: {"n": len(v), "coverage": round(sum(v) / len(v), 4)}
                           for e, v in sorted(by_entity.items())},
        "facts": len(produced),
        "facts_by_kind": dict(Counter(p.kind for p in produced).most_common()),
        "facts_with_slot": sum(1 for p in produced if p.slot),
        "precision": precision(produced, labels),
    }


def sample(produced: list[Produced], n: int, labels: list[dict]) -> list[Produced]:
    """``n`` produced pairs drawn with a fixed seed, skipping those already labelled."""
    done = {(lab["message"], lab["fact"]) for lab in labels}
    pool = [p for p in produced if (p.message, p.content) not in done]
    return random.Random(SAMPLE_SEED).sample(pool, min(n, len(pool)))


def render(result: dict) -> str:
    """Coverage (what fact recall can find at most) and hand-checked precision, in one paragraph."""
    p = result["precision"]
    prec = f"{p['precision']:.3f}" if p["precision"] is not None else "n/a"
    groups = ", ".join(f"{g} {v['correct']}/{v['checked']}" for g, v in p["by_group"].items())
    entities = ", ".join(f"{e} {v['coverage']:.3f}" for e, v in result["gold_by_entity"].items())
    how = measured(result["command"], "the heuristic extractor over every MemDaily trajectory (one trajectory one "
                   "batch, speaker \"用户\"), precision over the hand-checked pairs of `bench/extraction_labels.json` it "
                   f"still produces ({p['stale']} stale of {p['labelled']})", result)
    text = (f"Gold (evidence) messages yielding a fact: {result['gold_with_a_fact']} / {result['gold_messages']} = "
            f"{result['coverage_gold']:.3f} (all messages {result['coverage_all']:.3f}; by entity type: {entities}); "
            f"precision of the hand-checked facts {p['correct']} / {p['checked']} = {prec} ({groups}); "
            f"{result['facts']} facts, {result['facts_with_slot']} with a slot.")
    if d := result.get("dulemon"):
        text += (f" DuLeMon chit-chat: {d['user_messages_with_a_fact']} of {d['user_messages']} user utterances yield a "
                 f"fact, {d['assistant_facts']} facts from bot lines.")
    if p["wrong"]:
        text += " Judged wrong: " + "; ".join(f"`{w['fact']}` ({w['reason']})" for w in p["wrong"]) + "."
    return "\n".join(["## Offline fact extraction (MemDaily)", "", how, "", text])


def _everything() -> tuple[dict[str, bool], list[Produced], dict[str, str], dict | None]:
    """MemDaily, plus the DuLeMon samples when they are there (their own coverage block)."""
    messages, produced, texts = extract_all(load_memdaily())
    natural = None
    try:
        d_messages, d_produced, d_texts = extract_dulemon()
    except DataMissingError:
        return messages, produced, texts, None
    with_fact = {p.message for p in d_produced}
    gold = [m for m, g in d_messages.items() if g]
    natural = {
        "user_messages": len(d_messages),
        "user_messages_with_a_fact": sum(1 for m in d_messages if m in with_fact),
        "gold_messages": len(gold),
        "gold_with_a_fact": sum(1 for m in gold if m in with_fact),
        "facts": len(d_produced),
        "assistant_facts": sum(1 for p in d_produced if p.message not in d_messages),
    }
    return messages, produced + d_produced, {**texts, **d_texts}, natural


def run(*, log: Callable[[str], None] = print, labels_path: Path = LABELS) -> dict:
    t0 = time.perf_counter()
    messages, produced, _, natural = _everything()
    memdaily = [p for p in produced if not p.message.startswith("dulemon:")]
    result = evaluate(messages, memdaily, [])
    result["precision"] = precision(produced, read_labels(labels_path))
    result["dulemon"] = natural
    result["seconds"] = round(time.perf_counter() - t0, 1)
    log(f"  extraction: gold coverage {result['coverage_gold']:.3f}, all {result['coverage_all']:.3f}, "
        f"precision {result['precision']['precision']} over {result['precision']['checked']} labels")
    return result


def write(result: dict, *, output: Path, markdown: bool) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    if markdown:
        replace_section(BENCHMARKS_MD, START, END, render(result))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.eval_extraction", description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", type=Path, default=RESULTS_DIR / "extraction.json")
    ap.add_argument("--no-markdown", action="store_true", help="do not touch BENCHMARKS.md")
    ap.add_argument("--sample", type=int, default=0, metavar="N",
                    help="print N unlabelled (message, fact) pairs with their text to hand-check; writes nothing")
    ap.add_argument("--group", choices=("all", "dulemon"), default="all", help="which pairs --sample draws from")
    ap.add_argument("--render", type=Path, default=None, metavar="JSON", help="only re-render the section from a results file")
    args = ap.parse_args(argv)
    if args.render:
        replace_section(BENCHMARKS_MD, START, END, render(json.loads(args.render.read_text(encoding="utf-8"))))
        return 0
    try:
        require_data("memdaily")
    except DataMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from memory.engine.tokenize import warm_up

    warm_up()
    if args.sample:
        _, produced, texts, _ = _everything()
        if args.group == "dulemon":
            produced = [p for p in produced if p.message.startswith("dulemon:")]
        for p in sample(produced, args.sample, read_labels()):
            print(json.dumps({"message": p.message, "fact": p.content, "kind": p.kind, "slot": p.slot,
                              "text": texts[p.message]}, ensure_ascii=False))
        return 0
    before = calibration()
    result = run()
    result["command"] = "python -m bench.eval_extraction"
    result["calibration"] = {"before": before, "after": calibration()}
    result["generated_at"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
    write(result, output=args.output, markdown=not args.no_markdown)
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
