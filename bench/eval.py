"""Retrieval-quality evaluation (``make eval`` = ``python -m bench.eval``).

Builds a throwaway store, imports LoCoMo (English) and a MemDaily subset (Chinese)
through the real write path, runs our recall next to the baselines people would pick
instead (bm25s, dense-only, plain FTS5), all in one run, and writes
``bench/results/eval.json`` and the eval section of ``BENCHMARKS.md``.

    python -m bench.eval                 # all 10 LoCoMo conversations + 12 MemDaily haystacks (~312 trajectories)
    python -m bench.eval --quick         # 2 conversations + 3 haystacks
    python -m bench.eval --conversations 1 --questions 20 --memdaily-haystacks 1   # smoke size
    python -m bench.eval --full          # every MemDaily trajectory (~116 haystacks)
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from bench.common import (
    BENCHMARKS_MD,
    RESULTS_DIR,
    DataMissingError,
    data_dir,
    md_table,
    replace_section,
    require_data,
    setup_store,
)

START, END = "<!-- eval:start -->", "<!-- eval:end -->"
TITLE = "Benchmarks"


RATIO_KEYS = ("R@1", "R@3", "R@5", "R@10", "nDCG@5", "nDCG@10")


def _metric_rows(methods: dict, keys: tuple[str, ...]) -> list[list[object]]:
    return [[m["label"], *[m["overall"].get(k, 0.0) for k in keys]] for m in methods.values()]


def _category_rows(methods: dict, key: str, group: str) -> tuple[list[str], list[list[object]]]:
    groups = list(next(iter(methods.values()))[group])
    header = ["method", *[f"{g} (n={next(iter(methods.values()))[group][g]['n']})" for g in groups]]
    rows = [[m["label"], *[m[group][g].get(key, 0.0) for g in groups]] for m in methods.values()]
    return header, rows


def _as_method(ceiling: dict, key: str, group: str) -> dict:
    return {
        "overall": {"R@5": ceiling["overall"][key]},
        group: {g: {"R@5": v[key], "n": v["n"]} for g, v in ceiling[group].items()},
    }


def _verdict(lo: dict) -> str:
    m = lo["methods"]
    ours = m["ours_lexical_dense"]["overall"]["R@5"]
    bm = m["bm25s_facts"]["overall"]["R@5"]
    dense = m["dense_only"]["overall"]["R@5"]
    met = ours > bm and ours > dense
    return (
        f"**Issue target (LoCoMo, lexical + dense beats bm25s and dense-only at R@5): "
        f"{'met' if met else 'NOT met'}** — ours {ours:.3f} vs bm25s {bm:.3f} "
        f"({ours / bm if bm else float('inf'):.2f}×) and dense-only {dense:.3f} ({ours / dense if dense else float('inf'):.2f}×)."
    )


def render(results: dict) -> str:
    out = [
        "## Retrieval quality (`make eval`)",
        "",
        f"Produced by `{results['command']}` on {results['generated_at']} in {results['seconds']} s "
        f"(embedder `{results['embedder']}`, data read from `{results['data_dir']}`; machine-readable: "
        "`bench/results/eval.json`). Every row of a table was measured in the same run on the same units.",
        "",
        "R@k = fraction of a question's gold evidence covered by the top-k retrieved units, averaged over "
        "questions. nDCG@k uses binary gain: a unit gains 1 when it covers a gold item not covered by a "
        "higher-ranked unit; the ideal is min(#gold, k) relevant units at the top.",
    ]
    lo = results.get("locomo")
    if lo:
        out += [
            "",
            f"### LoCoMo (English) — {len(lo['conversations'])} conversations, {lo['questions']} questions with evidence",
            "",
            f"Imported through the write path: {lo['turns']} turns as messages, {lo.get('observations', '?')} "
            f"observations → {lo['facts']} fact rows (`add_fact`), {lo['episodes']} session summaries as episodes. "
            "A fact unit covers the evidence ids of the observation(s) it holds; a raw turn covers its own id.",
            "",
            md_table(["method", *RATIO_KEYS], _metric_rows(lo["methods"], RATIO_KEYS)),
            "",
            _verdict(lo),
            "",
            "R@5 per question category:",
            "",
            md_table(*_category_rows({**lo["methods"], "ceiling": {"label": "ceiling: gold reachable at all",
                                                                  **_as_method(lo["ceiling"], "facts", "by_category")}}, "R@5", "by_category")),
            "",
            "(The ceiling row is the share of gold ids that any fact cites — the most a fact-based method can "
            f"reach; raw turns reach {lo['ceiling']['overall']['raw_turns']:.3f}.)",
            "",
            "Episodes, at session level (gold = sessions of the evidence ids):",
            "",
            md_table(["method", "R@1", "R@3", "R@5", "R@10"], _metric_rows(lo["episodes_session_level"], RATIO_KEYS[:4])),
            "",
            "Diagnostics (same run, one knob changed; not product settings):",
            "",
            md_table(["method", *RATIO_KEYS], _metric_rows(
                {"ours_lexical": lo["methods"]["ours_lexical"], "ours_lexical_dense": lo["methods"]["ours_lexical_dense"],
                 **lo["diagnostics"]}, RATIO_KEYS)),
        ]
    md = results.get("memdaily")
    if md:
        out += [
            "",
            f"### MemDaily (Chinese) — {md['haystacks']} haystacks, {md['trajectories']} trajectories, "
            f"{md['messages']} messages, {md['questions']} questions",
            "",
            "Each haystack is one user (one person, one direct stream) holding one trajectory of each of the 26 "
            "type files, so every question competes with ~25 other trajectories' messages. Gold = the messages "
            "of `target_step_id`, compared by normalised text (the data set repeats sentences across "
            f"trajectories). The offline extractor produced {md['facts']} facts from "
            f"{md['messages_with_a_fact']} of {md['messages']} messages.",
            "",
            md_table(["method", "R@1", "R@3", "R@5", "R@10"], _metric_rows(md["methods"], RATIO_KEYS[:4])),
            "",
            "R@5 per question type:",
            "",
            md_table(*_category_rows({**md["methods"], "ceiling": {"label": "ceiling: gold that yielded a fact",
                                                                  **_as_method(md["ceiling"], "facts", "by_type")}}, "R@5", "by_type")),
            "",
            "Diagnostic (same run, one knob changed; not a product setting):",
            "",
            md_table(["method", "R@1", "R@3", "R@5", "R@10"], _metric_rows(
                {"ours_inspect": md["methods"]["ours_inspect"], **md.get("diagnostics", {})}, RATIO_KEYS[:4])),
        ]
    out += ["", NOTES.strip()]
    return "\n".join(out) + "\n"


NOTES = """
### What these numbers mean

TODO
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a subset: 2 LoCoMo conversations, 3 MemDaily haystacks")
    p.add_argument("--conversations", type=int, default=None, help="LoCoMo conversations to use (default all 10)")
    p.add_argument("--questions", type=int, default=None, help="cap on LoCoMo questions per conversation")
    p.add_argument("--memdaily-haystacks", type=int, default=None,
                   help="MemDaily stores of 26 trajectories (one per type file); default 12")
    p.add_argument("--full", action="store_true", help="every MemDaily trajectory")
    p.add_argument("--skip-locomo", action="store_true")
    p.add_argument("--skip-memdaily", action="store_true")
    p.add_argument("--output", type=Path, default=RESULTS_DIR / "eval.json", help="results JSON path")
    p.add_argument("--no-markdown", action="store_true", help="do not touch BENCHMARKS.md")
    p.add_argument("--keep-db", action="store_true", help="leave the throwaway SQLite store behind")
    return p.parse_args(argv)


def command_line(args: argparse.Namespace) -> str:
    parts = ["python -m bench.eval"]
    if args.quick:
        parts.append("--quick")
    if args.full:
        parts.append("--full")
    for flag, value in (("--conversations", args.conversations), ("--questions", args.questions),
                        ("--memdaily-haystacks", args.memdaily_haystacks)):
        if value is not None:
            parts.append(f"{flag} {value}")
    if args.skip_locomo:
        parts.append("--skip-locomo")
    if args.skip_memdaily:
        parts.append("--skip-memdaily")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    conversations = args.conversations or (2 if args.quick else None)
    haystacks = args.memdaily_haystacks or (3 if args.quick else 12)
    try:
        if not args.skip_locomo:
            require_data("locomo", "locomo10.json")
        if not args.skip_memdaily:
            require_data("memdaily")
    except DataMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", flush=True)

    db = setup_store(keep=args.keep_db)
    log(f"store: {db}")
    from memory.engine.tokenize import warm_up
    from memory.providers.local import LocalUSEEmbedder

    warm_up()
    embedder = LocalUSEEmbedder(threads=1)
    embedder.embed(["warm up"])
    results: dict = {
        "command": command_line(args),
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "data_dir": str(data_dir()),
        "embedder": embedder.label,
        "python": platform.python_version(),
    }
    if not args.skip_locomo:
        from bench import eval_locomo

        log("LoCoMo …")
        results["locomo"] = eval_locomo.run(conversations=conversations, max_questions=args.questions, embedder=embedder, log=log)
    if not args.skip_memdaily:
        from bench import eval_memdaily

        log("MemDaily …")
        results["memdaily"] = eval_memdaily.run(haystacks=None if args.full else haystacks, embedder=embedder, log=log)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    log(f"wrote {args.output}")
    text = render(results)
    print(text)
    if not args.no_markdown:
        replace_section(BENCHMARKS_MD, START, END, text, title=TITLE)
        log(f"updated {BENCHMARKS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
