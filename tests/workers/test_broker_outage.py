"""Redis hung (accepts connections, never answers) or gone (closed port): requests stay fast.

Each test points both the redis-py clients (``REDIS_URL``) and Celery's broker at
a local listener that accepts connections and never answers, or at a port
nothing listens on, then goes through Django's test client as a bot would.
Timing bounds here are failure bounds (a hung call costs seconds), not a benchmark.
"""
from __future__ import annotations

import socket
import threading
import time

import kombu.pools
import pytest
from django.db import transaction

from config.celery import app as celery_app
from memory import broker
from memory.auth import clear_token_cache, issue_token
from memory.models import Fact, ImportBatch, Job, Knowledge, Message
from tests.api.conftest import ApiClient, person, stream
from tests.redis_url import TEST_REDIS_URL

pytestmark = pytest.mark.django_db(transaction=True)

#: The one call per process that finds Redis hung pays the short timeouts (2 × 0.1 s); later ones skip Redis.
FIRST_CALL_BOUND_S = 1.0
REQUEST_BOUND_S = 0.15


class HungRedis:
    """A TCP listener on 127.0.0.1 that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted.append(conn)  # held open, never read, never answered

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"  # not a test database

    def close(self) -> None:
        self._stop = True
        self.thread.join(timeout=2)
        for conn in self.accepted:
            conn.close()
        self.sock.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # released again: nothing listens there


def _point_at(url: str, settings) -> None:
    """Aim the redis-py clients and Celery's publisher at ``url`` (pools rebuilt)."""
    settings.REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    celery_app.conf.broker_url = url
    celery_app._pool = None
    celery_app.amqp._producer_pool = None
    kombu.pools.reset()  # the pools are kept per URL in a process-wide registry
    broker.reset()


@pytest.fixture
def api(settings):
    settings.MEMORY_ENQUEUE_TASKS = True
    settings.EMBEDDING_PROVIDER = "none"
    clear_token_cache()
    _, plain = issue_token("outage-bot", ["bot", "tuning"])
    client = ApiClient(plain)
    # Warm up (jieba, URL resolver, schemas) with enqueueing off, so timings below are Redis's alone.
    settings.MEMORY_ENQUEUE_TASKS = False
    client.post("messages", {"stream": stream(ext="warm"), "sender": person(), "role": "user", "content": "热身"})
    client.post("facts", {"person": person(), "content": "热身", "kind": "身份"})
    settings.MEMORY_ENQUEUE_TASKS = True
    Message.objects.all().delete()
    Fact.objects.all().delete()
    yield client
    clear_token_cache()


@pytest.fixture(params=["hung", "closed"])
def dead_redis(request, settings):
    hung = HungRedis() if request.param == "hung" else None
    url = hung.url if hung else f"redis://127.0.0.1:{_closed_port()}/0"  # not a test database
    _point_at(url, settings)
    yield request.param
    _point_at(TEST_REDIS_URL, settings)
    if hung:
        hung.close()


def _timed(call):
    started = time.perf_counter()
    response = call()
    return response, time.perf_counter() - started


def test_messages_are_stored_fast_while_redis_is_down(api, dead_redis):
    times = []
    for i in range(8):
        r, took = _timed(lambda i=i: api.post("messages", {"stream": stream(), "sender": person(), "role": "user",
                                                           "content": f"第{i}条：我喜欢猫"}))
        assert r.status_code == 201, r.content
        assert Message.objects.filter(pk=r.json()["id"], content=f"第{i}条：我喜欢猫").exists()
        times.append(took)
    assert max(times) < FIRST_CALL_BOUND_S, times
    later = sorted(times[1:])
    assert later[-1] < REQUEST_BOUND_S, times  # the breaker is open: no Redis call at all
    assert Message.objects.count() == 8


def test_facts_are_stored_fast_while_redis_is_down(api, dead_redis):
    times = []
    for i in range(4):
        r, took = _timed(lambda i=i: api.post("facts", {"person": person(), "content": f"住在杭州第{i}区", "kind": "身份"}))
        assert r.status_code in (200, 201), r.content
        times.append(took)
    assert max(times) < FIRST_CALL_BOUND_S, times
    assert max(times[1:]) < REQUEST_BOUND_S, times
    assert Fact.objects.count() == 4


def test_an_import_is_refused_with_503_and_blocks_nothing(redis_db, api, dead_redis, settings):
    for _attempt in range(2):
        r, took = _timed(lambda: api.post("knowledge/imports", {"text": "龙井产自杭州。\n\n碧螺春产自苏州。"}))
        assert took < FIRST_CALL_BOUND_S
        assert r.status_code == 503, r.content
        assert "unavailable" in r.json()["detail"]
        assert r["Retry-After"]
    assert not Job.objects.exclude(status="failed").exists()
    assert not ImportBatch.objects.exclude(status="failed").exists()
    job = Job.objects.filter(kind="import").first()
    assert "无法提交导入任务" in job.error and "text" not in job.params
    assert "无法提交导入任务" in ImportBatch.objects.first().error

    # Redis is back: the next import is accepted at once (no 409 from the failed ones).
    _point_at(TEST_REDIS_URL, settings)
    r = api.post("knowledge/imports", {"text": "白茶产自福建。"})
    assert r.status_code == 202, r.content
    assert not Knowledge.objects.exists()


def test_tuning_jobs_are_refused_with_503_and_marked_failed(api, dead_redis):
    for path, body in (("tuning/evaluate", {"max_turns": 10}),
                       ("tuning/compare", {"a": {}, "b": {"params": {"fact_recall_limit": 3}}, "max_turns": 10})):
        r, took = _timed(lambda path=path, body=body: api.post(path, body))
        assert took < FIRST_CALL_BOUND_S
        assert r.status_code == 503, r.content
    jobs = list(Job.objects.order_by("id").values_list("kind", "status", "error"))
    assert [(kind, status) for kind, status, _ in jobs] == [("evaluate", "failed"), ("compare", "failed")]
    assert all("无法提交后台任务" in error for _, _, error in jobs)


def test_enqueue_after_commit_never_raises_into_the_caller(dead_redis, settings):
    from memory import services

    settings.MEMORY_ENQUEUE_TASKS = True
    s = services.resolve_stream(platform="qq", kind="group", external_id="g9", name="g9")
    started = time.perf_counter()
    with transaction.atomic():
        services.append_message(stream_id=s.pk, role="assistant", content="好的")
    assert time.perf_counter() - started < FIRST_CALL_BOUND_S
    assert broker.is_down()


def test_the_dashboards_worker_ping_answers_at_once(dead_redis):
    from console import presenters

    for _ in range(3):
        started = time.perf_counter()
        health = presenters.ping_workers()
        assert time.perf_counter() - started < 0.5
        assert health["status"] == "unknown" and health["error"]
