"""Client side of the worker integration tests, run as a separate process.

``python -m tests.integration.driver post --stream EXT --kind direct --n 60 [--start 0]``
posts messages through the HTTP API (Django's test client, real views, real
``append_message`` with its on-commit enqueue) against the database named by
``MEMORY_DB`` and the Redis named by ``REDIS_URL``; it prints the stored
message ids as JSON. It runs outside pytest so that nothing wraps the writes
in a test transaction: each message commits and enqueues exactly as in
production.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from tests.chat_lines import CHAT as LINES


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["post"])
    parser.add_argument("--stream", default="it-1")
    parser.add_argument("--kind", default="direct")
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--start", type=int, default=0)
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.test import Client

    from memory.api.auth import issue_token

    _, token = issue_token(f"integration-driver-{os.getpid()}")  # a live token's name is unique: one per run
    client = Client()
    headers = {"Authorization": f"Bearer {token}"}
    stream = {"platform": "it", "kind": args.kind, "external_id": args.stream, "name": args.stream}
    sender = {"platform": "it", "external_id": "10001", "name": "小明"}
    ids = []
    for i in range(args.start, args.start + args.n):
        if i % 4 == 3:
            body = {"stream": stream, "role": "assistant", "content": f"<say>好的，记住了（{i}）</say>"}
        else:
            body = {"stream": stream, "sender": sender, "role": "user", "content": LINES[i % len(LINES)]}
        body["external_message_id"] = f"{args.stream}-{i}"
        response = client.post("/api/v1/messages", data=json.dumps(body), content_type="application/json",
                                headers=headers)
        if response.status_code not in (200, 201):
            print(response.status_code, response.content.decode(), file=sys.stderr)
            return 1
        ids.append(response.json()["id"])
    print(json.dumps(ids))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
