"""Retrieval quality lived through the HTTP API (``make eval`` runs it after ``bench.eval``).

The product runs as deployed, in a temporary directory: its own SQLite file (or the empty
PostgreSQL database ``--database-url`` names: the test suite on PostgreSQL passes a throwaway one), ``migrate``,
``gunicorn -c config/gunicorn.py config.wsgi`` (2 workers) on a free localhost port, a real ``celery
worker`` (2 processes) with the same settings, a bearer token from ``manage.py
create_api_token``. Only the database path, the Redis database (``--redis-url``, flushed
before and after; never DB 0), ``DJANGO_DEBUG=False`` and the log level are set; every
other setting is the default — task enqueueing on, local USE embeddings, no LLM (the
heuristic summariser and extractor). This process only talks HTTP to it, reads the
database to know when the worker is idle, and computes the baselines.

* LoCoMo: one ``direct`` stream per conversation; its turns posted in order as messages
  (``POST /api/v1/messages``) at their session's date, ``TURN_GAP_MS`` apart; each
  session's observations posted as facts of their speaker (``POST /api/v1/facts``, kind
  事件, heard in a direct stream, ``source_message_id`` its first evidence turn) dated at the session's end. After the worker is idle,
  every question with evidence is a turn (``POST /api/v1/turns`` then ``…/confirm`` with
  no embedding: the server embeds) one day after the last session, asked by one of the
  two speakers, default profile. A confirmed prompt fact covers the evidence ids of the
  observations posted into it (facts the worker extracted cover nothing). Baselines
  over the same observation fact rows and questions: bm25s and dense-only (same USE model).
* MemDaily: the haystacks of :mod:`bench.eval_memdaily` posted as messages dated as the
  data set dates them; every question through ``POST /api/v1/actions/inspect`` (once per
  cut-off k: inspect returns its top-k set), gold = messages of ``target_step_id`` by
  normalised text; baselines bm25s and dense-only over the same messages. Diagnostic: the
  question as a turn over the facts the worker extracted (a fact covers the messages whose
  own extraction yields the same text).

    python -m bench.eval_api                                   # 10 conversations + 12 MemDaily haystacks
    python -m bench.eval_api --conversations 1 --questions 10 --memdaily-haystacks 1 --memdaily-questions 5
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import numpy as np

from bench.common import (
    KS,
    RESULTS_DIR,
    Log,
    Server,
    add_evaluation_arguments,
    dia_ids,
    evaluation_main,
    latency_stats,
    load_memdaily,
    mean_rows,
    measured,
    recall_at,
    score_question,
    stop_process_group,
    tree_cpu_seconds,
)

if TYPE_CHECKING:
    from memory.providers import Embedder

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- eval-api:start -->", "<!-- eval-api:end -->"
DEFAULT_REDIS = os.environ.get("MEMORY_EVAL_REDIS_URL", "redis://127.0.0.1:6379/14")
TURN_GAP_MS = 5_000  # between two turns of a session
QUESTION_GAP_MS = 10_000  # between two questions
DAY_MS = 86_400_000
INGEST_THREADS = 4
QUERY_THREADS = 2  # = gunicorn workers
RATIO_TARGET = 1.05
TABLE_KEYS = ("R@1", "R@3", "R@5", "nDCG@5")
# settings a deployment would not inherit from this shell: the product defaults apply
PRODUCT_KEYS = (
    "MEMORY_ENQUEUE_TASKS", "EMBEDDING_PROVIDER", "EMBEDDING_BASE_URL", "EMBEDDING_MODEL", "EMBEDDING_API_KEY",
    "LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY", "DJANGO_SETTINGS_MODULE", "MEMORY_DB", "REDIS_URL", "DATABASE_URL",
)


# --- the deployment ---------------------------------------------------------------------------


class Deployment:
    """gunicorn + a celery worker on a fresh SQLite file in ``folder`` (or ``database_url``), Redis at ``redis_url``."""

    def __init__(self, folder: Path, redis_url: str, *, log: Callable[[str], None], profile: dict | None = None,
                 database_url: str = "", embedding_provider: str = "", scopes: Sequence[str] = ()):
        db_number = int((urlparse(redis_url).path or "/0").lstrip("/") or 0)
        if db_number == 0:
            raise SystemExit("the API evaluation flushes its Redis database: give it one other than DB 0")
        self.folder, self.redis_url, self.log, self.profile = folder, redis_url, log, profile
        self.scopes = ["bot", *scopes, *(["tuning"] if profile and "tuning" not in scopes else [])]
        self.db = folder / "memory.sqlite3"
        env = {k: v for k, v in os.environ.items() if k not in PRODUCT_KEYS}
        env.update(DJANGO_SETTINGS_MODULE="config.settings", MEMORY_DB=str(self.db), REDIS_URL=redis_url,
                   DJANGO_DEBUG="False", LOG_LEVEL="WARNING", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        if database_url:  # never inherited: a deployment's DATABASE_URL in this shell must not be written to
            env["DATABASE_URL"] = database_url
        if embedding_provider:  # a diagnostic deployment ("none": the lexical-only product)
            env["EMBEDDING_PROVIDER"] = embedding_provider
        self.embeds = embedding_provider != "none"
        env.setdefault("JIEBA_CACHE", str(Path(tempfile.gettempdir()) / "memory-console-jieba.cache"))
        self.env = env
        self.server = None
        self.worker: subprocess.Popen | None = None
        self.token = ""

    def redis(self):
        import redis

        return redis.Redis.from_url(self.redis_url)

    def start(self) -> None:
        self.redis().flushdb()
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=self.env, check=True)
        # a bot's token; a diagnostic run with --profile also applies a retrieval profile
        scopes = [arg for scope in self.scopes for arg in ("--scope", scope)]
        out = subprocess.run([*manage, "create_api_token", "eval-api", *scopes], cwd=ROOT, env=self.env, check=True,
                             capture_output=True, text=True)
        self.token = out.stdout.strip().splitlines()[-1]
        celery = str(Path(sys.executable).with_name("celery"))
        self.worker_log = open(self.folder / "worker.log", "wb")  # noqa: SIM115 — closed in stop()
        self.worker = subprocess.Popen(
            [celery, "-A", "config", "worker", "-n", f"evalapi{os.getpid()}@%h", "--concurrency=2",
             "--loglevel=WARNING", "--without-mingle", "--without-gossip"],
            cwd=ROOT, env=self.env, stdout=self.worker_log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.server = Server(self.env, workers=2)
        self.server.wait_ready(timeout=180)  # returns when it answers (seconds alone; 60 s ran out at load 10)
        self.log(f"deployed: gunicorn {self.server.base} (2 workers), celery worker pid {self.worker.pid}, "
                 f"db {'PostgreSQL' if 'DATABASE_URL' in self.env else self.db}, redis {self.redis_url}")

    def settings(self) -> dict:
        """What the deployed processes read (this process is configured the same way)."""
        from django.conf import settings
        from django.db import connection

        return {
            "database": connection.vendor,
            "MEMORY_ENQUEUE_TASKS": settings.MEMORY_ENQUEUE_TASKS,
            "EMBEDDING_PROVIDER": settings.EMBEDDING_PROVIDER,
            "LLM": "configured" if settings.LLM_BASE_URL and settings.LLM_MODEL else "none (heuristic summariser/extractor)",
            "DEBUG": settings.DEBUG,
            "FACT_RECALL_LIMIT": settings.FACT_RECALL_LIMIT,
            "server": "gunicorn -c config/gunicorn.py config.wsgi, 2 workers",
            "worker": "celery -A config worker --concurrency=2",
        }

    def setup_django(self) -> None:
        """Point this process at the deployed database (read-only use: the idle check)."""
        os.environ.update({k: self.env[k] for k in ("DJANGO_SETTINGS_MODULE", "MEMORY_DB", "REDIS_URL", "DJANGO_DEBUG",
                                                      "LOG_LEVEL", "JIEBA_CACHE", "DATABASE_URL", "EMBEDDING_PROVIDER")
                           if k in self.env})
        for key in PRODUCT_KEYS:
            if key not in self.env:
                os.environ.pop(key, None)
        import django

        django.setup()

    def backlog(self) -> dict:
        """Work the worker still has: due streams, rows without a vector, tasks queued or running."""
        from django.db import connection

        from memory.dispatch import triggers
        from memory.dispatch.enqueue import LOCK_PREFIX, QUEUED_PREFIX
        from memory.models import Fact, Knowledge

        r = self.redis()
        out = {
            "due_streams": len(triggers.streams_due()),
            "null_vectors": Fact.objects.filter(embedding__isnull=True).count()
            + Knowledge.objects.filter(embedding__isnull=True).count() if self.embeds else 0,
            "queued_tasks": r.llen("celery") + r.hlen("unacked"),
            "locks": sum(1 for _ in r.scan_iter(f"{LOCK_PREFIX}*")) + sum(1 for _ in r.scan_iter(f"{QUEUED_PREFIX}*")),
        }
        connection.close()
        return out

    def counts(self) -> dict:
        from django.db import connection

        from memory.models import Episode, Fact, Message

        out = {"messages": Message.objects.count(), "episodes": Episode.objects.count(), "facts": Fact.objects.count()}
        connection.close()
        return out

    def wait_idle(self, timeout: float) -> dict:
        t0 = time.perf_counter()
        quiet, state = 0, {}
        while time.perf_counter() - t0 < timeout:
            if self.worker is not None and self.worker.poll() is not None:
                raise RuntimeError(f"the celery worker exited with {self.worker.returncode} (see {self.worker_log.name})")
            state = self.backlog()
            quiet = quiet + 1 if not any(state.values()) else 0
            if quiet >= 3:  # three quiet polls in a row: nothing is queued, running or due
                break
            time.sleep(0.5)
        return {"idle": quiet >= 3, "seconds": round(time.perf_counter() - t0, 1), "backlog": state}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of the web server and of the worker (each with its child processes)."""
        return {"server": self.server.cpu_seconds(), "worker": tree_cpu_seconds(self.worker.pid),
                "harness": time.process_time()}

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.worker is not None:
            stop_process_group(self.worker)
            self.worker_log.close()
        try:
            self.redis().flushdb()
        except Exception:  # noqa: BLE001 — cleanup must not hide the real error
            pass


class Client:
    """One HTTP client per thread; latencies per route; errors counted, never raised mid-run."""

    def __init__(self, base: str, token: str):
        self.base, self.token = base, token
        self.local = threading.local()
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []

    def post(self, route: str, path: str, body: dict) -> dict | None:
        import httpx

        client = getattr(self.local, "client", None)
        if client is None:
            client = self.local.client = httpx.Client(
                base_url=self.base, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)
        t = time.perf_counter()
        try:
            r = client.post(path, json=body)
        except httpx.HTTPError as exc:
            with self.lock:
                self.errors.append(f"{route}: {exc!r}")
            return None
        ms = (time.perf_counter() - t) * 1000
        with self.lock:
            self.latency[route].append(ms)
            if r.status_code not in (200, 201):
                self.errors.append(f"{route} {r.status_code} {r.text[:200]}")
                return None
        return r.json()


# --- LoCoMo -------------------------------------------------------------------------------------


@dataclass
class LocomoConv:
    sample_id: str
    speakers: list[str]
    questions: list[dict]
    ask_at: int
    turns: int = 0
    observations: int = 0
    fact_evidence: dict[int, set[str]] = field(default_factory=dict)
    fact_text: dict[int, str] = field(default_factory=dict)


def locomo_refs(sid: str, speakers: Sequence[str]) -> tuple[dict, dict[str, dict]]:
    stream = {"platform": "locomo", "kind": "direct", "external_id": sid, "name": f"{sid} {' & '.join(speakers)}"}
    return stream, {n: {"platform": "locomo", "external_id": f"{sid}:{n}", "name": n} for n in speakers}


def asker(question: str, speakers: Sequence[str]) -> str:
    """The speaker who asks: the other one when the question names exactly one of them, else the first."""
    named = [s for s in speakers if s.lower() in question.lower()]
    if len(named) == 1:
        return next((s for s in speakers if s != named[0]), speakers[0])
    return speakers[0]


def locomo_questions(raw: dict, sessions: Sequence[int], max_questions: int | None) -> list[dict]:
    """The questions with evidence whose evidence lies in ``sessions`` (all of a full conversation)."""
    from bench.eval_locomo import questions_with_evidence

    kept = {str(s) for s in sessions}
    questions = [q for q in questions_with_evidence(raw)
                 if all(d.split(":")[0][1:] in kept for d in dia_ids(q["evidence"]))]
    return questions[:max_questions] if max_questions else questions


def post_locomo(raw: dict, client: Client, max_questions: int | None, max_sessions: int | None = None) -> LocomoConv:
    from bench.eval_locomo import session_observations, session_times

    conv, sid = raw["conversation"], raw["sample_id"]
    speakers = [conv["speaker_a"], conv["speaker_b"]]
    stream, persons = locomo_refs(sid, speakers)
    times = session_times(conv)
    if max_sessions:
        times = dict(list(times.items())[:max_sessions])
    out = LocomoConv(sid, speakers, locomo_questions(raw, list(times), max_questions), ask_at=0)
    last_end = 0
    for s, start in times.items():
        turns = conv[f"session_{s}"]
        heard: dict[str, int] = {}  # the session's dialog ids → their messages (where its observations were heard)
        for j, turn in enumerate(turns):
            name = turn["speaker"]
            sender = persons.get(name) or {"platform": "locomo", "external_id": f"{sid}:{name}", "name": name}
            message = client.post("messages", "/api/v1/messages", {
                "stream": stream, "sender": sender, "role": "user", "content": turn["text"],
                "external_message_id": f"{sid}:{turn['dia_id']}:{j}", "at": start + j * TURN_GAP_MS,
            })
            if message:
                heard.setdefault(turn["dia_id"], message["id"])
            out.turns += 1
        end = start + len(turns) * TURN_GAP_MS
        last_end = max(last_end, end)
        for name, text, evidence in session_observations(raw, s, persons):
            out.observations += 1
            body = {"person": persons[name], "kind": "事件", "content": text, "stream_kind": "direct", "at": end}
            source = next((heard[e] for e in evidence if e in heard), None)  # its first evidence turn
            if source is not None:
                body["source_message_id"] = source
            written = client.post("facts", "/api/v1/facts", body)
            if not written:
                continue
            fid = written["fact_id"]
            out.fact_text.setdefault(fid, text)
            out.fact_evidence.setdefault(fid, set()).update(evidence)
    out.ask_at = last_end + DAY_MS
    return out


@dataclass
class Answer:
    """One LoCoMo question as the API answered it."""

    category: int
    gold: set[str]
    prepared: list[int] = field(default_factory=list)  # fact ids of POST /turns, in order
    confirmed: list[int] = field(default_factory=list)  # fact ids of …/confirm: the prompt, in order
    used_vector: bool = False


def ask_locomo(conv: LocomoConv, client: Client) -> list[Answer]:
    """Every question as a turn of one speaker, then confirmed (the server embeds the question)."""
    stream, persons = locomo_refs(conv.sample_id, conv.speakers)
    out = []
    for i, q in enumerate(conv.questions):
        at = conv.ask_at + i * QUESTION_GAP_MS
        answer = Answer(int(q.get("category", 0)), set(dia_ids(q["evidence"])))
        turn = client.post("turns", "/api/v1/turns", {
            "stream": stream, "speaker": persons[asker(q["question"], conv.speakers)], "text": q["question"], "at": at,
        })
        if turn:
            answer.prepared = [f["id"] for f in turn["facts"]]
            confirmed = client.post("confirm", f"/api/v1/turns/{turn['turn_id']}/confirm", {"at": at + 2_000})
            if confirmed:
                answer.confirmed = [f["id"] for f in confirmed["facts"]]
                answer.used_vector = bool(confirmed["used_vector"])
        out.append(answer)
    return out


LOCOMO_METHODS = {
    "ours_turn": "ours: POST /turns + confirm, default profile (prompt facts in order)",
    "bm25s_facts": "bm25s over the same observation facts, same tokens",
    "dense_only": "dense only: USE cosine over the same observation facts",
}
LOCOMO_DIAGNOSTICS = {
    "ours_prepare": "ours: POST /turns before confirm (lexical pool, no dense channel)",
}


def score_locomo(convs: Sequence[LocomoConv], answers: dict[str, list], embedder: Embedder) -> dict:
    from bench.eval_locomo import TOP, Bm25Units, dense_top, summarise

    rows: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    prompt_sizes, used_vector, per_question = [], 0, []
    for conv in convs:
        ids = list(conv.fact_text)
        texts = [conv.fact_text[i] for i in ids]
        bm = Bm25Units(texts)
        fvecs = np.vstack(embedder.embed(texts)).astype(np.float32)
        qvecs = [np.asarray(v, dtype=np.float32) for v in embedder.embed([q["question"] for q in conv.questions])]
        for q, qvec, a in zip(conv.questions, qvecs, answers[conv.sample_id], strict=True):
            units = {
                "ours_turn": [conv.fact_evidence.get(f, set()) for f in a.confirmed],
                "ours_prepare": [conv.fact_evidence.get(f, set()) for f in a.prepared],
                "bm25s_facts": [conv.fact_evidence[ids[i]] for i in bm.top(q["question"], TOP)],
                "dense_only": [conv.fact_evidence[ids[i]] for i in dense_top(fvecs, qvec, TOP)],
            }
            prompt_sizes.append(len(a.confirmed))
            used_vector += a.used_vector
            for name, us in units.items():
                rows[name].append((a.category, score_question(us, a.gold)))
            per_question.append({
                "conversation": conv.sample_id, "question": q["question"], "category": a.category,
                "gold": sorted(a.gold), "prompt_fact_ids": a.confirmed,
                "prompt_evidence": [sorted(u) for u in units["ours_turn"]],
                "R@5": rows["ours_turn"][-1][1]["R@5"], "bm25s_R@5": rows["bm25s_facts"][-1][1]["R@5"],
                "dense_R@5": rows["dense_only"][-1][1]["R@5"],
            })
    methods = {name: {"label": label, **summarise(rows[name])} for name, label in LOCOMO_METHODS.items()}
    diagnostics = {name: {"label": label, **summarise(rows[name])} for name, label in LOCOMO_DIAGNOSTICS.items()}
    return {"methods": methods, "diagnostics": diagnostics,
            "mean_prompt_facts": round(float(np.mean(prompt_sizes)), 2) if prompt_sizes else 0.0,
            "confirms_with_vector": used_vector, "per_question": per_question,
            "ratios": ratios(methods, "ours_turn", ("bm25s_facts", "dense_only"), "by_category")}


def ratios(methods: dict, ours: str, others: Sequence[str], group: str) -> dict:
    """ours/other at R@5, overall and per group (None where the baseline is 0)."""
    def r(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    out = {}
    for other in others:
        o, b = methods[ours], methods[other]
        out[other] = {
            "overall": r(o["overall"].get("R@5", 0.0), b["overall"].get("R@5", 0.0)),
            group: {g: r(o[group][g].get("R@5", 0.0), b[group][g].get("R@5", 0.0)) for g in o[group]},
        }
    return out


# --- MemDaily ------------------------------------------------------------------------------------


@dataclass
class MemdailyStack:
    index: int
    trajectories: list[tuple[str, dict]]
    ask_at: int = 0
    texts: list[str] = field(default_factory=list)  # as posted, in order
    questions: list[tuple[str, str, set[str]]] = field(default_factory=list)


def memdaily_refs(index: int) -> tuple[dict, dict]:
    return ({"platform": "memdaily", "kind": "direct", "external_id": f"haystack{index}"},
            {"platform": "memdaily", "external_id": f"user{index}", "name": "用户"})


def post_memdaily(stack: MemdailyStack, client: Client, max_questions: int | None) -> MemdailyStack:
    from bench.eval_memdaily import gold_questions, question_time_ms, timeline

    stream, person = memdaily_refs(stack.index)
    rows = timeline(stack.trajectories)
    for at, _order, mid, fname, tr, text in rows:
        client.post("messages", "/api/v1/messages", {
            "stream": stream, "sender": person, "role": "user", "content": text,
            "external_message_id": f"{fname}:{tr['tid']}:{mid}", "at": at,
        })
        stack.texts.append(text)
    stack.ask_at = question_time_ms(stack.trajectories, rows)
    questions = gold_questions(stack.trajectories)
    stack.questions = questions[:max_questions] if max_questions else questions
    return stack


def ask_memdaily(stack: MemdailyStack, client: Client) -> list[tuple[str, dict[int, set[str]], list[str]]]:
    """Per question: ``(question, {k: normalised texts inspect returned with limit k}, prompt fact texts)``."""
    from bench.eval_memdaily import norm

    stream, person = memdaily_refs(stack.index)
    out = []
    for i, (_fname, question, _gold) in enumerate(stack.questions):
        found = {}
        for k in KS:
            hit = client.post("inspect", "/api/v1/actions/inspect", {"stream": stream, "query": question, "limit": k})
            found[k] = {norm(m["content"]) for m in hit["messages"]} if hit else set()
        at = stack.ask_at + i * QUESTION_GAP_MS
        facts: list[str] = []
        turn = client.post("turns", "/api/v1/turns", {"stream": stream, "speaker": person, "text": question, "at": at})
        if turn:
            confirmed = client.post("confirm", f"/api/v1/turns/{turn['turn_id']}/confirm", {"at": at + 2_000})
            facts = [f["content"] for f in confirmed["facts"]] if confirmed else []
        out.append((question, found, facts))
    return out


MEMDAILY_METHODS = {
    "ours_inspect": "ours: POST /actions/inspect (limit k)",
    "bm25s_messages": "bm25s over the same messages, same tokens",
    "dense_messages": "dense only: USE cosine over the same messages",
}
MEMDAILY_DIAGNOSTICS = {
    "ours_turn_facts": "ours: POST /turns + confirm over the facts the worker extracted",
}


def fact_sources(texts: Sequence[str]) -> dict[str, set[str]]:
    """Normalised fact text → the normalised messages whose own extraction yields it (the offline extractor)."""
    from bench.eval_memdaily import norm
    from memory.providers import DialogueLine, Participant
    from memory.providers.heuristic import HeuristicExtractor

    extractor = HeuristicExtractor()
    participants = [Participant(external_id="user", name="用户", person_id=1)]
    out: dict[str, set[str]] = defaultdict(set)
    for text in texts:
        extraction = extractor.extract([DialogueLine("user", "user", "用户", text)], participants, [])
        for fact in extraction.facts if extraction else []:
            out[norm(fact.content)].add(norm(text))
    return out


def score_memdaily(stacks: Sequence[MemdailyStack], answers: dict[int, list], embedder: Embedder) -> dict:
    from bench.eval_locomo import TOP, Bm25Units, dense_top
    from bench.eval_memdaily import norm, question_type

    rows: dict[str, list[tuple[str, dict[str, float]]]] = defaultdict(list)
    for stack in stacks:
        msg_norm = [norm(t) for t in stack.texts]
        bm = Bm25Units(stack.texts)
        mvecs = np.vstack(embedder.embed(stack.texts)).astype(np.float32)
        qvecs = [np.asarray(v, dtype=np.float32) for v in embedder.embed([q for _, q, _ in stack.questions])]
        sources = fact_sources(stack.texts)
        for (fname, question, gold), qvec, (_, found, facts) in zip(stack.questions, qvecs, answers[stack.index],
                                                                    strict=True):
            qtype = question_type(fname)
            rows["ours_inspect"].append((qtype, {f"R@{k}": recall_at([found[k]], gold, k) for k in KS}))
            ranked = {
                "bm25s_messages": [{msg_norm[i]} for i in bm.top(question, TOP)],
                "dense_messages": [{msg_norm[i]} for i in dense_top(mvecs, qvec, TOP)],
                "ours_turn_facts": [sources.get(norm(f), set()) for f in facts],
            }
            for name, units in ranked.items():
                rows[name].append((qtype, {f"R@{k}": recall_at(units, gold, k) for k in KS}))

    def summarise(items: list[tuple[str, dict[str, float]]]) -> dict:
        types = sorted({t for t, _ in items})
        return {"overall": mean_rows([r for _, r in items]),
                "by_type": {t: mean_rows([r for tt, r in items if tt == t]) for t in types}}

    methods = {name: {"label": label, **summarise(rows[name])} for name, label in MEMDAILY_METHODS.items()}
    return {
        "methods": methods,
        "diagnostics": {name: {"label": label, **summarise(rows[name])} for name, label in MEMDAILY_DIAGNOSTICS.items()},
        "ratios": ratios(methods, "ours_inspect", ("bm25s_messages", "dense_messages"), "by_type"),
    }


def apply_profile(client: Client, params: dict) -> None:
    """Save ``params`` as the retrieval profile ``eval-diagnostic`` and apply it (a diagnostic run's
    ``--profile``: the product's result is the default profile's); exits when the server refuses it."""
    client.post("tuning", "/api/v1/tuning/profiles", {"name": "eval-diagnostic", "params": params})
    if client.post("tuning", "/api/v1/tuning/apply", {"name": "eval-diagnostic"}) is None:
        raise SystemExit(f"could not apply the profile {params}: {client.errors[-2:]}")


def warm_up(client: Client) -> None:
    """A few turns on a stream of their own, from 2 threads, so that both gunicorn workers have loaded
    jieba and the embedding model before anything is timed (a live deployment is warm); then forget
    those timings."""
    stream = {"platform": "eval-warmup", "kind": "direct", "external_id": "warmup"}
    person = {"platform": "eval-warmup", "external_id": "warmup"}

    def one(i: int) -> None:
        client.post("messages", "/api/v1/messages",
                    {"stream": stream, "sender": person, "role": "user", "content": f"warm up {i}"})
        turn = client.post("turns", "/api/v1/turns", {"stream": stream, "speaker": person, "text": "warm up"})
        if turn:
            client.post("confirm", f"/api/v1/turns/{turn['turn_id']}/confirm", {})
        client.post("inspect", "/api/v1/actions/inspect", {"stream": stream, "query": "warm up"})

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, range(6)))
    if client.errors:
        raise RuntimeError(f"the deployment does not answer: {client.errors[:3]}")
    client.latency.clear()


# --- the run ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace, log: Callable[[str], None]) -> dict:
    from bench import eval_locomo, eval_memdaily

    raw_convs = [] if args.skip_locomo else eval_locomo.load(args.conversations)
    stacks = [] if args.skip_memdaily else [
        MemdailyStack(i, g) for i, g in enumerate(eval_memdaily.haystacks_from(load_memdaily(), args.memdaily_haystacks))
    ]
    folder = Path(tempfile.mkdtemp(prefix="memory-eval-api-"))
    dep = Deployment(folder, args.redis_url, log=log, profile=args.profile, database_url=args.database_url)
    result: dict = {}
    try:
        dep.start()
        dep.setup_django()
        result["deployment"] = dep.settings()
        from memory.providers.local import LocalUSEEmbedder

        client = Client(dep.server.base, dep.token)
        if args.profile:  # a diagnostic: the product's result is the default profile's
            apply_profile(client, args.profile)
            result["profile"] = args.profile
            log(f"applied the diagnostic profile {args.profile}")
        warm_up(client)

        # 1. ingest, several client threads (one conversation / haystack per job, its own order kept)
        load_before, cpu0 = os.getloadavg()[0], dep.cpu()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(INGEST_THREADS) as pool:
            loc_jobs = [pool.submit(post_locomo, r, client, args.questions, args.sessions) for r in raw_convs]
            md_jobs = [pool.submit(post_memdaily, s, client, args.memdaily_questions) for s in stacks]
            convs = [j.result() for j in loc_jobs]
            stacks = [j.result() for j in md_jobs]
        t_ingest = time.perf_counter() - t0
        cpu = {k: round(v - cpu0[k], 1) for k, v in dep.cpu().items()}
        n_req = sum(len(client.latency[r]) for r in ("messages", "facts"))
        result["ingest"] = {
            "threads": INGEST_THREADS, "requests": n_req, "seconds": round(t_ingest, 1),
            "requests_per_s": round(n_req / t_ingest, 1) if t_ingest else 0.0,
            "latency": {r: latency_stats(client.latency[r], digits=2) for r in ("messages", "facts")},
            "errors": len(client.errors), "first_errors": client.errors[:5],
            "cpu_seconds": cpu, "server_cpu_ms_per_request": round(cpu["server"] / n_req * 1000, 2) if n_req else None,
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }
        log(f"ingest: {n_req} requests in {t_ingest:.1f}s ({result['ingest']['requests_per_s']} req/s, "
            f"{len(client.errors)} errors)")

        # 2. the worker catches up (summaries, extraction, vectors), bounded
        result["worker"] = {**dep.wait_idle(args.idle_timeout), **dep.counts()}
        log(f"worker: {'idle' if result['worker']['idle'] else 'NOT idle'} {result['worker']['seconds']}s after "
            f"the last post; {result['worker']}")
        if args.keep_db and not args.database_url:  # the store before any question reinforced a fact: to replay
            import sqlite3

            with sqlite3.connect(dep.db) as src, sqlite3.connect(folder / "before-questions.sqlite3") as dst:
                src.backup(dst)

        # 3. questions
        embedder = LocalUSEEmbedder(threads=1)
        embedder.embed(["warm up"])
        result["embedder"] = embedder.label
        errors_before = len(client.errors)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(QUERY_THREADS) as pool:
            loc_answers = dict(zip([c.sample_id for c in convs], pool.map(lambda c: ask_locomo(c, client), convs),
                                   strict=True))
            md_answers = dict(zip([s.index for s in stacks], pool.map(lambda s: ask_memdaily(s, client), stacks),
                                  strict=True))
        t_ask = time.perf_counter() - t0
        result["queries"] = {
            "threads": QUERY_THREADS, "seconds": round(t_ask, 1),
            "latency": {r: latency_stats(client.latency[r], digits=2) for r in ("turns", "confirm", "inspect")},
            "errors": len(client.errors) - errors_before, "first_errors": client.errors[errors_before:][:5],
        }
        log(f"questions asked in {t_ask:.1f}s; latency {result['queries']['latency']}")
        if convs:
            result["locomo"] = {
                "conversations": [c.sample_id for c in convs],
                "questions": sum(len(c.questions) for c in convs),
                "turns": sum(c.turns for c in convs),
                "observations": sum(c.observations for c in convs),
                "observation_facts": sum(len(c.fact_text) for c in convs),
                **score_locomo(convs, loc_answers, embedder),
            }
            log("LoCoMo scored")
        if stacks:
            result["memdaily"] = {
                "haystacks": len(stacks),
                "trajectories": sum(len(s.trajectories) for s in stacks),
                "messages": sum(len(s.texts) for s in stacks),
                "questions": sum(len(s.questions) for s in stacks),
                **score_memdaily(stacks, md_answers, embedder),
            }
        log("MemDaily scored")
    finally:
        dep.stop()
        log("deployment stopped")
        if args.keep_db:
            log(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return result


def targets(results: dict) -> dict:
    out = {}
    lo, md = results.get("locomo"), results.get("memdaily")
    if lo:
        for other in ("bm25s_facts", "dense_only"):
            ratio = lo["ratios"][other]["overall"]
            out[f"locomo_r5_vs_{other}"] = {"ratio": ratio, "target": RATIO_TARGET,
                                           "met": ratio is not None and ratio >= RATIO_TARGET}
    if md:
        ratio = md["ratios"]["bm25s_messages"]["overall"]
        out["memdaily_inspect_r5_vs_bm25s"] = {"ratio": ratio, "target": 1.0, "met": ratio is not None and ratio >= 1.0}
    return out


# --- report -------------------------------------------------------------------------------------------


def _fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def render(results: dict) -> str:
    """The section: R@5 of ours and of the baselines over the same units, the ratios and the targets, and
    what the deployment's requests cost; per category and per type: ``bench/results/eval_api.json``."""
    ing, wk, qs, dep = results["ingest"], results["worker"], results["queries"], results["deployment"]
    lat = qs["latency"]

    def p95(s: dict) -> str:
        return f"{s['p95_ms']:.0f} ms" if s.get("n") else "—"

    how = measured(results["command"], (
        f"the product as deployed on a fresh {'PostgreSQL database' if dep.get('database') == 'postgresql' else 'SQLite file'}"
        f" ({dep['server']}; {dep['worker']}; enqueueing {'on' if dep['MEMORY_ENQUEUE_TASKS'] else 'OFF'}; embeddings "
        f"`{dep['EMBEDDING_PROVIDER']}`; LLM {dep['LLM']}; default profile, {dep['FACT_RECALL_LIMIT']} prompt facts), "
        "every request over HTTP, the baselines computed in the harness over the units the API saw"), results)
    out = ["## Retrieval quality through the API (`make eval`)", "",
           how + f" Ingest {ing['requests_per_s']} req/s from {ing['threads']} threads ({ing['errors']} errors), the "
           f"worker {'idle' if wk['idle'] else '**not idle**'} {wk['seconds']} s after; p95 `POST /turns` "
           f"{p95(lat['turns'])}, confirm {p95(lat['confirm'])}, `POST /actions/inspect` {p95(lat['inspect'])}; "
           f"{qs['errors']} errors. R@5 counts the first five prompt facts (or messages).", "",
           "| R@5 | ours | bm25s | dense-only | ours / bm25s | ours / dense-only | target |",
           "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    tg = results.get("targets", {})

    def verdict(*names: str) -> str:
        found = [tg[n] for n in names if n in tg]
        if not found:
            return ""
        return f"≥ {found[0]['target']:g}×: " + ("met" if all(t["met"] for t in found) else "**not met**")

    lo, md = results.get("locomo"), results.get("memdaily")
    if lo:
        m, r = lo["methods"], lo["ratios"]
        out.append(f"| LoCoMo: `POST /turns` + confirm, {lo['questions']} questions | {m['ours_turn']['overall']['R@5']:.3f} "
                   f"| {m['bm25s_facts']['overall']['R@5']:.3f} | {m['dense_only']['overall']['R@5']:.3f} "
                   f"| {_fmt_ratio(r['bm25s_facts']['overall'])} | {_fmt_ratio(r['dense_only']['overall'])} "
                   f"| {verdict('locomo_r5_vs_bm25s_facts', 'locomo_r5_vs_dense_only')} |")
        out.append(f"| LoCoMo: `POST /turns` alone (the lexical pool, before confirm) "
                   f"| {lo['diagnostics']['ours_prepare']['overall']['R@5']:.3f} | | | | | diagnostic |")
    if md:
        m, r = md["methods"], md["ratios"]
        out.append(f"| MemDaily: `POST /actions/inspect`, {md['questions']} questions | {m['ours_inspect']['overall']['R@5']:.3f} "
                   f"| {m['bm25s_messages']['overall']['R@5']:.3f} | {m['dense_messages']['overall']['R@5']:.3f} "
                   f"| {_fmt_ratio(r['bm25s_messages']['overall'])} | {_fmt_ratio(r['dense_messages']['overall'])} "
                   f"| {verdict('memdaily_inspect_r5_vs_bm25s')} (bm25s) |")
        facts = md["diagnostics"].get("ours_turn_facts")
        if facts:
            out.append(f"| MemDaily: `POST /turns` + confirm over the facts the worker extracted "
                       f"| {facts['overall']['R@5']:.3f} | | | | | diagnostic |")
    return "\n".join(out) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.eval_api", description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=None, help="LoCoMo conversations (default all 10)")
    p.add_argument("--questions", type=int, default=None, help="cap on LoCoMo questions per conversation")
    p.add_argument("--sessions", type=int, default=None,
                   help="only the first N sessions of each conversation, and the questions whose evidence lies in them")
    p.add_argument("--memdaily-haystacks", type=int, default=12, help="MemDaily haystacks (default 12, as bench.eval)")
    p.add_argument("--memdaily-questions", type=int, default=None, help="cap on MemDaily questions per haystack")
    p.add_argument("--profile", type=json.loads, default=None, metavar="JSON",
                   help='a diagnostic: apply this retrieval profile first, e.g. \'{"context_dense_messages": 0}\' '
                        "(the product's result is the default profile's: use --no-markdown)")
    p.add_argument("--redis-url", default=DEFAULT_REDIS,
                   help="Redis database of the deployed worker, flushed before and after (default "
                        "$MEMORY_EVAL_REDIS_URL or DB 14; never DB 0)")
    p.add_argument("--database-url", default="", metavar="URL",
                   help="an empty PostgreSQL database to deploy on instead of a fresh SQLite file (migrated, left "
                        "filled: give a throwaway one); $DATABASE_URL is never used")
    p.add_argument("--idle-timeout", type=float, default=600.0, help="seconds to wait for the worker to be idle")
    p.add_argument("--per-question", type=Path, default=None, metavar="JSONL",
                   help="also write every LoCoMo question (gold, prompt fact ids, evidence covered, R@5) as JSON lines")
    add_evaluation_arguments(p, output=RESULTS_DIR / "eval_api.json", keep_db="leave the temporary deployment folder behind (SQLite: with a copy of the "
                                                                     "store as the questions found it, before-questions.sqlite3)")
    return p.parse_args(argv)


def command_line(args: argparse.Namespace) -> str:
    parts = ["python -m bench.eval_api"]
    for flag, value, default in (("--conversations", args.conversations, None), ("--sessions", args.sessions, None),
                                 ("--questions", args.questions, None),
                                 ("--memdaily-haystacks", args.memdaily_haystacks, 12),
                                 ("--memdaily-questions", args.memdaily_questions, None)):
        if value != default:
            parts.append(f"{flag} {value}")
    parts += [f for f, on in (("--skip-locomo", args.skip_locomo), ("--skip-memdaily", args.skip_memdaily)) if on]
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (a test's timeout, Ctrl-C of a parent) unwinds like an exception: run()'s finally stops gunicorn and
    # the worker, which live in sessions of their own and would otherwise outlive this process
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    def measure(results: dict, log: Log) -> None:
        results["cpus"] = os.cpu_count()
        results.update(run(args, log))
        results["targets"] = targets(results)
        per_question = results.get("locomo", {}).pop("per_question", [])
        if args.per_question is not None:
            args.per_question.parent.mkdir(parents=True, exist_ok=True)
            args.per_question.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in per_question),
                                         encoding="utf-8")
            log(f"wrote {args.per_question}")

    return evaluation_main(args, command=command_line(args), section=(START, END), render=render, measure=measure)


if __name__ == "__main__":
    sys.exit(main())
