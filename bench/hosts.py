"""What a second host buys: 1 vs 2 Celery worker hosts, 1 vs 2 web processes, on one PostgreSQL store.

``make bench-hosts`` (root and iproute2's ``ip``: a network namespace is the second host,
as in ``make demo-cluster``, whose namespace and veth this reuses):

* **pipeline catch-up**: 1,000 fresh messages (10 group streams × 100 lines, 10 speakers,
  every 4th line the bot's) are posted through ``POST /api/v1/messages`` to gunicorn on
  the host (2 processes, as `make run`), enqueueing on as deployed; the clock runs from the
  first post until every due batch of every stream is summarised and extracted and every
  fact, knowledge row and message has its vector. Worker hosts: one ``celery worker
  --concurrency=2`` (the default of docs/DEPLOY.md) on the host, and for "2 hosts" a second
  one in the namespace reaching PostgreSQL, Redis and the model over the veth. Two cases:

  - ``llm``: summaries and extraction by a chat model, the OpenAI-compatible test server of
    ``tests/providers/conftest.py`` answering each call after a random 300–800 ms (a paid
    model's latency; ``--llm-latency``), as production runs them; vectors by the local model;
  - ``heuristic``: no chat model (the offline summariser and extractor): the pipeline is
    CPU work only, and both hosts share this machine's cores, so a second one cannot help
    here — reported so that the ``llm`` row is not read as a CPU result.

* **ingest**: ``POST /api/v1/messages`` from 4 client threads, 2,000 messages, to one web
  process (gunicorn ``--workers 1``) on the host, or to two — the second in the namespace,
  over the veth — taking every other thread; enqueueing on, no worker consuming.

Each measure runs in interleaved rounds (1 host, 2 hosts, 1, 2, …) on a fresh copy of a
migrated template database (``h_hosts_…``, all dropped at the end) with the Redis database
``--redis-url`` flushed before each; the median and the range over the rounds are reported.
Results: ``bench/results/hosts.json`` and BENCHMARKS.md's "hosts" section (``--render``
rewrites it from the JSON). Everything it starts or creates is removed on exit, also after
an error or Ctrl-C.

    sudo .venv/bin/python -m bench.hosts [--rounds 3] [--cases llm,heuristic] [--skip-ingest]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import backends
from bench.common import (
    BENCH_REDIS_URL,
    BENCHMARKS_MD,
    RESULTS_DIR,
    Server,
    calibration,
    calibration_text,
    measured,
    replace_section,
    stop_process_group,
    tree_cpu_seconds,
)
from bench.worker_bench import message_texts
from scripts.demo_cluster import (
    Cleanup,
    Forwarder,
    Namespace,
    can_make_namespaces,
    cleanup_on_signals,
    free_slot,
    with_host,
)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
OUT = RESULTS_DIR / "hosts.json"
COMMAND = "make bench-hosts"
DB_PREFIX = "h_hosts"
CASES = ("llm", "heuristic")
TARGET_SPEEDUP = 1.6
TRIGGER_SUMMARISE, TRIGGER_EXTRACT = 48, 32  # config/settings.py's defaults (the bench leaves them unset)


def log(text: str) -> None:
    print(f"[bench-hosts {time.strftime('%H:%M:%S')}] {text}", flush=True)


# --- the chat model ---------------------------------------------------------------------------------------

def fake_llm(latency: tuple[float, float], seed: int = 35):
    """The tests' OpenAI-compatible server, answering a summary or an extraction after ``latency`` seconds."""
    from tests.providers.conftest import FakeOpenAI, Reply

    rng = random.Random(seed)
    lock = threading.Lock()
    speaker = re.compile(r"^\[([^\]]+)\] ([^：]+)：(.+)$", re.M)

    class Model(FakeOpenAI):
        def _chat(self, request):
            messages = (request.json or {}).get("messages") or [{}]
            prompt = messages[-1].get("content", "")
            with lock:
                delay = rng.uniform(*latency)
            if "recall_cues" in messages[0].get("content", ""):
                first = prompt.rsplit("对话：", 1)[-1].strip().splitlines()[:1] or ["聊天"]
                content = {"summary": f"大家聊了{first[0][:40]}", "recall_cues": ["聊天", "近况"]}
            else:
                said: dict[str, tuple[str, str]] = {}
                for ref, name, text in speaker.findall(prompt.rsplit("对话：", 1)[-1]):
                    said.setdefault(ref, (name, text))
                content = {"facts": [{"person": ref, "kind": "事件", "content": f"{name}说{text[:30]}", "slot": "",
                                      "supersedes": 0} for ref, (name, text) in list(said.items())[:3]],
                           "knowledge": []}
            reply = super()._chat(request)
            reply.json["choices"][0]["message"]["content"] = json.dumps(content, ensure_ascii=False)
            return Reply(json=reply.json, delay=delay)

    return Model()


# --- processes -----------------------------------------------------------------------------------------------

class Procs:
    """Processes of one trial, each leading a session; stopped by :meth:`stop` (and by the run's cleanup)."""

    def __init__(self, cleanup: Cleanup, tmp: Path) -> None:
        self.procs: list[subprocess.Popen] = []
        self.tmp = tmp
        cleanup.push("trial processes", self.stop)

    def start(self, cmd: list[str], env: dict[str, str], name: str) -> subprocess.Popen:
        with open(self.tmp / f"{name}.log", "wb") as handle:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    def log_text(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text("utf-8", "replace")

    def stop(self) -> None:
        while self.procs:
            stop_process_group(self.procs.pop(), timeout=30)


def wait_until(check, timeout: float, what: str, procs: list[subprocess.Popen] = ()) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: a process exited ({proc.returncode})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)


def http_ok(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Cluster:
    """The host and its second machine: the namespace, and relays on the veth to PostgreSQL, Redis and the model.

    PostgreSQL and Redis listen on the host's 127.0.0.1 only; a relay on the host's end of the veth
    passes the namespace's connections on (``socat``, a process per connection, when installed: it
    takes no CPU from this process, whose threads post the messages; else demo_cluster's forwarder).
    """

    def __init__(self, cleanup: Cleanup, redis_url: str, llm_port: int) -> None:
        from urllib.parse import urlsplit

        self.ns = Namespace(free_slot(), cleanup)
        pg = urlsplit(backends.server())
        targets = {"postgres": (pg.hostname or "127.0.0.1", pg.port or 5432),
                   "redis": (urlsplit(redis_url).hostname or "127.0.0.1", urlsplit(redis_url).port or 6379),
                   "llm": ("127.0.0.1", llm_port)}
        socat = shutil.which("socat")
        for name, (host, port) in targets.items():
            if socat:
                relay = subprocess.Popen([socat, f"TCP-LISTEN:{port},bind={self.ns.host_ip},fork,reuseaddr",
                                          f"TCP:{host}:{port}"], start_new_session=True)
                cleanup.push(f"relay {name}", lambda relay=relay: stop_process_group(relay, timeout=5))
            else:
                cleanup.push(f"relay {name}", Forwarder((self.ns.host_ip, port), (host, port)).stop)
            wait_until(lambda port=port: self.ns.can_connect(self.ns.host_ip, port), 10, f"relay {name}")
            if self.ns.can_connect("127.0.0.1", port):
                raise RuntimeError(f"{name} must be reachable from the namespace only over the veth")

    def remote_env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` as the second host sees its services: every address the host's side of the veth."""
        out = {**env, "DATABASE_URL": with_host(env["DATABASE_URL"], self.ns.host_ip),
               "REDIS_URL": with_host(env["REDIS_URL"], self.ns.host_ip)}
        if env.get("LLM_BASE_URL"):
            out["LLM_BASE_URL"] = with_host(env["LLM_BASE_URL"], self.ns.host_ip)
        return out

    def bytes_over_veth(self) -> int:
        """Bytes the host's end of the veth has received and sent (the second host's traffic)."""
        stats = Path("/sys/class/net") / self.ns.host_if / "statistics"
        return sum(int((stats / f).read_text()) for f in ("rx_bytes", "tx_bytes"))


# --- one trial ----------------------------------------------------------------------------------------------

def base_env(db_url: str, redis_url: str, llm_url: str, secret: str) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONPATH": str(ROOT),
            "DATABASE_URL": db_url, "REDIS_URL": redis_url, "MEMORY_ENQUEUE_TASKS": "1", "DJANGO_DEBUG": "False",
            "EMBEDDING_PROVIDER": "local", "LLM_BASE_URL": llm_url, "LLM_MODEL": "fake-chat" if llm_url else "",
            "LLM_TIMEOUT": "30", "LOG_LEVEL": "WARNING", "SHORT_TERM_ACTIVATION": "redis", "DJANGO_SECRET_KEY": secret}


def celery_cmd(node: str) -> list[str]:
    return [str(Path(sys.executable).with_name("celery")), "-A", "config", "worker", "-n", node, "--concurrency=2",
            "--loglevel=INFO", "--without-mingle", "--without-gossip"]


def post_messages(bases: list[str], token: str, bodies: list[dict], threads: int) -> dict:
    """POST every body from ``threads`` clients (thread i to ``bases[i % len(bases)]``); wall time and errors."""
    import httpx

    errors: list[str] = []
    lock = threading.Lock()

    def work(idx: int) -> None:
        with httpx.Client(base_url=bases[idx % len(bases)], headers={"Authorization": f"Bearer {token}"},
                          timeout=30) as client:
            for body in bodies[idx::threads]:
                r = client.post("/api/v1/messages", json=body)
                if r.status_code != 201:
                    with lock:
                        errors.append(f"{r.status_code} {r.text[:200]}")

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return {"seconds": time.perf_counter() - t0, "errors": len(errors), "first_errors": errors[:3]}


def message_bodies(n: int, streams: int, run: str) -> list[dict]:
    """``n`` messages over ``streams`` group streams, interleaved as live traffic is (worker_bench's lines)."""
    texts = message_texts(n)
    out = []
    for i, (speaker, text) in enumerate(texts):
        body = {"stream": {"platform": "bench", "kind": "group", "external_id": f"{run}-g{i % streams}"},
                "role": "assistant" if speaker < 0 else "user", "content": text,
                "external_message_id": f"{run}-{i}"}
        if speaker >= 0:
            # new people each run: their facts are new too (the model's replies repeat the lines)
            body["sender"] = {"platform": "bench", "external_id": f"{run}-u{speaker}", "name": f"用户{speaker}"}
        out.append(body)
    return out


def pipeline_state(db_url: str) -> dict:
    """What is still due (summaries, extraction batches, vectors) and what was written."""
    con = backends.connect(db_url)
    try:
        pending = con.execute("SELECT count(*) FROM messages WHERE episode_id IS NULL GROUP BY stream_id").fetchall()
        row = con.execute("SELECT value FROM meta WHERE key = 'fact_extract_cursor'").fetchone()
        cursors = json.loads(row[0]) if row else {}
        after = con.execute("SELECT stream_id, max(id), count(*) FROM messages GROUP BY stream_id").fetchall()
        extract_due = 0
        for stream_id, _, _ in after:
            left = con.execute("SELECT count(*) FROM messages WHERE stream_id = %s AND id > %s",
                               [stream_id, int(cursors.get(str(stream_id), 0))]).fetchone()[0]
            extract_due += left >= TRIGGER_EXTRACT
        nulls = con.execute(
            "SELECT (SELECT count(*) FROM facts WHERE embedding IS NULL),"
            " (SELECT count(*) FROM knowledge WHERE embedding IS NULL),"
            " (SELECT count(*) FROM messages WHERE embedding IS NULL AND content <> '')").fetchone()
        written = con.execute("SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM episodes),"
                              " (SELECT count(*) FROM facts), (SELECT count(*) FROM knowledge)").fetchone()
    finally:
        con.close()
    return {"summarise_due": sum(1 for (c,) in pending if c >= TRIGGER_SUMMARISE), "extract_due": extract_due,
            "null_vectors": sum(nulls), "messages": written[0], "episodes": written[1], "facts": written[2],
            "knowledge": written[3]}


def caught_up(state: dict, messages: int) -> bool:
    return (state["messages"] >= messages and not state["summarise_due"] and not state["extract_due"]
            and not state["null_vectors"])


class Run:
    """The run's shared parts: template database, token, cluster, the model, cleanup."""

    def __init__(self, args, cleanup: Cleanup, tmp: Path) -> None:
        import redis

        self.args, self.cleanup, self.tmp = args, cleanup, tmp
        self.secret = secrets.token_urlsafe(50)
        self.trial_no = 0
        self.redis = redis.Redis.from_url(args.redis_url)
        self.redis.flushdb()
        cleanup.push("redis database", self.redis.flushdb)
        self.llm = fake_llm(args.llm_latency)
        cleanup.push("model server", self.llm.close)
        self.llm_url = self.llm.base_url
        self.template = f"{DB_PREFIX}_tpl_{os.getpid()}"
        url = backends.create(self.template)
        cleanup.push(f"database {self.template}", lambda: backends.drop(self.template))
        env = base_env(url, args.redis_url, "", self.secret)
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env,
                       check=True, timeout=600)
        done = subprocess.run([sys.executable, "manage.py", "create_api_token", "bench-hosts", "--scope", "bot"],
                              cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=120)
        self.token = done.stdout.strip().splitlines()[-1]
        self.cluster = Cluster(cleanup, args.redis_url, int(self.llm_url.rsplit(":", 1)[1].split("/")[0]))
        log(f"template {self.template} migrated; namespace {self.cluster.ns.name} ({self.cluster.ns.ns_ip})")

    def fresh_db(self) -> str:
        self.trial_no += 1
        name = f"{DB_PREFIX}_{os.getpid()}_{self.trial_no}"
        url = backends.create(name, template=self.template)
        self.cleanup.push(f"database {name}", lambda: backends.drop(name))
        self.redis.flushdb()
        return url

    def catch_up_rounds(self, case: str, rounds: int) -> list[dict]:
        """``rounds`` × (1 worker host, 2 worker hosts) on one database and web server; fresh workers each trial,
        fresh streams each trial (what an earlier one left is caught up, so it is due no more)."""
        db = self.fresh_db()
        env = base_env(db, self.args.redis_url, self.llm_url if case == "llm" else "", self.secret)
        web_procs = Procs(self.cleanup, self.tmp)
        out = []
        try:
            web = Server(env, workers=2)
            web_procs.procs.append(web.proc)
            web.wait_ready(300)
            for k in range(1, rounds + 1):
                for hosts in (1, 2):
                    out.append(self.catch_up(db, env, web, case, hosts, k))
        finally:
            web_procs.stop()
            backends.drop(db)
        return out

    def catch_up(self, db: str, env: dict[str, str], web: Server, case: str, hosts: int, round_no: int) -> dict:
        procs = Procs(self.cleanup, self.tmp)
        self.trial_no += 1
        tag = f"{case}-{hosts}-{round_no}"
        try:
            workers = [procs.start(celery_cmd("hosts-a@%h"), env, f"worker-a-{tag}")]
            names = [f"worker-a-{tag}"]
            if hosts == 2:
                if self.args.second_on_host:  # a diagnostic: the second worker here, no relay
                    workers.append(procs.start(celery_cmd("hosts-b@%h"), env, f"worker-b-{tag}"))
                else:
                    workers.append(procs.start([*self.cluster.ns.prefix(), *celery_cmd(f"hosts-b@{self.cluster.ns.name}")],
                                               self.cluster.remote_env(env), f"worker-b-{tag}"))
                names.append(f"worker-b-{tag}")
            wait_until(lambda: all(" ready." in procs.log_text(n) for n in names), 300, "workers start", workers)
            time.sleep(2)  # the pool's children forked
            before = pipeline_state(db)
            veth0 = self.cluster.bytes_over_veth()
            calls0 = len(self.llm.calls("/chat/completions"))
            cpu0 = sum(tree_cpu_seconds(w.pid) for w in workers)
            bodies = message_bodies(self.args.messages, self.args.streams, f"c{self.trial_no}")
            expected = before["messages"] + len(bodies)
            t0 = time.monotonic()
            posted = post_messages([web.base], self.token, bodies, self.args.threads)
            state = pipeline_state(db)
            while not caught_up(state, expected) and time.monotonic() - t0 < self.args.timeout:
                for w in workers:
                    if w.poll() is not None:
                        raise RuntimeError(f"a worker exited ({w.returncode})")
                time.sleep(0.25)
                state = pipeline_state(db)
            seconds = time.monotonic() - t0
            cpu = sum(tree_cpu_seconds(w.pid) for w in workers) - cpu0
            veth = self.cluster.bytes_over_veth() - veth0
        finally:
            procs.stop()
        written = {key: state[key] - before[key] for key in ("messages", "episodes", "facts", "knowledge")}
        out = {"case": case, "hosts": hosts, "round": round_no, "messages": len(bodies),
               "seconds": round(seconds, 2), "messages_per_s": round(len(bodies) / seconds, 1),
               "post_seconds": round(posted["seconds"], 2), "post_errors": posted["errors"],
               "completed": caught_up(state, expected), "written": written,
               "llm_calls": len(self.llm.calls("/chat/completions")) - calls0, "worker_cpu_seconds": round(cpu, 1),
               "bytes_over_veth": veth, "load_average": [round(x, 2) for x in os.getloadavg()]}
        log(f"catch-up {case} {hosts} host(s), round {round_no}: {out['seconds']} s "
            f"({out['llm_calls']} model calls, {written['episodes']} episodes, {written['facts']} facts,"
            f" completed={out['completed']}, {veth / 1e6:.1f} MB over the veth)")
        return out

    def ingest_rounds(self, rounds: int) -> list[dict]:
        """``rounds`` × (1 web process, 2): both processes run throughout, the clients post to the first only or to
        both, fresh streams each trial."""
        db = self.fresh_db()
        env = base_env(db, self.args.redis_url, "", self.secret)
        procs = Procs(self.cleanup, self.tmp)
        ns = self.cluster.ns
        out = []
        try:
            web = Server(env, workers=1)
            procs.procs.append(web.proc)
            remote = procs.start([*ns.prefix(), sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py",
                                  "config.wsgi", "--bind", f"{ns.ns_ip}:8000", "--workers", "1",
                                  "--log-level", "warning"],
                                 {**self.cluster.remote_env(env), "DJANGO_ALLOWED_HOSTS": ns.ns_ip}, "web-b")
            bases = [web.base, f"http://{ns.ns_ip}:8000"]
            wait_until(lambda: http_ok(f"{bases[1]}/api/openapi.json"), 300, "second web host", [remote])
            web.wait_ready(300)
            post_messages(bases, self.token, message_bodies(40, self.args.streams, "warm"), 2)  # import, connect
            for k in range(1, rounds + 1):
                for hosts in (1, 2):
                    out.append(self.ingest(bases[:hosts], k))
                    self.redis.flushdb()  # the checks the messages enqueued: no worker takes them
        finally:
            procs.stop()
            backends.drop(db)
        return out

    def ingest(self, bases: list[str], round_no: int) -> dict:
        self.trial_no += 1
        bodies = message_bodies(self.args.ingest_messages, self.args.streams, f"i{self.trial_no}")
        cpu0, veth0 = time.process_time(), self.cluster.bytes_over_veth()
        posted = post_messages(bases, self.token, bodies, self.args.threads)
        client_cpu, veth = time.process_time() - cpu0, self.cluster.bytes_over_veth() - veth0
        out = {"hosts": len(bases), "round": round_no, "messages": len(bodies), "threads": self.args.threads,
               "seconds": round(posted["seconds"], 2),
               "requests_per_s": round(len(bodies) / posted["seconds"], 1), "errors": posted["errors"],
               "first_errors": posted["first_errors"],
               "client_cpu_ms_per_request": round(client_cpu / len(bodies) * 1000, 3), "bytes_over_veth": veth,
               "load_average": [round(x, 2) for x in os.getloadavg()]}
        log(f"ingest {len(bases)} web process(es), round {round_no}: {out['requests_per_s']} req/s "
            f"({out['errors']} errors, {veth / 1e6:.1f} MB over the veth)")
        return out


# --- summary and report -----------------------------------------------------------------------------------

def summary(trials: list[dict], key: str) -> dict:
    values = [t[key] for t in trials]
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values), "rounds": values}


def summarise(result: dict) -> dict:
    out: dict = {}
    for case, trials in result.get("catch_up", {}).items():
        by = {h: summary([t for t in trials if t["hosts"] == h], "seconds") for h in (1, 2)}
        out[f"catch_up_{case}"] = {**{f"{h}_host{'s' if h > 1 else ''}": by[h] for h in (1, 2)},
                                   "speedup": round(by[1]["median"] / by[2]["median"], 2),
                                   "speedup_by_round": [round(a / b, 2)
                                                        for a, b in zip(by[1]["rounds"], by[2]["rounds"], strict=True)],
                                   "all_completed": all(t["completed"] for t in trials)}
    if result.get("ingest"):
        by = {h: summary([t for t in result["ingest"] if t["hosts"] == h], "requests_per_s") for h in (1, 2)}
        out["ingest"] = {"1_process": by[1], "2_processes": by[2], "ratio": round(by[2]["median"] / by[1]["median"], 2)}
    return out


def render(result: dict) -> str:
    """Four lines: the heading, how it was measured, the catch-up of each case, ingest."""
    s, cfg = result["summary"], result["configuration"]
    low, high = cfg["llm_latency_s"]
    parts = []
    for case in cfg["cases"]:
        c = s[f"catch_up_{case}"]
        what = (f"with a model answering in {low * 1000:.0f}–{high * 1000:.0f} ms" if case == "llm"
                else f"CPU only (no model; {result['calibration']['before']['cpus']} cores shared)")
        parts.append(f"{what} {c['1_host']['median']} s ({c['1_host']['min']}–{c['1_host']['max']}) → "
                     f"{c['2_hosts']['median']} s ({c['2_hosts']['min']}–{c['2_hosts']['max']}), **{c['speedup']}×**"
                     + ("" if c["all_completed"] else " (a round did not complete)"))
    rows = [f"- pipeline catch-up of {cfg['messages']:,} messages, 1 → 2 worker hosts: " + "; ".join(parts)] if parts else []
    if "ingest" in s:
        i = s["ingest"]
        rows.append(f"- ingest (`POST /messages`, {cfg['threads']} clients), 1 → 2 web processes (the second on the"
                    f" other host): {i['1_process']['median']} req/s ({i['1_process']['min']}–{i['1_process']['max']})"
                    f" → {i['2_processes']['median']} ({i['2_processes']['min']}–{i['2_processes']['max']}),"
                    f" {i['ratio']}×")
    config = (f"PostgreSQL, the second host a network namespace over a veth, medians (ranges) of {cfg['rounds']}"
              f" interleaved rounds; docs/DEPLOY.md \"What a second host buys\"")
    return "\n".join(["## What a second host buys (`make bench-hosts`)", measured(COMMAND, config, result), *rows])


def write_report(result: dict) -> None:
    replace_section(BENCHMARKS_MD, "<!-- hosts:start -->", "<!-- hosts:end -->", render(result))


# --- main ----------------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds of each configuration, interleaved")
    p.add_argument("--cases", default=",".join(CASES), help="catch-up cases: llm, heuristic (comma-separated)")
    p.add_argument("--messages", type=int, default=1000, help="messages of a catch-up")
    p.add_argument("--streams", type=int, default=10)
    p.add_argument("--ingest-messages", type=int, default=2000)
    p.add_argument("--threads", type=int, default=4, help="client threads posting messages")
    p.add_argument("--llm-latency", default="0.3,0.8", help="seconds per model call: uniform between these")
    p.add_argument("--skip-ingest", action="store_true")
    p.add_argument("--second-on-host", action="store_true",
                   help="a diagnostic: start the second catch-up worker on this host (no namespace, no relay)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds a catch-up may take")
    p.add_argument("--redis-url", default=BENCH_REDIS_URL,
                   help="a Redis database of this run's own (flushed before each trial and at the end)")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--keep-logs", default="", help="copy the workers' and web servers' logs here")
    p.add_argument("--render", action="store_true", help="only rewrite BENCHMARKS.md's section from --out")
    args = p.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if set(args.cases) - set(CASES):
        p.error(f"--cases: {', '.join(CASES)}")
    low, high = (float(x) for x in args.llm_latency.split(","))
    args.llm_latency = (low, high)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        write_report(json.loads(Path(args.out).read_text()))
        return 0
    if not can_make_namespaces("bench-hosts"):
        return 2
    if not backends.postgres_available():
        print(f"bench-hosts needs PostgreSQL at {backends.server()} (BENCH_PG_SERVER)", file=sys.stderr)
        return 2
    cleanup, tmp = cleanup_on_signals("bench-hosts-")
    started = time.monotonic()
    try:
        before = calibration()
        log(f"machine: {calibration_text({'before': before})}")
        run = Run(args, cleanup, tmp)
        result: dict = {"catch_up": {}, "ingest": []}
        partial = Path(args.out).with_suffix(".partial.json")
        for case in args.cases:
            result["catch_up"][case] = run.catch_up_rounds(case, args.rounds)
            partial.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n")  # kept if a later part fails
        if not args.skip_ingest:
            result["ingest"] = run.ingest_rounds(args.rounds)
        after = calibration()
    finally:
        if args.keep_logs:
            shutil.copytree(tmp, args.keep_logs, dirs_exist_ok=True)
        cleanup.run()
        log("cleaned up: namespace, veth, forwarders, processes, databases, Redis database")
    result.update({
        "configuration": {"rounds": args.rounds, "cases": args.cases, "messages": args.messages,
                          "streams": args.streams, "ingest_messages": args.ingest_messages, "threads": args.threads,
                          "llm_latency_s": list(args.llm_latency), "worker_concurrency": 2,
                          "catch_up_web_processes": 2, "embedding": "local", "backend": "postgresql"},
        "calibration": {"before": before, "after": after},
        "seconds": round(time.monotonic() - started, 1),
    })
    result["summary"] = summarise(result)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    out.with_suffix(".partial.json").unlink(missing_ok=True)
    log(f"machine: {calibration_text(result['calibration'])}")
    for line in render(result).splitlines()[2:]:
        print(line, flush=True)
    write_report(result)
    llm = result["summary"].get("catch_up_llm")
    if llm is not None and llm["speedup"] < TARGET_SPEEDUP:
        log(f"a second worker host bought {llm['speedup']}× with a model answering (target ≥ {TARGET_SPEEDUP}×)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
