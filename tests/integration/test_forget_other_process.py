"""Another web process stops finding a forgotten person within a second; Redis holds nothing of them.

Two gunicorn servers (``config/gunicorn.py``, one worker each: two processes with their own
resident indexes) share the suite's store and Redis (enqueueing on, the shared activation in
Redis). Both are warmed: inspect loads their message statistics and the stream's postings,
recall their fact BM25, node texts and activation. The person is forgotten through server A;
server B must then answer inspect with the scores a cold process computes (its statistics no
longer count the forgotten rows) and recall without any of their facts. Then every key of
the Redis database is read (Celery's queued messages decoded) for their words and tokens, and
the activation set for the deleted graph nodes.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from memory.privacy.forget import REDACTED, REDACTED_SUMMARY
from memory.search.activation import KEY as ACTIVATION_KEY
from tests import dbenv
from tests.forget_scan import needles
from tests.integration.test_worker import ROOT, poll, redis_test_db  # noqa: F401 (fixture)
from tests.redis_url import TEST_REDIS_URL

pytestmark = pytest.mark.integration

SECRETS = ["我住在麒麟巷饕餮楼七号，离公园很近", "我的暗号是鹦鹉螺吞琥珀", "周末我常去公园喂孔雀和鸵鸟"]
FACTS = ["住在麒麟巷饕餮楼", "暗号是鹦鹉螺吞琥珀"]
BOB = ["今天天气不错，我们去公园散步吧", "公园里的湖边可以钓鱼", "周末一起去公园跑步怎么样"]
S = {"platform": "qq", "kind": "group", "external_id": "g-forget-it", "name": "遗忘测试群"}
ALICE = {"platform": "qq", "external_id": "qilin-parrot", "name": "琥珀鹦鹉"}
BOB_REF = {"platform": "qq", "external_id": "bob-it", "name": "鲍勃"}
QUERY = "公园 麒麟 鹦鹉螺 孔雀 跑步 湖边"

COLD = r"""
import json, sys, django
django.setup()
from django.test import Client
r = Client().post("/api/v1/actions/inspect", json.dumps(json.loads(sys.argv[2])), content_type="application/json",
                  headers={"Authorization": f"Bearer {sys.argv[1]}"})
assert r.status_code == 200, r.content
print(json.dumps(r.json()))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = _free_port()
        self.log = log
        handle = open(log, "ab")
        self.process = subprocess.Popen(
            [str(Path(sys.executable).with_name("gunicorn")), "-c", "config/gunicorn.py", "config.wsgi",
             "--bind", f"127.0.0.1:{self.port}", "--workers", "1"],
            cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )
        handle.close()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def call(self, token: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/v1/{path}", data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="GET" if body is None else "POST",
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture
def env(tmp_path, redis_test_db) -> dict[str, str]:  # noqa: F811
    values = dict(os.environ)
    values.update(
        DJANGO_SETTINGS_MODULE="config.settings", MEMORY_DB=str(tmp_path / "memory.sqlite3"), REDIS_URL=TEST_REDIS_URL,
        MEMORY_ENQUEUE_TASKS="1", EMBEDDING_PROVIDER="none", LLM_BASE_URL="", LLM_MODEL="", PYTHONPATH=str(ROOT),
        SHORT_TERM_ACTIVATION="redis",
    )
    dbenv.migrated_store(values)
    values["_TMP"] = str(tmp_path)
    return values


def _token(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "manage.py", "create_api_token", "forget-it", "--scope", "admin"], cwd=ROOT,
                         env=env, capture_output=True, text=True, check=True, timeout=60).stdout
    return out.strip().splitlines()[-1]


def _redis_values(client: redis.Redis) -> dict[str, bytes]:
    """Every key's content as bytes, Celery's base64 message bodies decoded."""
    out: dict[str, bytes] = {}
    for key in client.scan_iter(count=500):
        kind = client.type(key).decode()
        if kind == "string":
            parts = [client.get(key) or b""]
        elif kind == "list":
            parts = client.lrange(key, 0, -1)
        elif kind == "set":
            parts = list(client.smembers(key))
        elif kind == "zset":
            parts = [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "hash":
            parts = [b for pair in client.hgetall(key).items() for b in pair]
        elif kind == "stream":
            parts = [json.dumps([[k.decode(), {a.decode(): b.decode() for a, b in v.items()}]
                                 for k, v in client.xrange(key)]).encode()]
        else:
            parts = []
        blob = b"\n".join(parts)
        for part in parts:
            try:
                message = json.loads(part)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(message, dict) and isinstance(message.get("body"), str):
                try:
                    blob += b"\n" + base64.b64decode(message["body"])
                except ValueError:
                    pass
        out[key.decode()] = blob
    return out


def test_another_web_process_drops_the_forgotten_person_within_a_second(env, redis_test_db):  # noqa: F811
    token = _token(env)
    tmp = Path(env["_TMP"])
    a, b = Server(env, tmp / "a.log"), Server(env, tmp / "b.log")
    try:
        assert poll(lambda: a.ready() and b.ready(), 90, 0.3), (a.log.read_text()[-3000:], b.log.read_text()[-3000:])
        at = 1_700_000_000_000
        for i in range(3):
            for secret, bob in zip(SECRETS, BOB, strict=True):
                at += 60_000
                alice = a.call(token, "messages", {"stream": S, "sender": ALICE, "role": "user",
                                                   "content": f"{secret}（{i}）", "at": at})["person_id"]
                b.call(token, "messages", {"stream": S, "sender": BOB_REF, "role": "user", "content": f"{bob}（{i}）",
                                           "at": at + 1})
        for fact in FACTS:
            a.call(token, "facts", {"person": ALICE, "content": fact, "kind": "身份", "at": at})
        b.call(token, "facts", {"person": BOB_REF, "content": "喜欢去公园散步", "kind": "偏好", "at": at})
        inspect = {"stream": S, "query": QUERY, "limit": 20}
        recall = {"stream": S, "speaker": BOB_REF, "query": "麒麟巷 鹦鹉螺 暗号 住在哪", "cross_person": True, "at": at}
        for server in (a, b):  # both warm: statistics, the stream's postings, fact BM25, node texts
            hits = server.call(token, "actions/inspect", inspect)["messages"]
            assert any(h["person_id"] == alice for h in hits) and any(h["person_id"] != alice for h in hits)
            found = server.call(token, "actions/recall", recall)
            assert {f["content"] for f in found["facts"]} >= set(FACTS), found["facts"]
        nodes = [r[0] for r in dbenv.query(env, "SELECT n.id FROM memory_nodes n JOIN facts f ON n.ref_kind = 'fact'"
                                                " AND n.ref_id = f.id WHERE f.person_id = ?", (alice,))]
        assert nodes and set(map(str, nodes)) <= {m.decode() for m in redis_test_db.zrange(ACTIVATION_KEY, 0, -1)}

        preview = a.call(token, "forget/preview", {"target": "person", "id": alice})
        a.call(token, "forget", {"target": "person", "id": alice, "digest": preview["digest"]})
        forgotten_at = time.monotonic()

        def b_is_clean() -> bool:
            hits = b.call(token, "actions/inspect", inspect)["messages"]
            facts = b.call(token, "actions/recall", recall)
            text = json.dumps(facts, ensure_ascii=False)
            return not any(h["person_id"] == alice for h in hits) and not any(f in text for f in FACTS)

        assert poll(b_is_clean, 1.0, 0.05)
        print(f"server B clean {time.monotonic() - forgotten_at:.3f} s after the forget returned")
        # B's statistics are a fresh load's: a cold process scores the remaining messages the same
        cold = subprocess.run([sys.executable, "-c", COLD, token, json.dumps(inspect)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert cold.returncode == 0, cold.stderr[-3000:]
        want = [(h["id"], h["score"]) for h in json.loads(cold.stdout.strip().splitlines()[-1])["messages"]]
        for server in (b, a):
            got = [(h["id"], h["score"]) for h in server.call(token, "actions/inspect", inspect)["messages"]]
            assert [i for i, _ in got] == [i for i, _ in want] and len(want) >= 6
            assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-9)

        values = _redis_values(redis_test_db)
        assert values  # the queued tasks and the activation at least
        kept = [*BOB, "喜欢去公园散步", "遗忘测试群", "鲍勃", "bob-it", REDACTED, REDACTED_SUMMARY]
        looked_for = needles([*SECRETS, *FACTS, ALICE["name"], ALICE["external_id"]], kept)
        left = {key: [n for n in looked_for if n.encode() in blob or json.dumps(n)[1:-1].encode() in blob]
                for key, blob in values.items()}
        assert {k: v for k, v in left.items() if v} == {}
        assert not set(map(str, nodes)) & {m.decode() for m in redis_test_db.zrange(ACTIVATION_KEY, 0, -1)}
    finally:
        a.stop()
        b.stop()
