"""The conversation as the query: does a turn find the memory the dialogue is about?

Each data set is lived through the product's own turn path (``recall.prepare_turn`` then
``recall.confirm_turn``, default profile, the local USE model for facts, queries and
messages), once per *variant* of the turn's query — a retrieval-profile switch of the product:

* ``text``: the turn's line alone (the context channels off);
* ``lexical``: plus the lexical terms of the last user lines, weighted by recency;
* ``dense``: plus the recency-weighted vectors of the recent messages;
* ``both``: the product default.

Data (read from ``../shared/data``, never copied):

* **DuLeMon** samples: each session's user persona lines are facts of the user, learnt 30
  days before the chat; the dialogue is posted message by message. A user line tagged with
  a persona line is a turn on that line; a bot line tagged with a user persona line is a
  turn on the user line before it (the bot's reply is what the memory was for). Gold = the
  tagged persona line.
* **MemDaily noisy** (``06_noisy_*``): every message of a trajectory is a fact of its user,
  dated when it was said; the question's chit-chat arrives as earlier user lines and its
  last sentence is the turn. Gold = the target messages.

Metrics: R@1, R@3, R@5 over the confirmed prompt facts (in prompt order) and MRR.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from bench.common import (
    BENCHMARKS_MD,
    RESULTS_DIR,
    calibration,
    md_table,
    measured,
    replace_section,
    require_data,
    setup_store,
)

DAY_MS = 86_400_000
SHANGHAI = timezone(timedelta(hours=8))
# retrieval-profile overrides of each variant (the tuning whitelist's context knobs)
VARIANTS = {
    "text": {"context_lexical_lines": 0, "context_dense_messages": 0},
    "lexical": {"context_dense_messages": 0},
    "dense": {"context_lexical_lines": 0},
    "both": {},
}
START = "<!-- eval-context:start -->"
END = "<!-- eval-context:end -->"


@dataclass
class Line:
    role: str  # user | assistant
    text: str
    at: int


@dataclass
class Case:
    """One turn to evaluate: the lines before it are posted first, then ``text`` is the turn."""

    upto: int  # the turn is on lines[upto] (posted before the turn)
    gold: set[str]


@dataclass
class Session:
    key: str
    facts: list[tuple[str, str, int]]  # (label, content, at)
    lines: list[Line]
    cases: list[Case] = field(default_factory=list)


def _unsegment(text: str) -> str:
    """DuLeMon is word-segmented: drop the spaces between CJK characters (keep them between Latin words)."""
    text = " ".join(text.split())
    return re.sub(r"(?<=[^\x00-\x7f]) | (?=[^\x00-\x7f])", "", text)


def dulemon_sessions() -> Iterator[Session]:
    path = require_data("dulemon-samples", "samples.json")
    start = int(datetime(2024, 5, 1, 20, 0, tzinfo=SHANGHAI).timestamp() * 1000)
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not raw.strip():
            continue
        data = json.loads(raw)
        at0 = start + n * DAY_MS
        facts = []
        for item in data.get("user_said_persona", []) + data.get("user_no_said_persona", []):
            label, _, content = item.partition(":")
            facts.append((label.strip(), _unsegment(content), at0 - 30 * DAY_MS))
        session = Session(key=f"dulemon-{n}", facts=facts, lines=[])
        for i, utterance in enumerate(data["conversation"]):
            body, _, tag = utterance.partition("\t")
            speaker, _, text = body.partition(":")
            role = "user" if speaker.strip() == "Usr" else "assistant"
            session.lines.append(Line(role, _unsegment(text), at0 + i * 20_000))
            if not tag.strip().startswith("U"):
                continue
            upto = i if role == "user" else i - 1
            if upto >= 0 and session.lines[upto].role == "user":
                session.cases.append(Case(upto=upto, gold={tag.strip()}))
        if session.cases:
            yield session


def _memdaily_time(text: str) -> int:
    value = datetime.strptime(text.split()[0], "%Y年%m月%d日").replace(tzinfo=SHANGHAI)
    hh, mm = (text.split()[-1].split(":") + ["0"])[:2]
    return int((value + timedelta(hours=int(hh), minutes=int(mm))).timestamp() * 1000)


def _sentences(text: str) -> list[str]:
    parts = [p for p in re.split(r"(?<=[。！？!?])", text) if p.strip()]
    return parts or [text]


def memdaily_noisy_sessions(limit: int | None = None) -> Iterator[Session]:
    folder = require_data("memdaily")
    count = 0
    for path in sorted(folder.glob("06_noisy_*.json")):
        for traj in json.loads(path.read_text(encoding="utf-8")):
            facts = [(str(m["mid"]), m["message"], _memdaily_time(m["time"])) for m in traj["message_list"]]
            for q in traj["question_list"]:
                at = _memdaily_time(q["time"])
                lines = [Line("user", s, at + i * 15_000) for i, s in enumerate(_sentences(q["question"]))]
                yield Session(
                    key=f"{path.stem}-{traj['tid']}-{q['qid']}", facts=facts, lines=lines,
                    cases=[Case(upto=len(lines) - 1, gold={str(t) for t in q["target_step_id"]})],
                )
                count += 1
                if limit is not None and count >= limit:
                    return


def _embed_all(texts: list[str]):
    from memory.providers.config import get_embedder

    out = []
    for i in range(0, len(texts), 20):
        out.extend(get_embedder().embed(texts[i:i + 20]))
    return out


class _Discard(Exception):
    pass


def run_variant(sessions: list[Session], variant: str) -> dict:
    """Every case of every session through prepare/confirm under one variant's settings.

    Each variant's memories are rolled back afterwards, so every variant sees the same
    store (the same IDF) as the others.
    """
    from django.db import transaction  # Django is configured by setup_store() first

    rows: list[dict[str, float]] = []
    try:
        with transaction.atomic():
            _run(sessions, variant, rows)
            raise _Discard
    except _Discard:
        pass
    return _mean(rows)


def _run(sessions: list[Session], variant: str, rows: list[dict[str, float]]) -> None:
    from memory import recall, services
    from memory.overrides import overrides_scope

    with overrides_scope(VARIANTS[variant]):
        for session in sessions:
            tag = f"{variant}-{session.key}"
            user = services.resolve_person(platform="eval", external_id=f"u-{tag}", name="用户")
            stream = services.resolve_stream(platform="eval", kind="direct", external_id=tag, name=tag)
            label_of: dict[int, str] = {}
            writes = [
                services.add_fact(person_id=user.pk, content=content, kind="未分类", origin_kind="direct", at=at)
                for _label, content, at in session.facts
            ]
            for (label, _c, _a), write in zip(session.facts, writes, strict=True):
                label_of.setdefault(write.fact_id, label)
            ids = list(dict.fromkeys(w.fact_id for w in writes))
            vectors = _embed_all([c for _l, c, _a in session.facts])
            for (_l, _c, _a), write, vector in zip(session.facts, writes, vectors, strict=True):
                if vector is not None and write.fact_id in ids:
                    services.store_fact_vector(fact_id=write.fact_id, vector=vector)
            posted = 0
            for case in session.cases:
                for line in session.lines[posted:case.upto + 1]:
                    services.append_message(
                        stream_id=stream.pk, role=line.role, content=line.text,
                        sender_person_id=user.pk if line.role == "user" else None, at=line.at,
                    )
                posted = case.upto + 1
                turn_line = session.lines[case.upto]
                ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=user.pk, text=turn_line.text, at=turn_line.at)
                confirmed = recall.confirm_turn(turn_id=ctx.turn_id, at=turn_line.at)
                got = [label_of.get(p.fact.id) for p in confirmed.facts]
                rows.append(_score(got, case.gold))


def _score(got: list[str | None], gold: set[str]) -> dict[str, float]:
    out = {f"R@{k}": len(gold & set(got[:k])) / len(gold) for k in (1, 3, 5)}
    rank = next((i + 1 for i, g in enumerate(got) if g in gold), None)
    out["MRR"] = 1.0 / rank if rank else 0.0
    return out


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {"n": 0}
    out = {k: round(sum(r[k] for r in rows) / len(rows), 4) for k in rows[0]}
    out["n"] = len(rows)
    return out


def render(results: dict) -> str:
    """One table: per data set, R@5 (MRR) of each variant of the turn's query."""
    how = measured(results["command"], "the product's turn path in-process (prepare + confirm, default profile, "
                   "local USE vectors)", results)
    rows = [[f"{name} ({block['variants']['both'].get('n', 0)} turns)",
             *(f"{block['variants'][v]['R@5']:.3f} ({block['variants'][v]['MRR']:.3f})" for v in VARIANTS)]
            for name, block in results["datasets"].items()]
    return "\n".join([
        "## The conversation as the query", "",
        how + " R@5 (MRR) of the prompt facts under four turn queries: `text` the line alone, `lexical` with the "
        "recent user lines as lexical queries, `dense` with the recent messages' vectors, `both` (the default).", "",
        md_table(["data set", *VARIANTS], rows),
    ]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memdaily-limit", type=int, default=None, help="at most this many MemDaily noisy questions")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    parser.add_argument("--render", default=None, metavar="JSON", help="only re-render the section from a results file")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.render:
        replace_section(BENCHMARKS_MD, START, END, render(json.loads(open(args.render, encoding="utf-8").read())))
        return 0
    setup_store()
    from django.conf import settings

    from memory.providers.config import reset_cache

    settings.EMBEDDING_PROVIDER = "local"  # the product default: queries and messages are embedded by the product
    reset_cache()
    started = time.perf_counter()
    before = calibration()
    datasets = {
        "DuLeMon samples": list(dulemon_sessions()),
        "MemDaily noisy": list(memdaily_noisy_sessions(args.memdaily_limit)),
    }
    results: dict = {"datasets": {}}
    for name, sessions in datasets.items():
        block = {"variants": {}}
        for variant in VARIANTS:
            block["variants"][variant] = run_variant(sessions, variant)
            print(f"{name:16s} {variant:8s} {block['variants'][variant]}", flush=True)
        results["datasets"][name] = block
    results["seconds"] = time.perf_counter() - started
    results["calibration"] = {"before": before, "after": calibration()}
    results["command"] = "python -m bench.eval_context" + (" " + " ".join(argv or []) if argv else "")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "eval_context.json").write_text(json.dumps(results, ensure_ascii=False, indent=2), encoding="utf-8")
    if not args.no_write:
        replace_section(BENCHMARKS_MD, START, END, render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
