"""Retrieval-quality evaluation (``make eval`` = ``python -m bench.eval``).

Builds a throwaway store, imports LoCoMo (English) and a MemDaily subset (Chinese)
through the real write path, runs our recall next to the baselines people would pick
instead (bm25s, dense-only, plain FTS5), all in one run, and writes
``bench/results/eval.json`` and the eval section of ``BENCHMARKS.md``.

LoCoMo is reported twice: over all conversations with the default retrieval profile,
and held out — a profile tuned on the dev half of the conversations, measured on the
test half (see :mod:`bench.eval_locomo`). The LoCoMo target is judged on the held-out
test conversations with the tuned profile; the default profile's result is stated next
to it.

    python -m bench.eval                 # all 10 LoCoMo conversations + 12 MemDaily haystacks (~312 trajectories)
    python -m bench.eval --quick         # 2 conversations + 3 haystacks
    python -m bench.eval --conversations 1 --questions 20 --memdaily-haystacks 1   # smoke size
    python -m bench.eval --full          # every MemDaily trajectory (~116 haystacks)
"""
from __future__ import annotations

import argparse
import sys

from bench.common import (
    RESULTS_DIR,
    Log,
    add_evaluation_arguments,
    evaluation_main,
    md_table,
    measured,
    setup_store,
)

START, END = "<!-- eval:start -->", "<!-- eval:end -->"


def _beats(methods: dict, ours: str) -> tuple[bool, str]:
    """Does ``ours`` beat bm25s and dense-only at R@5 in ``methods``, and the figures that say so."""
    o, bm, dense = (methods[n]["overall"]["R@5"] for n in (ours, "bm25s_facts", "dense_only"))

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}×" if b else "∞×"

    text = f"ours {o:.3f} vs bm25s {bm:.3f} ({ratio(o, bm)}) and dense-only {dense:.3f} ({ratio(o, dense)})"
    return o > bm and o > dense, text


def _verdict(lo: dict) -> str:
    """The LoCoMo target, judged on the held-out test conversations with the tuned profile,
    followed by the default profile's result (on the same test conversations and on all)."""
    target = "LoCoMo, lexical + dense beats bm25s and dense-only at R@5"
    met_all, all_text = _beats(lo["methods"], "ours_lexical_dense")
    n_all = len(lo["conversations"])
    default_all = f"{'met' if met_all else '**not met**'} over all {n_all} conversations ({all_text})"
    held = lo.get("heldout") or {}
    if not held.get("methods"):
        return (
            f"**Issue target ({target}): not judged** — {held.get('skipped', 'no held-out split in this run')}. "
            f"With the default profile: {default_all}."
        )
    met, text = _beats(held["methods"], "ours_lexical_dense_tuned")
    met_default, default_text = _beats(held["methods"], "ours_lexical_dense_default")
    n_test = len(held["test_conversations"])
    return (
        f"**Issue target ({target}), judged on the {n_test} held-out test conversation{'s' if n_test != 1 else ''} "
        f"with the profile tuned on the dev conversations: {'met' if met else 'NOT met'}** — {text}. "
        f"With the default profile: {'met' if met_default else '**not met**'} on the same test conversations "
        f"({default_text}); {default_all}."
    )


def _params(params: dict) -> str:
    return ", ".join(f"`{name}` = {value:g}" for name, value in params.items())


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "—"


def _ratio_table(methods: dict, ours: str, keys: tuple[str, ...]) -> str:
    """Every method's figures and ours / it at R@5 (baselines measured in the same run on the same units)."""
    mine = methods[ours]["overall"]["R@5"]
    return md_table(["method", *keys, "ours / it, R@5"], [
        [m["label"], *[m["overall"].get(k, 0.0) for k in keys], "—" if name == ours else _ratio(mine, m["overall"]["R@5"])]
        for name, m in methods.items()])


def _heldout_line(lo: dict) -> str:
    """The held-out result in one paragraph (the dev grid stays in the results file)."""
    held = lo.get("heldout") or {}
    if not held.get("methods"):
        return _verdict(lo)
    r5 = {name: _r5(held, name) for name in held["methods"]}
    line = (f"Held out: the profile tuned on the dev conversations ({_params(held['chosen']['params'])}), on the "
            f"{len(held['test_conversations'])} test conversations ({held['test_questions']} questions): ours lexical + "
            f"dense R@5 {r5['ours_lexical_dense_tuned']:.3f} (default profile {r5['ours_lexical_dense_default']:.3f}), "
            f"bm25s {r5['bm25s_facts']:.3f}, dense-only {r5['dense_only']:.3f} — target "
            f"{'met' if _beats(held['methods'], 'ours_lexical_dense_tuned')[0] else '**not met**'}.")
    cv = held.get("cross_validated")
    if cv:
        d = cv["r5_difference"]
        line += (f" Both folds ({cv['questions']} questions), ours minus the baseline at R@5 with a paired bootstrap "
                 f"95 % interval: bm25s {d['bm25s_facts']['mean']:+.3f} [{d['bm25s_facts']['low']:+.3f}, "
                 f"{d['bm25s_facts']['high']:+.3f}], dense-only {d['dense_only']['mean']:+.3f} "
                 f"[{d['dense_only']['low']:+.3f}, {d['dense_only']['high']:+.3f}].")
    return line


def render(results: dict) -> str:
    """The section: LoCoMo and MemDaily, ours beside the baselines of the same run; the per-category tables,
    the held-out grid and the diagnostics are in ``bench/results/eval.json``."""
    keys = ("R@1", "R@5", "R@10", "nDCG@5")
    out = ["## Retrieval quality (`make eval`)", ""]
    lo, md = results.get("locomo"), results.get("memdaily")
    how = measured(results["command"], f"in-process on a throwaway SQLite store, default profile, embedder "
                   f"`{results.get('embedder', '?')}`, data from `{results.get('data_dir', '?')}`", results)
    out.append(how + " R@k = share of a question's gold evidence in the top k; nDCG@5 with binary gain; per "
               "category, the held-out grid and the diagnostics: `bench/results/eval.json`."
               + (f" **LoCoMo** (English; {len(lo['conversations'])} conversations, {lo['questions']} questions, "
                  f"{lo['facts']} facts from {lo.get('observations', '?')} observations), all conversations:" if lo else ""))
    if lo:
        out += ["", _ratio_table(lo["methods"], "ours_lexical_dense", keys), ""]
        episodes = lo.get("episodes_session_level") or {}
        tail = (" Episodes at session level, R@5: " + ", ".join(
            f"{m['label'].split(':')[0].split(' over')[0]} {m['overall']['R@5']:.3f}" for m in episodes.values()) + "."
            if episodes else "")
        out.append(_heldout_line(lo) + tail + (
            f" **MemDaily** (Chinese; {md['haystacks']} haystacks, {md['questions']} questions over {md['messages']} "
            f"messages; {md['facts']} facts extracted offline):" if md else ""))
    elif md:
        out.append(f"**MemDaily** (Chinese; {md['haystacks']} haystacks, {md['questions']} questions):")
    if md:
        out += ["", _ratio_table(md["methods"], "ours_inspect", keys[:3])]
    return "\n".join(out) + "\n"


def _r5(block: dict, name: str, group: str = "methods") -> float:
    return block[group][name]["overall"]["R@5"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a subset: 2 LoCoMo conversations, 3 MemDaily haystacks")
    p.add_argument("--conversations", type=int, default=None, help="LoCoMo conversations to use (default all 10)")
    p.add_argument("--questions", type=int, default=None, help="cap on LoCoMo questions per conversation")
    p.add_argument("--memdaily-haystacks", type=int, default=None,
                   help="MemDaily stores of 26 trajectories (one per type file); default 12")
    p.add_argument("--full", action="store_true", help="every MemDaily trajectory")
    add_evaluation_arguments(p, output=RESULTS_DIR / "eval.json", keep_db="leave the throwaway SQLite store behind")
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

    def measure(results: dict, log: Log) -> None:
        db = setup_store(keep=args.keep_db)
        log(f"store: {db}")
        from memory.engine.tokenize import warm_up
        from memory.providers.local import LocalUSEEmbedder

        warm_up()
        embedder = LocalUSEEmbedder(threads=1)
        embedder.embed(["warm up"])
        results["embedder"] = embedder.label
        if not args.skip_locomo:
            from bench import eval_locomo

            log("LoCoMo …")
            results["locomo"] = eval_locomo.run(
                conversations=conversations, max_questions=args.questions, embedder=embedder, log=log
            )
        if not args.skip_memdaily:
            from bench import eval_extraction, eval_memdaily

            log("MemDaily …")
            results["memdaily"] = eval_memdaily.run(haystacks=None if args.full else haystacks, embedder=embedder, log=log)
            log("Offline extraction (MemDaily coverage, hand-checked precision) …")
            extraction = eval_extraction.run(log=log)
            extraction.update(command="python -m bench.eval_extraction", generated_at=results["generated_at"],
                              calibration=results["calibration"])
            eval_extraction.write(extraction, output=args.output.parent / "extraction.json", markdown=not args.no_markdown)
            results["extraction"] = {k: extraction[k] for k in ("coverage_gold", "coverage_all")}
            results["extraction"]["precision"] = extraction["precision"]["precision"]

    return evaluation_main(args, command=command_line(args), section=(START, END),
                           render=render, measure=measure)


if __name__ == "__main__":
    sys.exit(main())
