"""A live chat through the bot API, paced as people write: what a confirm costs when the
conversation's last lines were stored seconds ago.

``bench.api_bench`` times turns back to back on lines that already have their vectors. In a
chat the lines before a turn arrived a few seconds earlier; a line still without a vector is
embedded on the confirm's request path (``selectors.message_vectors``). Here a few chats take
turns, each turn lived as a bot lives it — the user's line stored, ``POST /turns`` on it,
``POST /turns/{id}/confirm`` without a query vector (the service embeds the text), the bot's
reply stored — with ``--pace`` seconds between turns, against the scale store with a real
worker and task enqueueing on, once for each ``MESSAGE_VECTOR_DELAY`` of ``--delays`` (2: the
default, the worker embeds stored lines 2 s later; -1: only the beat would, so the confirm
embeds them). Reports each setting's latencies and how many of the context lines had their
vector by the time of the confirm. A diagnostic: writes ``bench/results/live_chat.json``.

    python -m bench.live_chat [--delays 2,-1] [--turns 45] [--pace 1.0] [--backend postgresql|sqlite]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import api_bench
from bench.common import (
    BENCH_REDIS_URL,
    BENCHMARKS_MD,
    Server,
    calibration,
    latency_stats,
    measured,
    replace_section,
    shown,
)

CHATS = 3
REPLY = "好的，我记下了：{}"


def run_chat(base: str, token: str, persons: list[str], turns: int, pace: float, at: int, run: str) -> dict:
    """``turns`` turns over :data:`CHATS` chats in rotation; latencies of prepare, confirm and both."""
    import httpx

    prep, conf, total = [], [], []
    lines = embedded = 0
    errors: list[str] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for i in range(turns):
            stream = {"platform": "bench", "kind": "group", "external_id": f"live-{run}-{i % CHATS}"}
            speaker = {"platform": "bench", "external_id": persons[i % len(persons)]}
            text = api_bench.QUESTIONS[i % len(api_bench.QUESTIONS)]
            now = at + i * 1000
            line = client.post("/api/v1/messages", json={"stream": stream, "sender": speaker, "role": "user",
                                                         "content": text, "at": now})
            t = time.perf_counter()
            turn = client.post("/api/v1/turns", json={"stream": stream, "speaker": speaker, "text": text,
                                                      "at": now + 1, "watermark_message_id": line.json()["id"]})
            dt = (time.perf_counter() - t) * 1000
            context = context_vectors(turn.json()["turn_id"])
            t = time.perf_counter()
            confirm = client.post(f"/api/v1/turns/{turn.json()['turn_id']}/confirm", json={"at": now + 2})
            dc = (time.perf_counter() - t) * 1000
            if confirm.status_code != 200:
                errors.append(f"confirm {confirm.status_code} {confirm.text[:200]}")
                continue
            client.post("/api/v1/messages", json={"stream": stream, "role": "assistant",
                                                  "content": REPLY.format(text), "at": now + 3})
            if i >= CHATS:  # each chat's first turn has no line of this run before it
                prep.append(dt)
                conf.append(dc)
                total.append(dt + dc)
                lines += context[0]
                embedded += context[1]
            time.sleep(pace)
    return {"turns": latency_stats(prep), "confirm": latency_stats(conf), "turn_total": latency_stats(total),
            "context_lines": lines, "context_lines_with_vector_at_confirm": embedded, "errors": errors[:3]}


def context_vectors(turn_id: int) -> tuple[int, int]:
    """``(context lines, of them with a vector)`` of a prepared turn, read before its confirm (untimed)."""
    from django.db import connection

    from memory import backends

    with connection.cursor() as cur:
        cur.execute("SELECT context_message_ids FROM turns WHERE id = %s", [turn_id])
        ids = cur.fetchone()[0]
        ids = json.loads(ids) if isinstance(ids, str) else ids
        if not ids:
            return 0, 0
        cur.execute(f"SELECT count(*) FROM messages WHERE embedding IS NOT NULL AND id IN ({backends.in_placeholders(ids)})", ids)
        return len(ids), cur.fetchone()[0]


START, END = "<!-- live-chat:start -->", "<!-- live-chat:end -->"


def render(report: dict) -> str:
    """The section: per ``MESSAGE_VECTOR_DELAY``, the confirm's and the prepare's latencies and how many
    context lines had their vector by the confirm."""
    how = measured("python -m bench.live_chat", (
        f"{report['chats']} chats in rotation on the scale store ({report['database']}), gunicorn (2 workers) with a real worker and "
        f"enqueueing on, {report['turns']} turns {report['pace_s']:g} s apart, each storing the user's line, preparing "
        "and confirming the turn without a query vector and storing the reply"), report)
    runs = "; ".join(
        f"`MESSAGE_VECTOR_DELAY={delay}`{' (the default)' if delay == '2' else ''}: confirm median / p95 "
        f"{r['confirm'].get('median_ms')} / {r['confirm'].get('p95_ms')} ms, prepare {r['turns'].get('median_ms')} / "
        f"{r['turns'].get('p95_ms')} ms, {r['context_lines_with_vector_at_confirm']} of {r['context_lines']} context "
        "lines with a vector at the confirm" for delay, r in report["by_message_vector_delay"].items())
    return "\n".join(["## A live chat: the lines before a turn were stored seconds ago", "", f"{how} {runs}."])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=str(api_bench.DEFAULT_DB))
    parser.add_argument("--delays", default="2,-1", help="MESSAGE_VECTOR_DELAY values, one run each")
    parser.add_argument("--turns", type=int, default=45)
    parser.add_argument("--pace", type=float, default=1.0, help="seconds between turns")
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--redis-url", default=BENCH_REDIS_URL,
                        help="the worker's Redis database (flushed before and after)")
    parser.add_argument("--out", default=str(api_bench.RESULTS / "live_chat.json"))
    parser.add_argument("--no-markdown", action="store_true", help="do not touch BENCHMARKS.md")
    parser.add_argument("--render", default=None, metavar="JSON", help="only re-render BENCHMARKS.md's section")
    args = parser.parse_args(argv)
    if args.render:
        report = json.loads(Path(args.render).read_text())
        replace_section(BENCHMARKS_MD, START, END, render(report))
        return report
    src = Path(args.db)
    if not src.exists():
        raise SystemExit(f"needs the scale database {src} (python -m bench.run builds it)")
    api_bench.WORKER["redis_url"] = args.redis_url
    meta = src.with_suffix(".json")  # bench.run writes it; a store built by bench.build_db alone has none
    counts = json.loads(meta.read_text()) if meta.exists() else {}
    tmp = Path(tempfile.mkdtemp(prefix="memory-live-chat-"))
    from bench import backends

    db: Path | str
    if args.backend == "postgresql":
        db = backends.clone(backends.scale_copy(src)["url"], "live")
    else:
        db = tmp / "live.sqlite3"
        api_bench.copy_db(src, db)
    results: dict[str, dict] = {}
    before = calibration()
    try:
        _, persons, now = api_bench.refs(db, counts)
        api_bench.setup_django(db)
        from django.db import connection

        from memory.api.auth import issue_token

        _, token = issue_token("live-chat")
        connection.close()
        for k, delay in enumerate(int(d) for d in args.delays.split(",")):
            env = {**api_bench.env_for(db, deployed=True), "MESSAGE_VECTOR_DELAY": str(delay)}
            worker = api_bench.Worker(db, tmp / f"worker-{k}.log")
            server = Server(env, workers=2)
            try:
                server.wait_ready()
                out = run_chat(server.base, token, persons[:7], args.turns, args.pace,
                               now + 3_600_000 + k * 10_000_000, str(k))
            finally:
                server.stop()
                worker.stop()
            results[str(delay)] = out
            print(f"MESSAGE_VECTOR_DELAY={delay}: confirm median/p95 {out['confirm'].get('median_ms')} / "
                  f"{out['confirm'].get('p95_ms')} ms, prepare {out['turns'].get('median_ms')} / "
                  f"{out['turns'].get('p95_ms')} ms; context lines with a vector at the confirm "
                  f"{out['context_lines_with_vector_at_confirm']} of {out['context_lines']}", flush=True)
    finally:
        from django.db import connections

        connections.close_all()
        if args.backend == "postgresql":
            backends.drop(db)
        shutil.rmtree(tmp, ignore_errors=True)
    report = {"database": f"{shown(src)}" + (" moved to PostgreSQL (copy_store)" if args.backend == "postgresql" else ""),
              "load_average_after": [round(x, 2) for x in os.getloadavg()], "backend": args.backend, "turns": args.turns, "pace_s": args.pace, "chats": CHATS,
              "by_message_vector_delay": results, "calibration": {"before": before, "after": calibration()}}
    Path(args.out).write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    print(f"written to {shown(Path(args.out))}")
    if not args.no_markdown:
        replace_section(BENCHMARKS_MD, START, END, render(report))
    return report


if __name__ == "__main__":
    main()
