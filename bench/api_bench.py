"""HTTP API benchmark: the bot API under gunicorn, next to direct service calls.

Starts ``gunicorn -c config/gunicorn.py config.wsgi`` (2 workers, as `make run` configures them; 127.0.0.1, a free port) on a copy of
the scale database of ``bench.build_db`` (the original stays untouched), creates an
API token and drives the API from this process with httpx:

* ``POST /api/v1/messages`` — N messages (default 2000) from a few concurrent client
  threads → requests/s (target ≥ 300) and latency;
* ``POST /api/v1/turns`` and ``POST /api/v1/turns/{id}/confirm`` (with a 512-d query
  embedding) — sequential → median / p95 (target: turns p95 ≤ 30 ms), lived as a bot
  lives them: the user's line is first stored (``POST /messages``) and the turn is
  prepared on it (its watermark), so the stream's recent lines join the query (each
  recent user line a lexical query of its own, the last 6 messages' vectors in the
  confirm's cosine). The messages posted over HTTP get their vectors before the turns:
  with ``--worker`` from the worker itself (a stored message queues the embedding
  backfill, ``MESSAGE_VECTOR_DELAY``; the bench waits until none is left without one),
  without it from the bench (random unit vectors, like the scale database's); the
  result reports how many context lines and context vectors the turns actually had.

After the server stops, the same work is timed as direct in-process calls
(``resolve_stream``/``resolve_person``/``append_message``, ``prepare_turn``,
``confirm_turn``) on the same database copy, and the API overhead is reported as a
ratio. Task enqueueing is off in both (no Redis needed), DEBUG is off. Writes
``bench/results/api.json`` and prints a table; stops by itself.

    python -m bench.api_bench [--db bench/.cache/scale.sqlite3] [--messages 2000] [--turns 200]

Without a scale database (``--db`` missing or absent) a small one is built through
the services first.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import (
    BENCH_REDIS_URL,
    Server,
    child_pids,
    latency_stats,
    rss_mb,
    shown,
    started_at,
    stop_process_group,
    tree_cpu_seconds,
)

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DEFAULT_DB = ROOT / "bench" / ".cache" / "scale.sqlite3"
DIM = 512

QUESTIONS = [
    "你还记得我喜欢吃什么吗", "我住在哪个城市来着", "周末一起去爬山吗", "我养的猫叫什么名字", "最近工作好累啊",
    "下周要去上海出差", "我的生日是几月几号", "你觉得火锅和烧烤哪个好吃", "我是做什么工作的", "昨天的考试考砸了",
    "晚上一起看电影吧", "我不喜欢香菜你记得吗", "最近迷上了弹吉他", "我们聊过旅行的事吗", "有什么好玩的游戏推荐",
]
CHAT = ["今天天气不错", "晚上吃火锅吗", "我最近在学吉他", "周末去杭州玩了", "工作好累啊", "猫又把杯子打翻了",
        "明天要考试", "刚看完一部电影", "你喜欢喝咖啡吗", "下周出差去上海"]


SETTINGS_OVERRIDE: dict[str, str] = {}  # set by --persistent-connections: module name and its folder
#: set by --worker: the Redis database of the broker (flushed before and after)
WORKER: dict[str, str] = {}


#: p95 of each request of a turn (issue 3), of a whole turn — its prepare and confirm together (issue 12) — and
#: the ingest rate
TARGETS = {"turns_p95_ms": 30, "confirm_p95_ms": 30, "turn_p95_ms": 30, "ingest_requests_per_s": 300}


def targets_met(result: dict) -> dict[str, bool]:
    """Which of :data:`TARGETS` an API result (this module's, or bench.api_rounds' median of rounds) meets."""
    http = {key: result[key]["http"] for key in ("turns", "confirm", "turn_total", "ingest")}
    return {
        "turns_p95": http["turns"]["p95_ms"] <= TARGETS["turns_p95_ms"],
        "confirm_p95": http["confirm"]["p95_ms"] <= TARGETS["confirm_p95_ms"],
        "turn_p95": http["turn_total"]["p95_ms"] <= TARGETS["turn_p95_ms"],
        "ingest": http["ingest"]["requests_per_s"] >= TARGETS["ingest_requests_per_s"],
    }


def env_for(db: Path | str, *, deployed: bool = False) -> dict[str, str]:
    """The environment of the server (``deployed``: enqueue on, Redis, the local embedder) on ``db``.

    ``db`` is a SQLite file or a ``postgres://`` URL (bench/backends.py).
    """
    from bench import backends

    env = backends.env_for(db)
    env.update(
        DJANGO_SETTINGS_MODULE=SETTINGS_OVERRIDE.get("module", "config.settings"),
        DJANGO_DEBUG="False",
        MEMORY_ENQUEUE_TASKS="False",
        EMBEDDING_PROVIDER="none",
        LOG_LEVEL="WARNING",
        PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [SETTINGS_OVERRIDE.get("path")])]),
    )
    if deployed and WORKER:
        env.update(MEMORY_ENQUEUE_TASKS="True", REDIS_URL=WORKER["redis_url"], EMBEDDING_PROVIDER="local",
                   LLM_BASE_URL="", LLM_MODEL="")
    return env


class Worker:
    """A real ``celery -A config worker`` (2 processes) beside the server, as deployed (--worker)."""

    def __init__(self, db: Path | str, log: Path):
        import redis

        redis.Redis.from_url(WORKER["redis_url"]).flushdb()
        self.log = log
        handle = open(log, "wb")
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("celery")), "-A", "config", "worker", "-n", "api-bench@%h",
             "--concurrency=2", "--loglevel=WARNING", "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=env_for(db, deployed=True), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )
        handle.close()
        time.sleep(8)  # start-up incl. the embedding model, not part of the measurement
        if self.proc.poll() is not None:
            raise RuntimeError(f"celery worker exited: {log.read_text()[-2000:]}")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the worker's main process and its pool so far."""
        return tree_cpu_seconds(self.proc.pid)

    def rss(self) -> dict:
        """Resident memory (MB) of the worker's main process and of each pool process (they run the tasks)."""
        return {"main": rss_mb(self.proc.pid), "pool": [rss_mb(p) for p in child_pids(self.proc.pid)]}

    def stop(self) -> None:
        import redis

        stop_process_group(self.proc, timeout=30)
        redis.Redis.from_url(WORKER["redis_url"]).flushdb()


def persistent_connection_settings(folder: Path) -> None:
    """A settings module = the real one + ``CONN_MAX_AGE = None`` (what-if for the settings)."""
    (folder / "api_bench_settings.py").write_text(
        'from config.settings import *  # noqa: F401,F403\n'
        'DATABASES["default"]["CONN_MAX_AGE"] = None\n'
    )
    SETTINGS_OVERRIDE.update(module="api_bench_settings", path=str(folder))


# --- database ------------------------------------------------------------------------------


def build_small_db(path: Path) -> dict:
    """A small store written through the services (used when no scale database exists)."""
    code = f"""
import random, django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
import numpy as np
from memory import services
rng = random.Random(5)
now = 1_800_000_000_000
foods = ["火锅", "香菜", "咖啡", "烧烤", "奶茶", "寿司"]
cities = ["杭州", "上海", "北京", "成都"]
for i in range(200):
    p = services.resolve_person(platform="bench", external_id=f"u{{i}}", name=f"用户{{i}}", at=now)
    for j in range(5):
        w = services.add_fact(person_id=p.pk, content=f"用户{{i}}喜欢{{rng.choice(foods)}}第{{j}}种吃法", kind="偏好", at=now)
        v = np.random.default_rng(i * 10 + j).standard_normal({DIM}).astype("float32")
        services.store_fact_vector(fact_id=w.fact_id, vector=v / np.linalg.norm(v))
    services.add_fact(person_id=p.pk, content=f"用户{{i}}住在{{rng.choice(cities)}}", kind="身份", slot="居住地", at=now)
for s in range(20):
    st = services.resolve_stream(platform="bench", kind=["direct", "group"][s % 2], external_id=f"s{{s}}")
    for m in range(50):
        services.append_message(stream_id=st.pk, role="user", content=rng.choice({CHAT!r}),
                                sender_person_id=rng.randrange(200) + 2, at=now - 1000 + m)
print({{"persons": 200, "streams": 20, "now": now}})
"""
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env_for(path), check=True)
    return {"persons": 200, "streams": 20, "now": 1_800_000_000_000}


def copy_db(src: Path, dst: Path) -> None:
    for suffix in ("", "-wal"):
        s = Path(f"{src}{suffix}")
        if s.exists():
            shutil.copyfile(s, f"{dst}{suffix}")


def refs(db: Path | str, counts: dict) -> tuple[list[tuple[str, str]], list[str], int]:
    """(stream kind, external id) pairs and person external ids present in the database."""
    from bench import backends

    streams = backends.query(db, "SELECT kind, external_id FROM streams WHERE platform = 'bench' ORDER BY id")
    persons = [r[0] for r in backends.query(db, "SELECT external_id FROM identities WHERE platform = 'bench' ORDER BY id")]
    return streams, persons, int(counts.get("now") or 1_800_000_000_000)


def speakers(db: Path | str, streams: list[tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
    """Each of ``streams``' senders so far (external ids): who posts in it when the ingest's traffic comes."""
    from bench import backends

    keys = ", ".join("'" + ext.replace("'", "''") + "'" for _, ext in streams) or "''"
    rows = backends.query(db, "SELECT DISTINCT s.kind, s.external_id, i.external_id FROM streams s"
                              " JOIN messages m ON m.stream_id = s.id JOIN identities i ON i.person_id = m.sender_person_id"
                              f" WHERE s.platform = 'bench' AND i.platform = 'bench' AND s.external_id IN ({keys})")
    out: dict[tuple[str, str], list[str]] = {}
    for kind, ext, person in sorted(rows):
        out.setdefault((kind, ext), []).append(person)
    return out


def spread(items: list, count: int) -> list:
    """``count`` of ``items`` evenly spaced from the first (all of them for 0 or more than there are)."""
    if count <= 0 or count >= len(items):
        return list(items)
    return [items[i * len(items) // count] for i in range(count)]


# --- HTTP workload ---------------------------------------------------------------------------


def http_ingest(server: Server, token: str, streams, persons, n: int, threads: int, now: int, run: str,
                worker: Worker | None = None, members: dict | None = None) -> dict:
    """``n`` messages posted by ``threads`` clients into ``streams``, each by one of its ``members``
    (the stream's senders so far; any of ``persons`` for a stream with none, or without ``members``)."""
    import httpx

    base = server.base
    headers = {"Authorization": f"Bearer {token}"}
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    per = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]

    def work(idx: int, count: int) -> None:
        rng = random.Random(100 + idx)
        mine: list[float] = []
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            for k in range(count):
                kind, ext = rng.choice(streams)
                body = {"stream": {"platform": "bench", "kind": kind, "external_id": ext},
                        "sender": {"platform": "bench",
                                   "external_id": rng.choice((members or {}).get((kind, ext)) or persons)},
                        "role": "user", "content": rng.choice(CHAT), "external_message_id": f"{run}-{idx}-{k}",
                        "at": now + k}
                t = time.perf_counter()
                r = client.post("/api/v1/messages", json=body)
                mine.append((time.perf_counter() - t) * 1000)
                if r.status_code != 201:
                    with lock:
                        errors.append(f"{r.status_code} {r.text[:200]}")
        with lock:
            latencies.extend(mine)

    # warm-up: both workers import and connect
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        for k in range(20):
            kind, ext = streams[k % len(streams)]
            client.post("/api/v1/messages", json={"stream": {"platform": "bench", "kind": kind, "external_id": ext},
                                                  "role": "assistant", "content": "warm-up", "at": now})
    pool = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate(per)]
    server_cpu0, client_cpu0 = server.cpu_seconds(), time.process_time()
    worker_cpu0, busy0 = (worker.cpu_seconds() if worker else 0.0), _machine_busy()
    t0 = time.perf_counter()
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    wall = time.perf_counter() - t0
    server_cpu, client_cpu = server.cpu_seconds() - server_cpu0, time.process_time() - client_cpu0
    worker_cpu, busy = (worker.cpu_seconds() if worker else 0.0) - worker_cpu0, _machine_busy()
    # where the machine's CPU went while the messages came in (ms a request): the web, this client, the
    # Celery worker and everything else (PostgreSQL's backends, Redis, the kernel)
    machine_cpu = (busy[0] - busy0[0]) / os.sysconf("SC_CLK_TCK")
    shares = {"web": server_cpu, "client": client_cpu, "worker": worker_cpu,
              "other": max(0.0, machine_cpu - server_cpu - client_cpu - worker_cpu)}
    return {"requests": n, "threads": threads, "seconds": round(wall, 3), "requests_per_s": round(n / wall, 1),
            "latency": latency_stats(latencies), "errors": len(errors), "first_errors": errors[:3],
            "server_cpu_ms_per_request": round(server_cpu / n * 1000, 3),
            "client_cpu_ms_per_request": round(client_cpu / n * 1000, 3),
            "server_cpu_bound_requests_per_s_per_core": round(n / server_cpu, 1) if server_cpu else None,
            "cpu_ms_per_request": {key: round(value / n * 1000, 3) for key, value in shares.items()}}


def first_answered_turn(server: Server, token: str, item: dict, timeout: float = 180.0) -> dict:
    """Warm-up as a caller lives it: ``POST /turns`` from the server's start until one is answered (200).

    ``seconds``: from the fork of the first web worker to that answer (each worker loads the URLconf,
    jieba and the embedder before it accepts; the first turn then loads the resident statistics it
    reads); ``from_start_s``: from the master's start."""
    import httpx

    body = {k: item[k] for k in ("stream", "speaker", "text", "at")}
    t0 = time.time()
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {server.proc.returncode}")
            try:
                r = client.post("/api/v1/turns", json=body)
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            if r.status_code != 200:
                raise RuntimeError(f"first turn: {r.status_code} {r.text[:300]}")
            answered = time.time()
            forks = [started_at(p) for p in child_pids(server.proc.pid)]
            return {"seconds": round(answered - min(forks, default=t0), 2), "from_start_s": round(answered - t0, 2)}
    raise RuntimeError("gunicorn answered no turn")


def _machine_busy() -> tuple[float, float]:
    """``(busy, total)`` CPU time of the whole machine so far (``/proc/stat``; zeros where there is none)."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def wait_settled(server: Server, *, quiet: float = 1.0, share: float = 0.1, timeout: float = 180.0) -> dict:
    """Until the web workers have built their resident indexes beside the first turns (the warm-up thread,
    docs/ARCHITECTURE.md "Warm-up"): the machine's CPU stays under ``share`` of its cores for ``quiet``
    seconds — the machine's, not the workers' own, as on PostgreSQL the build waits on the database's
    processes. ``seconds`` from now to then, ``cpu_s`` the web workers' CPU meanwhile. The figures after it
    are a warmed server's; one taking traffic while it warms (a restart under a live bot) pays ``cpu_s`` on
    its first requests' cores."""
    t0, c0 = time.monotonic(), server.cpu_seconds()
    last_t, last_busy = t0, _machine_busy()
    while time.monotonic() - t0 < timeout:
        time.sleep(quiet)
        t, busy = time.monotonic(), _machine_busy()
        spent, total = busy[0] - last_busy[0], busy[1] - last_busy[1]
        if total > 0 and spent / total < share:
            return {"seconds": round(last_t - t0, 2), "cpu_s": round(server.cpu_seconds() - c0, 2)}
        last_t, last_busy = t, busy
    return {"seconds": round(time.monotonic() - t0, 2), "cpu_s": round(server.cpu_seconds() - c0, 2), "timed_out": True}


def turn_inputs(streams, persons, n: int, now: int) -> list[dict]:
    import numpy as np

    rng = random.Random(42)
    vecs = np.random.default_rng(42)
    out = []
    for i in range(n):
        kind, ext = rng.choice(streams)
        v = vecs.standard_normal(DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        out.append({"stream": {"platform": "bench", "kind": kind, "external_id": ext},
                    "speaker": {"platform": "bench", "external_id": rng.choice(persons)},
                    "text": QUESTIONS[i % len(QUESTIONS)], "at": now + 10_000 + i,
                    "embedding": [round(float(x), 6) for x in v]})
    return out


def http_turns(base: str, token: str, inputs: list[dict], warmup: int) -> dict:
    import httpx

    prep, conf, facts, total = [], [], [], []
    errors: list[str] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for i, item in enumerate(inputs):
            line = client.post("/api/v1/messages", json={  # the user's line arrives first (not timed here)
                "stream": item["stream"], "sender": item["speaker"], "role": "user", "content": item["text"],
                "at": item["at"] - 1})
            if line.status_code not in (200, 201):
                errors.append(f"messages {line.status_code} {line.text[:200]}")
                continue
            body = {k: item[k] for k in ("stream", "speaker", "text", "at")}
            body["watermark_message_id"] = line.json()["id"]
            t = time.perf_counter()
            r = client.post("/api/v1/turns", json=body)
            dt = (time.perf_counter() - t) * 1000
            if r.status_code != 200:
                errors.append(f"turns {r.status_code} {r.text[:200]}")
                continue
            turn = r.json()
            t = time.perf_counter()
            c = client.post(f"/api/v1/turns/{turn['turn_id']}/confirm",
                            json={"query_embedding": item["embedding"], "at": item["at"] + 500})
            dc = (time.perf_counter() - t) * 1000
            if c.status_code != 200:
                errors.append(f"confirm {c.status_code} {c.text[:200]}")
                continue
            if i >= warmup:
                prep.append(dt)
                conf.append(dc)
                total.append(dt + dc)
                facts.append(len(turn["facts"]))
    return {"turns": latency_stats(prep), "confirm": latency_stats(conf), "turn_total": latency_stats(total),
            "mean_facts": round(statistics.fmean(facts), 2) if facts else 0,
            "errors": len(errors), "first_errors": errors[:3]}


# --- direct calls (same database, in this process) --------------------------------------------


def setup_django(db: Path | str) -> None:
    os.environ.update(env_for(db))
    sys.path[:0] = os.environ["PYTHONPATH"].split(os.pathsep)
    import django

    django.setup()


def direct_ingest(streams, persons, n: int, now: int) -> dict:
    from django.db import transaction

    from memory import services

    rng = random.Random(7)
    samples = []
    for k in range(n):
        kind, ext = rng.choice(streams)
        t = time.perf_counter()
        with transaction.atomic():
            s = services.resolve_stream(platform="bench", kind=kind, external_id=ext)
            p = services.resolve_person(platform="bench", external_id=rng.choice(persons), at=now)
            services.append_message(stream_id=s.pk, role="user", content=rng.choice(CHAT), sender_person_id=p.pk,
                                    external_message_id=f"direct-{k}", at=now + k)
        samples.append((time.perf_counter() - t) * 1000)
    out = latency_stats(samples)
    out["requests_per_s_single_thread"] = round(1000 / out["mean_ms"], 1)
    return out


def direct_turns(inputs: list[dict], warmup: int) -> dict:
    from django.db import transaction

    from memory import recall, services

    prep, conf, prep_cpu, conf_cpu = [], [], [], []
    for i, item in enumerate(inputs):
        s, p = item["stream"], item["speaker"]
        with transaction.atomic():  # the user's line arrives first (not timed), as over HTTP
            stream = services.resolve_stream(platform=s["platform"], kind=s["kind"], external_id=s["external_id"])
            speaker = services.resolve_person(platform=p["platform"], external_id=p["external_id"], at=item["at"])
            line, _ = services.append_message(stream_id=stream.pk, role="user", content=item["text"],
                                              sender_person_id=speaker.pk, at=item["at"] - 1)
        # as the views do: the reads of a turn run outside a transaction (prepare_turn and
        # confirm_turn open their own short ones for their writes)
        t, c = time.perf_counter(), time.process_time()
        stream = services.resolve_stream(platform=s["platform"], kind=s["kind"], external_id=s["external_id"])
        speaker = services.resolve_person(platform=p["platform"], external_id=p["external_id"], at=item["at"])
        ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=speaker.pk, text=item["text"],
                                  watermark_message_id=line.pk, at=item["at"])
        dt, dtc = (time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000
        t, c = time.perf_counter(), time.process_time()
        recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=item["embedding"], at=item["at"] + 500)
        dc, dcc = (time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000
        if i >= warmup:
            prep.append(dt)
            conf.append(dc)
            prep_cpu.append(dtc)
            conf_cpu.append(dcc)
    return {"turns": latency_stats(prep), "confirm": latency_stats(conf), "turns_cpu": latency_stats(prep_cpu),
            "confirm_cpu": latency_stats(conf_cpu)}


def backfill_message_vectors(seed: int) -> int:
    """Give every message without a vector one (a random unit vector, SQ8 beside it), as the
    embedding backfill of a running worker would; returns how many were written."""
    import numpy as np
    from django.db import connection, transaction

    from memory import services

    with connection.cursor() as cur:
        cur.execute("SELECT id FROM messages WHERE embedding IS NULL ORDER BY id")
        ids = [r[0] for r in cur.fetchall()]
    rng = np.random.default_rng(seed)
    with transaction.atomic():
        for mid in ids:
            v = rng.standard_normal(DIM).astype(np.float32)
            services.store_message_vector(message_id=mid, vector=v / np.linalg.norm(v))
    connection.close()
    return len(ids)


def wait_for_worker_vectors(timeout: float = 300.0) -> dict:
    """Wait until the worker has embedded every message (each stored message queues the backfill,
    ``MESSAGE_VECTOR_DELAY`` seconds later): ``{"seconds", "left"}`` (``left`` > 0: timed out)."""
    from django.db import connection

    start = time.monotonic()
    while True:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM messages WHERE embedding IS NULL")
            left = cur.fetchone()[0]
        if not left or time.monotonic() - start > timeout:
            connection.close()
            return {"seconds": round(time.monotonic() - start, 1), "left": left}
        time.sleep(0.5)


def context_stats(since_turn_id: int) -> dict:
    """What the measured turns had as conversation: context lines and how many of them carry a vector."""
    from django.db import connection

    from memory.models import Message, Turn

    turns = list(Turn.objects.filter(pk__gt=since_turn_id).values_list("context_message_ids", flat=True))
    ids = {i for ctx in turns for i in ctx}
    with_vector = set(Message.objects.filter(pk__in=ids, embedding_q8__isnull=False).values_list("id", flat=True))
    users = set(Message.objects.filter(pk__in=ids, role="user").values_list("id", flat=True))
    connection.close()
    n = max(1, len(turns))
    return {
        "turns": len(turns),
        "mean_context_messages": round(sum(len(c) for c in turns) / n, 2),
        "mean_context_vectors": round(sum(len([i for i in c if i in with_vector]) for c in turns) / n, 2),
        "mean_context_user_lines": round(sum(len([i for i in c[:3] if i in users]) for c in turns) / n, 2),
    }


def last_turn_id() -> int:
    from django.db import connection

    from memory.models import Turn

    value = Turn.objects.order_by("-id").values_list("id", flat=True).first() or 0
    connection.close()
    return value


# --- main ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=str(DEFAULT_DB), help="scale database of bench.build_db (copied, not modified)")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--ingest-streams", type=int, default=0,
                        help="post the ingest into this many of the store's streams, evenly spread (0: every "
                             "stream): the same traffic whatever the store's size")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS / "api.json"))
    parser.add_argument("--persistent-connections", action="store_true",
                        help="what-if: run with CONN_MAX_AGE = None if the settings do not set it")
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite",
                        help="postgresql: the scale database moved by copy_store, cloned per run (bench/backends.py)")
    parser.add_argument("--worker", action="store_true",
                        help="as deployed: task enqueueing on, a real Celery worker (2 processes) and Redis")
    parser.add_argument("--skip-direct", action="store_true", help="only the HTTP part (no direct calls after it)")
    parser.add_argument("--redis-url", default=BENCH_REDIS_URL,
                        help="--worker's Redis database (flushed before and after)")
    args = parser.parse_args(argv)
    if args.worker:
        WORKER["redis_url"] = args.redis_url
        if args.out == str(RESULTS / "api.json"):
            args.out = str(RESULTS / f"api_{args.backend}_worker.json")

    tmp = Path(tempfile.mkdtemp(prefix="memory-api-bench-"))
    if args.persistent_connections:
        persistent_connection_settings(tmp)
    db: Path | str = tmp / "api-bench.sqlite3"
    src = Path(args.db)
    clone = None
    worker = None
    try:
        if src.exists() and args.backend == "postgresql":
            from bench import backends

            db = clone = backends.clone(backends.scale_copy(src)["url"], "api")
            meta = src.with_suffix(".json")
            counts = json.loads(meta.read_text()) if meta.exists() else {}
            source = f"{shown(src)} moved to PostgreSQL (copy_store)"
        elif src.exists():
            copy_db(src, db)
            meta = src.with_suffix(".json")
            counts = json.loads(meta.read_text()) if meta.exists() else {}
            source = shown(src)
        elif args.backend == "postgresql":
            raise SystemExit(f"--backend postgresql needs the scale database {src} (python -m bench.run builds it)")
        else:
            print(f"no database at {src}; building a small one through the services …", flush=True)
            counts = build_small_db(db)
            source = "small (built via services)"
        streams, persons, now = refs(db, counts)
        if not streams or not persons:
            raise SystemExit(f"{src} has no 'bench' streams/identities (build it with python -m bench.build_db)")
        now = now + 3_600_000  # later than anything in the store
        ingest_streams = spread(streams, args.ingest_streams)
        members = speakers(db, ingest_streams)

        setup_django(db)
        from django.conf import settings as dj_settings
        from django.db import connection

        conn_max_age = dj_settings.DATABASES["default"].get("CONN_MAX_AGE", 0)
        load_before = [round(x, 2) for x in os.getloadavg()]

        from memory.api.auth import issue_token

        _, token = issue_token("api-bench")
        connection.close()
        inputs = turn_inputs(streams, persons, args.turns, now)
        warmup = min(10, args.turns // 10)

        worker = Worker(db, tmp / "worker.log") if args.worker else None
        server = Server(env_for(db, deployed=True), workers=args.workers)
        try:
            warm_up = first_answered_turn(server, token, inputs[0])
            warm_up["settled"] = wait_settled(server)  # what follows measures a warmed server
            ingest = http_ingest(server, token, ingest_streams, persons, args.messages, args.threads, now, "http", worker,
                                 members)
            ingest["streams"] = len(ingest_streams)
            if worker is not None:  # as deployed: the worker embeds the stored lines (MESSAGE_VECTOR_DELAY)
                backfilled = {"by": "worker", **wait_for_worker_vectors()}
            else:  # no worker: the bench gives them the vectors a worker would have
                backfilled = {"by": "bench", "written": backfill_message_vectors(1)}
            first = last_turn_id()
            turns = http_turns(server.base, token, inputs, warmup)
            http_context = context_stats(first)
            residency = {"warm_up": warm_up, "web_workers_rss_mb": [rss_mb(p) for p in child_pids(server.proc.pid)],
                         "celery_rss_mb": worker.rss() if worker is not None else None}
        finally:
            server.stop()
            if worker is not None:
                worker.stop()

        if args.skip_direct:
            direct_msg, direct_context = {"requests_per_s_single_thread": 0.0, "median_ms": 0.0, "p95_ms": 0.0}, {}
            direct = {key: {"median_ms": 0.0, "p95_ms": 0.0} for key in ("turns", "confirm", "turns_cpu", "confirm_cpu")}
        else:
            direct_msg = direct_ingest(streams, persons, min(args.messages, 1000), now)
            backfill_message_vectors(2)
            direct_inputs = turn_inputs(streams, persons, args.turns, now + 100_000)
            first = last_turn_id()
            direct = direct_turns(direct_inputs, warmup)
            direct_context = context_stats(first)
        connection.close()
    finally:
        if worker is not None:
            worker.stop()
        if clone is not None:
            from django.db import connections

            connections.close_all()
            from bench import backends

            backends.drop(clone)
        shutil.rmtree(tmp, ignore_errors=True)

    def ratio(a: float, b: float) -> float:
        return round(a / b, 2) if b else 0.0

    # config/gunicorn.py: GUNICORN_THREADS, else 2 on PostgreSQL and 1 on SQLite
    threads = int(os.environ.get("GUNICORN_THREADS") or (2 if args.backend == "postgresql" else 1))
    result = {
        "database": source,
        "counts": {k: counts.get(k) for k in ("persons", "facts", "knowledge", "messages", "episodes", "edges", "streams")},
        "server": f"gunicorn -c config/gunicorn.py config.wsgi, {args.workers} workers × {threads} thread(s), DEBUG off, "
                  + ("enqueue on with a real Celery worker (2 processes)" if args.worker else "enqueue off")
                  + (", CONN_MAX_AGE=None (what-if)" if args.persistent_connections else ""),
        "backend": args.backend,
        "worker": args.worker,
        "conn_max_age": conn_max_age,
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "ingest": {"http": ingest, "direct": direct_msg},
        "turns": {"http": turns["turns"], "direct": direct["turns"],
                  "ratio_median": ratio(turns["turns"]["median_ms"], direct["turns"]["median_ms"]),
                  "ratio_p95": ratio(turns["turns"]["p95_ms"], direct["turns"]["p95_ms"])},
        "confirm": {"http": turns["confirm"], "direct": direct["confirm"],
                    "ratio_median": ratio(turns["confirm"]["median_ms"], direct["confirm"]["median_ms"]),
                    "ratio_p95": ratio(turns["confirm"]["p95_ms"], direct["confirm"]["p95_ms"])},
        "direct_cpu": {"turns": direct["turns_cpu"], "confirm": direct["confirm_cpu"]},
        "turn_total": {"http": turns["turn_total"]},  # prepare + confirm of the same turn
        "mean_facts_per_turn": turns["mean_facts"],
        "context": {"http": http_context, "direct": direct_context, "message_vectors": backfilled},
        "errors": {"ingest": ingest["first_errors"], "turns": turns["first_errors"]},
        "residency": residency,
        "targets": TARGETS,
        "python": sys.version.split()[0],
    }
    result["targets_met"] = targets_met(result)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    print_table(result)
    print(f"\nwritten to {out}")
    return result


def print_table(r: dict) -> None:
    print(f"\nAPI benchmark on {r['database']}  ({r['server']})")
    print(f"{r['cpus']} CPUs, load average before the run {r['load_average_before']}")
    i = r["ingest"]
    print(f"{'path':<30}{'HTTP':>28}{'direct':>22}{'ratio':>8}")
    print(f"{'POST /messages (req/s)':<30}{i['http']['requests_per_s']:>20.1f} ({i['http']['threads']} thr)"
          f"{i['direct']['requests_per_s_single_thread']:>16.1f} (1 thr){'':>8}")
    print(f"{'POST /messages median/p95 ms':<30}{i['http']['latency']['median_ms']:>13.2f} / {i['http']['latency']['p95_ms']:<12.2f}"
          f"{i['direct']['median_ms']:>9.2f} / {i['direct']['p95_ms']:<10.2f}"
          f"{i['http']['latency']['median_ms'] / (i['direct']['median_ms'] or float('nan')):>6.2f}")
    for key, label in (("turns", "POST /turns median/p95 ms"), ("confirm", "POST /confirm median/p95 ms")):
        h, d = r[key]["http"], r[key]["direct"]
        print(f"{label:<30}{h['median_ms']:>13.2f} / {h['p95_ms']:<12.2f}{d['median_ms']:>9.2f} / {d['p95_ms']:<10.2f}"
              f"{r[key]['ratio_median']:>6.2f}")
    print(f"POST /messages CPU per request: server {i['http']['server_cpu_ms_per_request']} ms "
          f"(≈ {i['http']['server_cpu_bound_requests_per_s_per_core']} req/s per free core), "
          f"client {i['http']['client_cpu_ms_per_request']} ms; direct {i['direct']['median_ms']} ms")
    res = r.get("residency") or {}
    if res:
        settled = res["warm_up"].get("settled") or {}
        print(f"warm-up (web worker fork → first answered turn) {res['warm_up']['seconds']} s, its resident indexes "
              f"built {settled.get('seconds')} s after that ({settled.get('cpu_s')} s CPU); RSS MB of the web workers "
              f"{res['web_workers_rss_mb']}, of the Celery worker {res['celery_rss_mb']}")
    c = r["context"]["http"]
    print(f"conversation per turn (HTTP): {c['mean_context_messages']} context messages, "
          f"{c['mean_context_vectors']} of them with a vector, {c['mean_context_user_lines']} user lines as lexical queries")
    print(f"targets met: {r['targets_met']}  (each request's p95 and a whole turn's ≤ 30 ms, ingest ≥ 300 req/s)")
    if r["errors"]["ingest"] or r["errors"]["turns"]:
        print("errors:", r["errors"])


if __name__ == "__main__":
    main()
