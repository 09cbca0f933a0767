"""A profile fitted to relevance labels, checked on LoCoMo conversations the fit never saw.

Lived through the HTTP API (:class:`bench.eval_api.Deployment`: gunicorn + a real Celery worker on a fresh
SQLite file, task enqueueing on, the default configuration otherwise):

1. every LoCoMo conversation posted (its messages, then each session's observations as facts of their
   speaker) and the worker left to finish summarising, extracting and embedding;
2. every question with evidence asked as a turn (``POST /turns`` + ``…/confirm``, the server embeds);
3. labels made from the gold evidence (``POST /api/v1/tuning/labels``): a turn's relevant facts are the
   observation facts whose evidence ids include one of the question's;
4. ``POST /api/v1/tuning/fit`` on the *dev* conversations' streams — the split ``make eval`` uses
   (:func:`bench.eval_locomo.split_conversations`: even positions dev, odd test) — with ``k = 5`` and the
   given budget; the job (its own dev/held-out split inside the dev conversations) is polled until done;
5. ``POST /api/v1/tuning/compare`` of the default profile (A) and the fitted parameters (B) on the *test*
   conversations' labelled turns, ``k = 5``: each side's R@5 against the labels with a 95 % bootstrap interval
   over turns, and the paired gain with its interval.

R@5 here is label recall: the share of a question's relevant facts among the first five prompt facts
(``bench.eval_api`` scores evidence ids instead, so its R@5 differs).

    python -m bench.eval_fit                              # 10 conversations, budget 40
    python -m bench.eval_fit --conversations 4 --questions 40 --budget 8 --no-markdown   # a quick run
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import (
    BENCHMARKS_MD,
    RESULTS_DIR,
    DataMissingError,
    dia_ids,
    md_table,
    replace_section,
    require_data,
)
from bench.eval_api import (
    DEFAULT_REDIS,
    INGEST_THREADS,
    QUESTION_GAP_MS,
    Client,
    Deployment,
    LocomoConv,
    asker,
    locomo_refs,
    post_locomo,
    warm_up,
)

START, END = "<!-- eval-fit:start -->", "<!-- eval-fit:end -->"
TITLE = "Benchmarks"
K = 5
LABEL_BATCH = 5_000
Log = Callable[[str], None]


def ask_turns(conv: LocomoConv, client: Client) -> list[dict]:
    """Every question as a turn (prepare + confirm); ``[{turn, stream, gold}]``."""
    stream, persons = locomo_refs(conv.sample_id, conv.speakers)
    out = []
    for i, q in enumerate(conv.questions):
        at = conv.ask_at + i * QUESTION_GAP_MS
        turn = client.post("turns", "/api/v1/turns", {
            "stream": stream, "speaker": persons[asker(q["question"], conv.speakers)], "text": q["question"], "at": at,
        })
        if not turn:
            continue
        client.post("confirm", f"/api/v1/turns/{turn['turn_id']}/confirm", {"at": at + 2_000})
        out.append({"turn": turn["turn_id"], "stream": turn["stream_id"], "gold": set(dia_ids(q["evidence"]))})
    return out


def gold_labels(conv: LocomoConv, turns: Sequence[dict]) -> list[dict]:
    """The relevant facts of each turn: the observation facts covering one of its gold evidence ids."""
    labels = []
    for t in turns:
        for fact, evidence in conv.fact_evidence.items():
            if evidence & t["gold"]:
                labels.append({"turn": t["turn"], "fact": fact, "relevant": True})
    return labels


def submit(client: Client, path: str, body: dict) -> dict:
    """POST a tuning job (answered 202 with the job); anything else ends the run with the server's answer."""
    import httpx

    r = httpx.post(f"{client.base}{path}", json=body, headers={"Authorization": f"Bearer {client.token}"}, timeout=120)
    if r.status_code != 202:
        raise SystemExit(f"{path} answered {r.status_code}: {r.text[:500]}")
    return r.json()


def poll(client: Client, job_id: int, log: Log, *, every: float = 5.0, timeout: float = 6 * 3600) -> dict:
    import httpx

    deadline, last = time.monotonic() + timeout, -1
    with httpx.Client(base_url=client.base, headers={"Authorization": f"Bearer {client.token}"}, timeout=60) as http:
        while time.monotonic() < deadline:
            job = http.get(f"/api/v1/tuning/jobs/{job_id}").json()
            if job["status"] in ("done", "failed"):
                return job
            if job["percent"] != last:
                last = job["percent"]
                log(f"  job #{job_id} {job['kind']}: {job['progress']}/{job['total']} ({job['percent']}%)")
            time.sleep(every)
    raise TimeoutError(f"job {job_id} did not finish in {timeout} s")


def side_interval(rows: Sequence[dict], key: str) -> dict | None:
    """A side's mean R@k over the human-labelled turns of a comparison, with its bootstrap interval."""
    from memory.engine.metrics import bootstrap_mean

    interval = bootstrap_mean([r[key] for r in rows if r.get("pool") == "human"])
    return None if interval is None else interval.as_dict()


def run(args: argparse.Namespace, log: Log) -> dict:
    from bench import eval_locomo

    raw = eval_locomo.load(args.conversations)
    dev_ids, test_ids = eval_locomo.split_conversations([r["sample_id"] for r in raw])
    folder = Path(tempfile.mkdtemp(prefix="memory-eval-fit-"))
    dep = Deployment(folder, args.redis_url, log=log, scopes=["tuning"])
    result: dict = {"split": {"dev": dev_ids, "test": test_ids, "rule": "bench.eval_locomo.split_conversations"}}
    try:
        dep.start()
        dep.setup_django()
        result["deployment"] = dep.settings()
        client = Client(dep.server.base, dep.token)
        warm_up(client)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(INGEST_THREADS) as pool:
            convs = list(pool.map(lambda r: post_locomo(r, client, args.questions), raw))
        result["ingest"] = {"seconds": round(time.perf_counter() - t0, 1), "errors": len(client.errors),
                            "messages": sum(c.turns for c in convs), "observations": sum(c.observations for c in convs)}
        log(f"ingest: {result['ingest']}")
        result["worker"] = {**dep.wait_idle(args.idle_timeout), **dep.counts()}
        log(f"worker: {result['worker']}")

        t0 = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            asked = dict(zip([c.sample_id for c in convs], pool.map(lambda c: ask_turns(c, client), convs),
                             strict=True))
        result["questions"] = {"turns": sum(len(v) for v in asked.values()), "seconds": round(time.perf_counter() - t0, 1)}
        log(f"asked: {result['questions']}")

        labels = [label for c in convs for label in gold_labels(c, asked[c.sample_id])]
        for start in range(0, len(labels), LABEL_BATCH):
            if client.post("labels", "/api/v1/tuning/labels", {"labels": labels[start:start + LABEL_BATCH]}) is None:
                raise SystemExit(f"labels refused: {client.errors[-1:]}")
        streams = {sid: {t["stream"] for t in asked[sid]} for sid in asked}
        dev_streams = sorted(s for sid in dev_ids for s in streams.get(sid, ()))
        test_streams = sorted(s for sid in test_ids for s in streams.get(sid, ()))
        labelled = {sid: len({lab["turn"] for lab in gold_labels(c, asked[c.sample_id])})
                    for sid, c in ((c.sample_id, c) for c in convs)}
        result["labels"] = {"labels": len(labels), "labelled_turns": labelled,
                            "dev_turns": sum(labelled[s] for s in dev_ids if s in labelled),
                            "test_turns": sum(labelled[s] for s in test_ids if s in labelled)}
        log(f"labels: {result['labels']}")

        t0 = time.perf_counter()
        job = submit(client, "/api/v1/tuning/fit", {"budget": args.budget, "streams": dev_streams, "k": K})
        fitted = poll(client, job["job_id"], log)
        if fitted["status"] != "done":
            raise SystemExit(f"the fit failed: {fitted['error']}")
        report = fitted["result"]
        result["fit"] = {
            "job": job["job_id"], "seconds": round(time.perf_counter() - t0, 1), "budget": report["budget"],
            "evaluations": report["evaluations"], "split": report["split"], "dev": report["dev"],
            "heldout": report["heldout"], "verdict": report["verdict"], "changed": report["chosen"]["changed"],
            "params": report["chosen"]["params"], "knobs": sorted(report["knobs"]),
        }
        log(f"fit: {result['fit']['changed']} verdict {report['verdict']} held-out {report['heldout']}")

        t0 = time.perf_counter()
        compare = submit(client, "/api/v1/tuning/compare", {
            "a": {"profile": "default"}, "b": {"params": report["chosen"]["params"]}, "streams": test_streams,
            "labelled": True, "max_turns": 5000, "k": K,
        })
        compared = poll(client, compare["job_id"], log)
        if compared["status"] != "done":
            raise SystemExit(f"the comparison failed: {compared['error']}")
        rows = compared["result"]["per_turn"]
        result["test"] = {
            "job": compare["job_id"], "seconds": round(time.perf_counter() - t0, 1),
            "turns": sum(1 for r in rows if r.get("pool") == "human"),
            "default": side_interval(rows, "recall_a"), "fitted": side_interval(rows, "recall_b"),
            "gain": compared["result"]["difference"]["all"]["human"]["recall"],
            "ndcg_gain": compared["result"]["difference"]["all"]["human"]["ndcg"],
            "changed_turns": compared["result"]["changed_turns"],
        }
        log(f"test: {result['test']}")
    finally:
        dep.stop()
        log("deployment stopped")
        if args.keep_db:
            log(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return result


def _ci(value: dict | None, digits: int = 3) -> str:
    if not value:
        return "—"
    return f"{value['mean']:.{digits}f} [{value['low']:.{digits}f}, {value['high']:.{digits}f}]"


def _gain(value: dict | None) -> str:
    if not value:
        return "—"
    return f"{value['mean']:+.3f} [{value['low']:+.3f}, {value['high']:+.3f}]"


def _subset(command: str) -> str:
    """How a run smaller than the whole of LoCoMo was cut, in words (from its command line)."""
    words = command.split()
    said = []
    for flag, text in (("--conversations", "the first {} conversations"), ("--questions", "the first {} questions of each conversation")):
        if flag in words:
            said.append(text.format(words[words.index(flag) + 1]))
    return f"; {' and '.join(said)} (a run cut to fit the time at hand)" if said else ""


def _test_verdict(gain: dict | None) -> str:
    """What the paired R@5 interval on the test conversations says of the fitted profile."""
    if not gain:
        return "no test turns to judge it on"
    if gain["low"] > 0:
        return "on the test conversations the fitted profile is better (the interval is above zero)"
    if gain["high"] < 0:
        return "on the test conversations the fitted profile is worse (the interval is below zero)"
    return "on the test conversations the two are not told apart (the interval holds zero)"


def render(results: dict) -> str:
    fit, test = results["fit"], results["test"]
    changed = ", ".join(f"`{k}` {v['from']} → {v['to']}" for k, v in fit["changed"].items()) or "nothing"
    held = fit["heldout"]
    return "\n".join([
        "## A profile fitted to labels (LoCoMo, held-out conversations)",
        "",
        f"`{results['command']}` — through the HTTP API (gunicorn, a real Celery worker, default configuration, "
        f"local USE embeddings, heuristic summariser/extractor), {results.get('cpus', '?')} CPUs shared with other "
        f"work; {results['seconds']:.0f} s{_subset(results['command'])}. Labels from LoCoMo's gold evidence (a fact is relevant when it carries "
        "one of the question's evidence ids); the fit saw only the dev conversations "
        f"({', '.join(results['split']['dev'])}); R@5 = share of a question's relevant facts in the first five "
        "prompt facts, on the test conversations' labelled turns, with a 95 % bootstrap interval over turns.",
        "",
        md_table(["profile", "test turns", "R@5 [95 % CI]"], [
            ["default", test["turns"], _ci(test["default"])],
            ["fitted", test["turns"], _ci(test["fitted"])],
            ["gain (paired)", test["turns"], _gain(test["gain"])],
        ]),
        "",
        f"Fit: compass search over {len(fit['knobs'])} whitelisted knobs, budget {fit['budget']} "
        f"({fit['evaluations']} evaluations, {fit['seconds']:.0f} s), chosen on {fit['split']['dev_turns']} dev turns, "
        f"checked on {fit['split']['heldout_turns']} held-out turns of the dev conversations "
        f"(R@5 {held['base']['recall']:.3f} → {held['chosen']['recall']:.3f}, gain {_gain(held['gain']['recall'])}, "
        f"verdict “{fit['verdict']}”). Changed: {changed}. nDCG@5 gain on test: {_gain(test['ndcg_gain'])}; "
        f"{test['changed_turns']} test turns changed their top 5; {_test_verdict(test['gain'])}.",
    ]) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.eval_fit", description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=None, help="LoCoMo conversations (default all 10)")
    p.add_argument("--questions", type=int, default=None, help="cap on questions per conversation")
    p.add_argument("--budget", type=int, default=40, help="the fit's budget in evaluations (default 40)")
    p.add_argument("--redis-url", default=DEFAULT_REDIS, help="Redis database of the deployment, flushed (never DB 0)")
    p.add_argument("--idle-timeout", type=float, default=900.0, help="seconds to wait for the worker to be idle")
    p.add_argument("--output", type=Path, default=RESULTS_DIR / "eval_fit.json")
    p.add_argument("--no-markdown", action="store_true", help="do not touch BENCHMARKS.md")
    p.add_argument("--render", type=Path, default=None, metavar="JSON", help="only re-render BENCHMARKS.md's section")
    p.add_argument("--keep-db", action="store_true", help="leave the temporary deployment folder behind")
    return p.parse_args(argv)


def command_line(args: argparse.Namespace) -> str:
    parts = ["python -m bench.eval_fit"]
    for flag, value, default in (("--conversations", args.conversations, None), ("--questions", args.questions, None),
                                 ("--budget", args.budget, 40)):
        if value != default:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        replace_section(BENCHMARKS_MD, START, END, render(json.loads(args.render.read_text(encoding="utf-8"))),
                        title=TITLE)
        return 0
    try:
        require_data("locomo", "locomo10.json")
    except DataMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", flush=True)

    results = {"command": command_line(args), "cpus": os.cpu_count(), **run(args, log)}
    results["seconds"] = round(time.perf_counter() - t0, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    text = render(results)
    print(text)
    if not args.no_markdown:
        replace_section(BENCHMARKS_MD, START, END, text, title=TITLE)
        log(f"updated {BENCHMARKS_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
