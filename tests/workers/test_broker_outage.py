"""Redis hung (accepts connections, never answers) or gone (closed port): requests stay fast.

Each test points both the redis-py clients (``REDIS_URL``) and Celery's broker at
a local listener that accepts connections and never answers, or at a port
nothing listens on, then goes through Django's test client as a bot would.
What is asserted is the mechanism: the first request that meets the dead Redis
pays at most the short timeouts (0.1 s each, configured in memory/broker.py) and
opens the breaker; every later request makes no Redis connection attempt at all
(counted at redis-py's socket connect). The wall-clock bounds are failure bounds
only, generous enough for a loaded machine yet below Celery's own 1 s transport
timeouts (and redis-py's default, no timeout at all), so a request that waited
for a real Redis timeout still fails.
"""
from __future__ import annotations

import socket
import threading
import time

import kombu.pools
import pytest
import redis.connection
from django.db import transaction

from config.celery import app as celery_app
from memory import broker
from memory.api.auth import clear_token_cache, issue_token
from memory.models import Fact, ImportBatch, Job, Knowledge, Message
from tests.api.conftest import ApiClient, person, stream
from tests.redis_url import TEST_REDIS_URL

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

#: The one call per process that finds Redis hung pays the short timeouts (2 × 0.1 s); later ones skip Redis.
#: Not above Celery's 1 s transport timeouts (config/settings.py), so waiting on one of those fails; a loaded machine
#: (load average 10–15) has stretched a request with no Redis call to 0.2 s, so tighter bounds would fail for load.
FIRST_CALL_BOUND_S = 1.0
#: What memory/broker.py bounds every Redis round trip with (connect, read).
SHORT_TIMEOUTS_S = (0.1, 0.1)


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


@pytest.fixture
def redis_connects(monkeypatch):
    """Every TCP connection redis-py tries (the breaker's client and Celery's redis transport alike)."""
    attempts: list[tuple[str, int]] = []
    real = redis.connection.Connection._connect

    def counted(self):
        attempts.append((self.host, self.port))
        return real(self)

    monkeypatch.setattr(redis.connection.Connection, "_connect", counted)
    return attempts


def _stays_off_redis(requests, redis_connects):
    """Run ``requests`` (callables); the first finds Redis down and opens the breaker, the later ones never try it.

    Returns the wall times, for the caller's (loose) failure bounds.
    """
    assert broker._timeouts() == SHORT_TIMEOUTS_S
    assert not broker.is_down()
    times = []
    for i, call in enumerate(requests):
        before = len(redis_connects)
        _, took = _timed(call)
        times.append(took)
        if i == 0:
            assert len(redis_connects) > before, "the first request never tried Redis"  # so the spy sees them
            assert broker.is_down(), "the first failure did not open the breaker"
        else:
            assert redis_connects[before:] == [], f"request {i} tried Redis while the breaker was open"
    assert max(times) < FIRST_CALL_BOUND_S, times
    return times


def _timed(call):
    started = time.perf_counter()
    response = call()
    return response, time.perf_counter() - started


def test_messages_are_stored_fast_while_redis_is_down(api, dead_redis, redis_connects):
    def post(i):
        r = api.post("messages", {"stream": stream(), "sender": person(), "role": "user", "content": f"第{i}条：我喜欢猫"})
        assert r.status_code == 201, r.content
        assert Message.objects.filter(pk=r.json()["id"], content=f"第{i}条：我喜欢猫").exists()

    _stays_off_redis([lambda i=i: post(i) for i in range(8)], redis_connects)
    assert Message.objects.count() == 8


def test_facts_are_stored_fast_while_redis_is_down(api, dead_redis, redis_connects):
    def post(i):
        r = api.post("facts", {"person": person(), "content": f"住在杭州第{i}区", "kind": "身份"})
        assert r.status_code in (200, 201), r.content

    _stays_off_redis([lambda i=i: post(i) for i in range(4)], redis_connects)
    assert Fact.objects.count() == 4


def test_an_import_is_refused_with_503_and_blocks_nothing(redis_db, api, dead_redis, settings, redis_connects):
    def post():
        r = api.post("knowledge/imports", {"text": "龙井产自杭州。\n\n碧螺春产自苏州。"})
        assert r.status_code == 503, r.content
        assert "unavailable" in r.json()["detail"]
        assert r["Retry-After"]

    _stays_off_redis([post, post], redis_connects)
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


def test_tuning_jobs_are_refused_with_503_and_marked_failed(api, dead_redis, redis_connects):
    def post(path, body):
        r = api.post(path, body)
        assert r.status_code == 503, r.content

    _stays_off_redis([lambda: post("tuning/evaluate", {"max_turns": 10}),
                      lambda: post("tuning/compare", {"a": {}, "b": {"params": {"fact_recall_limit": 3}}, "max_turns": 10})],
                     redis_connects)
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


def test_the_dashboards_worker_ping_answers_at_once(dead_redis, redis_connects):
    from console import presenters

    def ping():
        health = presenters.ping_workers()
        assert health["status"] == "unknown" and health["error"]

    _stays_off_redis([ping, ping, ping], redis_connects)
