"""Fixtures of the worker tests: streams with messages, scripted models, a burst queue, Redis.

* ``burst`` patches ``Celery.send_task`` to collect enqueued tasks (and checks
  that their arguments survive JSON, which eager mode would not), then replays
  them — duplicates included — by calling the task functions directly.
* ``redis_db`` points ``REDIS_URL`` at a scratch database of the real Redis.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import redis
from celery import Celery

from memory import services
from memory.engine.extraction import EpisodeDraft, ExtractedFact, Extraction
from memory.models import Stream
from tests.chat_lines import CHAT
from tests.redis_url import TEST_REDIS_URL as REDIS_TEST_URL

T0 = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _worker_settings(settings):
    settings.MEMORY_ENQUEUE_TASKS = False
    settings.SUMMARIZE_TRIGGER_MESSAGES = 48
    settings.SUMMARIZE_BATCH_MESSAGES = 16
    settings.FACT_EXTRACT_TRIGGER_MESSAGES = 32
    settings.FACT_EXTRACT_BATCH_MESSAGES = 12
    settings.EMBEDDING_BATCH = 20


@pytest.fixture
def redis_db(settings):
    settings.REDIS_URL = REDIS_TEST_URL
    client = redis.Redis.from_url(REDIS_TEST_URL)
    client.flushdb()
    yield client
    client.flushdb()


@dataclass
class Burst:
    calls: list[tuple[str, tuple, dict]] = field(default_factory=list)
    options: list[dict] = field(default_factory=list)  # each call's send options (countdown, …)

    def names(self) -> list[str]:
        return [name.rsplit(".", 1)[-1] for name, _, _ in self.calls]

    def run(self, *, times: int = 1) -> list[Any]:
        """Run every collected task ``times`` times (a redelivery), in order, then forget them."""
        from celery import current_app

        calls, self.calls, self.options = self.calls, [], []
        out = []
        for name, args, kwargs in calls:
            for _ in range(times):
                out.append(current_app.tasks[name](*args, **kwargs))
        return out


@pytest.fixture
def burst(monkeypatch) -> Burst:
    queue = Burst()

    def send_task(self, name, args=None, kwargs=None, **options):
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        json.dumps([args, kwargs])  # what the broker would have to carry
        queue.calls.append((name, args, kwargs))
        queue.options.append(options)

    monkeypatch.setattr(Celery, "send_task", send_task)
    return queue


# --- data -----------------------------------------------------------------------------------


def make_person(ext: str, name: str = "", platform: str = "qq"):
    return services.resolve_person(platform=platform, external_id=ext, name=name or ext, at=T0)


def make_stream(ext: str = "g1", kind: str = "group", platform: str = "qq") -> Stream:
    return services.resolve_stream(platform=platform, kind=kind, external_id=ext, name=ext)




def post_messages(stream: Stream, n: int, *, speakers: Sequence[Any] = (), start: int = 0, assistant_every: int = 4,
                  at: int = T0) -> list[int]:
    """Append ``n`` messages: user lines by the speakers in turn, every Nth an assistant reply."""
    speakers = list(speakers) or [make_person("u1", "小明")]
    ids = []
    for i in range(start, start + n):
        if assistant_every and i % assistant_every == assistant_every - 1:
            message, _ = services.append_message(stream_id=stream.pk, role="assistant",
                                                 content=f"<say>好的，我记住了第{i}条</say>", at=at + i * 1000)
        else:
            person = speakers[i % len(speakers)]
            message, _ = services.append_message(stream_id=stream.pk, role="user", content=CHAT[i % len(CHAT)],
                                                 sender_person_id=person.pk, at=at + i * 1000)
        ids.append(message.pk)
    return ids


# --- scripted models ---------------------------------------------------------------------------


class ScriptedSummariser:
    """Returns ``result`` (or raises it when it is an exception) and records its calls."""

    label = "scripted"

    def __init__(self, result: Any = None):
        self.result = result if result is not None else EpisodeDraft(summary="他们聊了杭州和工作", cues=["杭州", "工作"])
        self.calls: list[list] = []

    def summarise(self, lines, participants=()):
        self.calls.append(list(lines))
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


class ScriptedExtractor:
    label = "scripted"

    def __init__(self, result: Any = None):
        self.result = result if result is not None else Extraction()
        self.calls: list[dict] = []

    def extract(self, lines, participants, known_facts=(), *, emit=None):
        self.calls.append({"lines": list(lines), "participants": list(participants), "known": list(known_facts)})
        result = self.result(lines, participants, known_facts) if callable(self.result) else self.result
        if isinstance(result, BaseException):
            raise result
        return result


def fact(person_ref: str, content: str, kind: str = "事件", slot: str = "", supersedes: int = 0) -> ExtractedFact:
    return ExtractedFact(person_ref=person_ref, kind=kind, content=content, slot=slot, supersedes=supersedes)


class FakeEmbedder:
    """Deterministic unit vectors; ``fail_batches`` lists batch numbers that come back as None."""

    name = "fake-embed"
    label = "fake:fake-embed"

    def __init__(self, dim: int = 8, fail_batches: Sequence[int] = ()):
        self.dim = dim
        self.fail_batches = set(fail_batches)
        self.batches: list[list[str]] = []

    def embed(self, texts):
        self.batches.append(list(texts))
        if len(self.batches) - 1 in self.fail_batches:
            return [None] * len(texts)
        out = []
        for text in texts:
            rng = np.random.default_rng(abs(hash(text)) % (2**32))
            v = rng.standard_normal(self.dim)
            out.append((v / np.linalg.norm(v)).astype(np.float32))
        return out
