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


def render(results: dict) -> str:
    return "TODO"


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
