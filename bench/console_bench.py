"""Server time of the console's list pages at scale (target p95 ≤ 150 ms).

Runs in-process with Django's test client (full middleware, templates and
queries; no network) on a copy of the scale database from ``bench.build_db``,
after adding curation operations and conflict groups so every page has rows.
Writes ``bench/results/console.json`` and prints a table.

    python -m bench.console_bench [--db bench/.cache/scale.sqlite3] [--n 40]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prepare(db: Path) -> None:
    os.environ["MEMORY_DB"] = str(db)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["MEMORY_ENQUEUE_TASKS"] = "False"
    os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed_curation(now: int) -> None:
    """Operations and conflict groups on a copy: 2,000 operations, 300 extra conflicts."""
    from curation import services as curation
    from memory import services
    from memory.models import Fact, FactState

    rng = random.Random(3)
    ids = list(Fact.objects.in_state(FactState.ACTIVE).values_list("id", flat=True)[:3000])
    for i, fid in enumerate(rng.sample(ids, 1000)):
        op = curation.invalidate_fact(fact_id=fid, at=now + i, user="bench") if i % 2 else curation.pin_fact(
            fact_id=fid, at=now + i, user="bench")
        if i % 5 == 0:
            curation.undo_operation(operation_id=op.pk, at=now + i, user="bench")
    for p in range(2, 302):
        services.add_fact(person_id=p, content=f"bench住在冲突城市{p}号", kind="身份", slot="居住地", at=now)
        services.add_fact(person_id=p, content=f"bench住在另一个城市{p}号", kind="身份", slot="居住地", at=now)


#: The question of the inspected turn: words most of the scale store's facts hold (likes, lives, keeps, works).
INSPECTED_TEXT = "你还记得大家都喜欢吃什么、住在哪里、养了什么宠物、做什么工作、最近在忙什么吗"
INSPECTED_POOL = 100


#: Everyday facts each person present at the inspected turn is given on the copy (see :func:`seed_busy_group`).
BUSY_FACTS = 40


def seed_busy_group(stream, speaker: int, now: int) -> int:
    """Give each person present in ``stream`` :data:`BUSY_FACTS` more everyday facts (``services.add_fact``, the
    scale store's own sentence shapes without a slot: likes, habits, pets, plans). The store's groups have six
    recent speakers with 40–80 facts between them, so no turn of it can gather 100 candidates; a group whose
    people have been talked about for longer can. Returns how many facts were added."""
    from bench.build_db import FACT_SHAPES
    from memory import recall, services
    from memory.models import Message, Person

    rng = random.Random(33)
    shapes = [(make, kind) for _, make, kind, slot in FACT_SHAPES if not slot]
    last = Message.objects.filter(stream=stream).order_by("-id").values_list("id", flat=True).first() or 0
    persons = recall.present_persons(stream_id=stream.pk, speaker_id=speaker, before_id=last + 1)
    added = 0
    for person in Person.objects.filter(pk__in=persons):
        name = person.display_name or f"用户{person.pk}"
        for i in range(BUSY_FACTS):
            make, kind = shapes[i % len(shapes)]
            services.add_fact(person_id=person.pk, content=make(rng, name), kind=kind, at=now - (i + 1) * 3_600_000)
            added += 1
    return added


def seed_inspected_turn(stream, speaker: int, now: int) -> tuple[int, int]:
    """A group turn whose recorded pool holds at least 100 candidates (the turn inspector's bench): the everyday
    question above, asked in the first group stream (its people given more facts by :func:`seed_busy_group`)
    and recorded through ``prepare_turn`` + ``confirm_turn`` under a profile with a prompt of 34 facts (a pool of
    ``limit × 3`` per query). ``(turn id, pool size)``."""
    from memory import recall
    from memory.overrides import overrides_scope

    with overrides_scope({"fact_recall_limit": 34}):
        ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=speaker, text=INSPECTED_TEXT, at=now)
        recall.confirm_turn(turn_id=ctx.turn_id, at=now + 1000)
    return ctx.turn_id, len(ctx.pool)


def timed(client, url: str, n: int) -> dict:
    """Wall and CPU time of ``n`` requests (after one warm-up): median and p95 of each, ms. The CPU time is
    this process's (the request runs in it from middleware to template): on a machine shared with other work
    the wall time carries the waits for a core, the CPU time does not."""
    client.get(url)
    samples, cpu = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        response = client.get(url)
        samples.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    samples.sort()
    cpu.sort()
    p95 = int(0.95 * (n - 1))
    return {"median_ms": round(statistics.median(samples), 1), "p95_ms": round(samples[p95], 1),
            "cpu_median_ms": round(statistics.median(cpu), 1), "cpu_p95_ms": round(cpu[p95], 1)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=str(ROOT / "bench" / ".cache" / "scale.sqlite3"))
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args(argv)
    if not Path(args.db).exists():
        raise SystemExit(f"{args.db} is missing: run `python -m bench.build_db` (or `make bench`) first")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "console.sqlite3"
        shutil.copy(args.db, copy)
        prepare(copy)
        from django.contrib.auth.models import User
        from django.test import Client

        from memory.models import Message, Stream

        now = 1_800_000_000_000
        seed_curation(now)
        User.objects.create_superuser("bench", password="bench-password")
        client = Client()
        client.login(username="bench", password="bench-password")
        stream = Stream.objects.filter(kind="group").order_by("id").first()
        speaker = Message.objects.filter(stream=stream, sender_person__isnull=False).values_list(
            "sender_person_id", flat=True).first()
        busy = seed_busy_group(stream, speaker, now)
        turn_id, pool = seed_inspected_turn(stream, speaker, now)
        if pool < INSPECTED_POOL:
            raise SystemExit(f"the inspected turn's pool holds {pool} candidates, fewer than {INSPECTED_POOL}")
        pages = {
            "fact list": "/facts/",
            "fact list, filtered (state=active, kind=偏好)": "/facts/?state=active&kind=%E5%81%8F%E5%A5%BD",
            "fact search with score breakdown": "/facts/?q=%E4%BD%A0%E8%BF%98%E8%AE%B0%E5%BE%97%E6%88%91%E5%96%9C%E6%AC%A2%E5%90%83%E4%BB%80%E4%B9%88%E5%90%97",
            "conflicts queue": "/curation/conflicts/",
            "operations log": "/curation/operations/",
            "association graph (200 nodes)": "/graph/?max_nodes=200",
            "recall playground": f"/playground/?stream={stream.pk}&speaker={speaker}&text=%E6%88%91%E4%BD%8F%E5%9C%A8%E5%93%AA%E9%87%8C",
            "dashboard": "/",
            "turn list": "/turns/",
            f"turn inspector ({pool}-candidate pool; target p95 ≤ 100 ms)": f"/turns/{turn_id}/",
        }
        load = os.getloadavg()[0]
        results = {name: timed(client, url, args.n) for name, url in pages.items()}
        load = round(max(load, os.getloadavg()[0]), 1)
    out = {"when": time.strftime("%Y-%m-%d %H:%M"), "target_p95_ms": 150, "inspector_target_p95_ms": 100,
           "cpus": os.cpu_count(), "load_average": load,
           "inspected_pool": pool, "inspected_group_facts_added": busy, "pages": results}
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "console.json").write_text(json.dumps(out, ensure_ascii=False, indent=2))
    print(f"load average {load} on {os.cpu_count()} CPUs")
    print("| console page (scale DB) | median ms | p95 ms | CPU median ms | CPU p95 ms |\n| --- | ---: | ---: | ---: | ---: |")
    for name, r in results.items():
        print(f"| {name} | {r['median_ms']} | {r['p95_ms']} | {r['cpu_median_ms']} | {r['cpu_p95_ms']} |")
    return out


if __name__ == "__main__":
    main()
