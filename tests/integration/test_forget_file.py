"""Forgetting a person through the API removes their text from the database *file*.

A separate process (its own file database, real FTS5 tables, the heuristic
summariser and extractor, the API through Django's handler) stores distinctive
sentences, summarises, extracts, runs a turn, previews and forgets the person,
then checkpoints the WAL and VACUUMs. The test compares the preview's counts with
the rows that went and searches the raw bytes of the file for the sentences.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memory.privacy.forget import REDACTED, REDACTED_SUMMARY
from tests import dbenv
from tests.forget_scan import needles
from tests.integration.test_worker import ROOT

pytestmark = pytest.mark.integration

SECRETS = ["我住在翡翠湾七十七号楼", "我的暗号是蓝鲸吞月亮", "我喜欢在凌晨三点吃榴莲披萨"]

SCRIPT = r"""
import json, sys, django
django.setup()
from django.db import connection
from django.test import Client
from memory import pipeline
from memory.api.auth import issue_token
from memory.providers.heuristic import HeuristicExtractor, HeuristicSummariser

SECRETS = json.loads(sys.argv[1])
_, token = issue_token("privacy", ["bot", "forget"])
client, headers = Client(), {"Authorization": f"Bearer {token}"}

def post(path, body, status=None):
    r = client.post("/api/v1/" + path, json.dumps(body), content_type="application/json", headers=headers)
    assert r.status_code < 300 if status is None else r.status_code == status, (path, r.status_code, r.content)
    return r.json()

S = {"platform": "qq", "kind": "group", "external_id": "g-privacy", "name": "隐私测试群"}
ALICE = {"platform": "qq", "external_id": "alice-77", "name": "爱丽丝"}
BOB = {"platform": "qq", "external_id": "bob-12", "name": "鲍勃"}
at = 1_700_000_000_000
def say(who, text):
    global at
    at += 60_000
    body = {"stream": S, "role": "user" if who else "assistant", "content": text, "at": at}
    if who:
        body["sender"] = who
    return post("messages", body)

alice = None
for round_ in range(3):
    for secret in SECRETS:
        alice = say(ALICE, f"{secret}。真的{round_}")["person_id"]
        say(BOB, f"今天天气不错，我们去公园散步吧{round_}")
        say(None, f"好的，我记住了：{secret}")
say(BOB, "爱丽丝说过我的暗号是蓝鲸吞月亮，好有趣")
post("facts", {"person": ALICE, "content": "住在翡翠湾七十七号楼", "kind": "身份", "at": at})
post("facts", {"person": BOB, "content": "喜欢去公园散步", "kind": "偏好", "at": at})
stream_id = None
from memory.models import Stream
stream_id = Stream.objects.get(external_id="g-privacy").pk
for _ in range(6):
    pipeline.summarize_stream(stream_id=stream_id, summariser=HeuristicSummariser(), at=at)
    pipeline.extract_stream(stream_id=stream_id, extractor=HeuristicExtractor(), at=at)
turn = post("turns", {"stream": S, "speaker": ALICE, "text": SECRETS[2], "impression": SECRETS[0], "at": at})

TABLES = ["messages", "facts", "episodes", "episode_cues", "knowledge", "memory_nodes", "memory_edges", "turns",
          "pipeline_events", "fact_operations", "identities", "persons"]
def counts():
    with connection.cursor() as cur:
        out = {}
        for t in TABLES:
            cur.execute(f"SELECT count(*) FROM {t}")
            out[t] = cur.fetchone()[0]
        return out

def holding():
    like = " OR ".join(["content LIKE %s"] * len(SECRETS))
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM messages WHERE {like}", [f"%{s}%" for s in SECRETS])
        return cur.fetchone()[0]

preview = post("forget/preview", {"target": "person", "id": alice})
before, held = counts(), holding()
bot_refused = None
_, bot_only = issue_token("bot-only", ["bot"])
r = client.post("/api/v1/forget", json.dumps({"target": "person", "id": alice}), content_type="application/json",
                headers={"Authorization": f"Bearer {bot_only}"})
bot_refused = r.status_code
done = post("forget", {"target": "person", "id": alice, "digest": preview["digest"]})
after = counts()
bob_lines = list(__import__("memory.models", fromlist=["Message"]).Message.objects
                 .filter(sender_person__identities__external_id="bob-12").values_list("content", flat=True))
with connection.cursor() as cur:
    cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cur.execute("VACUUM")
    cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
print(json.dumps({"preview": preview, "done": done, "before": before, "after": after, "held": held,
                  "bot_refused": bot_refused, "bob": bob_lines, "turn": turn["turn_id"]}, ensure_ascii=False))
"""


@pytest.mark.sqlite_only("reads the bytes of the SQLite file (PostgreSQL: dead tuples go at vacuum, docs/DEPLOY.md)")
def test_forgetting_a_person_removes_their_text_from_the_database_file(tmp_path):
    db = tmp_path / "memory.sqlite3"
    env = dict(os.environ)
    env.update(DJANGO_SETTINGS_MODULE="config.settings", MEMORY_DB=str(db), MEMORY_ENQUEUE_TASKS="0",
               EMBEDDING_PROVIDER="none", PYTHONPATH=str(ROOT), SUMMARIZE_TRIGGER_MESSAGES="8",
               SUMMARIZE_BATCH_MESSAGES="8", FACT_EXTRACT_TRIGGER_MESSAGES="6", FACT_EXTRACT_BATCH_MESSAGES="12")
    dbenv.migrated_store(env)
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(SECRETS)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    counts, before, after = out["preview"]["counts"], out["before"], out["after"]
    print(json.dumps(counts))

    assert out["bot_refused"] == 403
    assert out["held"] > 0 and counts["messages"] == 9
    assert counts["episodes"] + counts["redacted_episodes"] > 0 and counts["cues"] > 0
    assert counts["facts"] >= 1 and counts["turns"] == 1 and counts["redacted_messages"] >= 10
    assert out["done"]["counts"] == counts and out["done"]["undoable"] is False
    removed = {t: before[t] - after[t] for t in before}
    assert removed == {
        "messages": counts["messages"], "facts": counts["facts"], "episodes": counts["episodes"],
        "episode_cues": counts["cues"], "knowledge": counts["knowledge"], "memory_nodes": counts["nodes"],
        "memory_edges": counts["edges"], "turns": counts["turns"], "pipeline_events": counts["events"],
        "fact_operations": counts["operations"], "identities": counts["identities"],
        "persons": counts["persons"],
    }
    assert any("今天天气不错" in line for line in out["bob"])  # Bob's own words stay
    assert any("〔已遗忘〕" in line for line in out["bob"])  # his quote of Alice is redacted

    data = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("memory.sqlite3"))
    for secret in SECRETS:
        assert secret.encode("utf-8") not in data, secret
    # nor their index tokens (the change log kept them, space-separated: enough to rebuild each sentence)
    kept = ["今天天气不错，我们去公园散步吧", "爱丽丝说过，好有趣", "好的，我记住了：", "喜欢去公园散步", "隐私测试群", "爱丽丝",
            "鲍勃", REDACTED, REDACTED_SUMMARY]
    tokens = [n for n in needles(SECRETS, kept) if n not in SECRETS]
    assert len(tokens) >= 20
    left = [t for t in tokens if t.encode("utf-8") in data or json.dumps(t)[1:-1].encode() in data]
    assert left == [], left
    for word in ("翡翠湾七十七号楼", "蓝鲸吞月亮", "榴莲披萨", "alice-77"):  # (Bob still says her name)
        assert word.encode("utf-8") not in data, word
