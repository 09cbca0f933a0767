"""What one message edit or delete costs the next search of a process: the resident message statistics' refresh.

An inspect search first brings the process's resident message statistics
(``memory/search/lexical_index.py``, ``ResidentMessages``) up to the committed rows. Appends are
cheap; this measures the refresh after a message edit (``update_message_content``) and
after a message delete, on an existing store — wall time and this process's CPU time,
and whether the statistics were reloaded (``rebuilds``) — next to the first load.

It WRITES (edits and deletes messages): run it on a throwaway copy of a store.

    DATABASE_URL=postgres://…/<copy> python -m bench.message_edit_bench [--rounds 5]
    MEMORY_DB=/tmp/<copy>.sqlite3 python -m bench.message_edit_bench
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time


def _timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("MEMORY_ENQUEUE_TASKS", "False")
    import django  # configured by the environment above, so imported here

    django.setup()
    # Django is set up only now: these read settings when imported
    from django.db import connection

    from memory import services
    from memory.models import Message
    from memory.search import lexical, lexical_index

    rng = random.Random(args.seed)
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM messages WHERE tokens <> ''")
        (indexed,) = cur.fetchone()
        cur.execute("SELECT stream_id FROM messages GROUP BY stream_id HAVING count(*) >= 20 ORDER BY stream_id")
        streams = [r[0] for r in cur.fetchall()]
    out: dict = {"backend": connection.vendor, "indexed_messages": indexed, "load_avg_start": os.getloadavg()[0]}

    def search(stream_id: int) -> None:
        lexical.message_candidates(lexical.match_for("messages_fts", "今天 晚上 一起"), stream_id=stream_id, limit=6)

    out["first_load_ms"], out["first_load_cpu_ms"] = _timed(lambda: lexical_index.resident_messages())
    index = lexical_index.resident_messages()
    rows: dict[str, list[tuple[float, float, int]]] = {"edit": [], "delete": [], "nothing new": []}
    for _ in range(args.rounds):
        stream_id = rng.choice(streams)
        search(stream_id)  # the stream's postings resident, as for a stream being talked in
        ids = list(Message.objects.filter(stream_id=stream_id).exclude(tokens="").values_list("id", flat=True))
        edit, gone = rng.sample(ids, 2)
        message = Message.objects.get(pk=edit)
        services.update_message_content(message_id=edit, content=f"{message.content} 改过了")
        before = index.rebuilds
        rows["edit"].append((*_timed(lambda: lexical_index.resident_messages()), index.rebuilds - before))
        Message.objects.filter(pk=gone).delete()
        before = index.rebuilds
        rows["delete"].append((*_timed(lambda: lexical_index.resident_messages()), index.rebuilds - before))
        before = index.rebuilds
        rows["nothing new"].append((*_timed(lambda: lexical_index.resident_messages()), index.rebuilds - before))
        search(stream_id)
    for name, got in rows.items():
        out[f"refresh after {name}"] = {
            "median_ms": round(statistics.median(g[0] for g in got), 2),
            "median_cpu_ms": round(statistics.median(g[1] for g in got), 2),
            "max_ms": round(max(g[0] for g in got), 2),
            "reloads": sum(g[2] for g in got), "rounds": len(got),
        }
    out["first_load_ms"] = round(out["first_load_ms"], 1)
    out["first_load_cpu_ms"] = round(out["first_load_cpu_ms"], 1)
    out["load_avg_end"] = os.getloadavg()[0]
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
