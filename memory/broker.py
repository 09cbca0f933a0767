"""Every Redis call made outside Celery's consumer goes through here: short timeouts and a breaker.

A request that stores a message, a fact or an import must never wait on Redis
for long: Redis that accepts connections but never answers (a hung server, a
half-open connection after a failover) would otherwise hold a gunicorn worker
for the socket timeout of every call, or forever.

* :func:`client` — the redis-py client of the enqueue markers and per-stream
  locks: ``REDIS_CONNECT_TIMEOUT`` / ``REDIS_SOCKET_TIMEOUT`` (0.1 s each by
  default) and no client-side retries (redis-py 8 retries ten times by default).
* :func:`publish` — send a Celery task (by its registered name, see :mod:`memory.dispatch.enqueue`). It first asks :func:`client` (one round
  trip, bounded by those timeouts), then publishes with a retry policy of at
  most one reconnect; Celery's own socket timeouts (``CELERY_BROKER_TRANSPORT_OPTIONS``)
  bound the rest.
* Every connection sends TCP keepalives and a pooled one idle for
  ``REDIS_HEALTH_CHECK_INTERVAL`` is pinged before reuse; :func:`reconnect` drops the
  pooled ones, so a half-open connection left by a failover costs one retry, not a sweep.
* The breaker: after a failure this process treats Redis as down for
  ``BROKER_DOWN_SECONDS`` (5 s) and every call fails at once
  (:class:`BrokerUnavailable`), so a hung Redis costs one request ≤ ~0.1 s per
  process and period, not every request.

Nothing is lost while Redis is down: messages, facts and knowledge are already
in the database, and the worker's start-up sweep and the beat schedule find
the pending summaries, extractions and vectors there. Jobs (imports, tuning
evaluations) that cannot be sent are marked failed by their callers.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from celery import current_app
from django.conf import settings
from kombu.exceptions import OperationalError as KombuOperationalError

logger = logging.getLogger(__name__)

__all__ = ["BrokerUnavailable", "REDIS_ERRORS", "check", "client", "is_down", "mark_down", "publish", "reconnect", "reset",
           "send"]

#: What a dead or hung Redis raises through redis-py or kombu.
REDIS_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    KombuOperationalError,
    OSError,
)


#: One immediate reconnect, no waiting: a request never sleeps on the broker.
PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0, "interval_max": 0}


class BrokerUnavailable(RuntimeError):
    """Redis (the Celery broker) cannot be reached now; nothing was enqueued (HTTP 503)."""


_lock = threading.Lock()
_clients: dict[tuple[str, float, float], redis.Redis] = {}
_down_until = 0.0


def _timeouts() -> tuple[float, float]:
    return (settings.REDIS_CONNECT_TIMEOUT, settings.REDIS_SOCKET_TIMEOUT)


def client() -> redis.Redis:
    """The process's redis-py client for ``REDIS_URL`` with the short timeouts and no retries."""
    connect, read = _timeouts()
    key = (settings.REDIS_URL, connect, read)
    found = _clients.get(key)
    if found is None:
        with _lock:
            found = _clients.get(key)
            if found is None:
                found = _clients[key] = redis.Redis.from_url(
                    settings.REDIS_URL, socket_connect_timeout=connect, socket_timeout=read, retry=None,
                    socket_keepalive=True, socket_keepalive_options=settings.REDIS_KEEPALIVE_OPTIONS,
                    health_check_interval=settings.REDIS_HEALTH_CHECK_INTERVAL,
                )
    return found


def is_down() -> bool:
    """True while a recent failure keeps this process from trying Redis again."""
    return time.monotonic() < _down_until


def mark_down(exc: BaseException | None = None) -> None:
    """Open the breaker for ``BROKER_DOWN_SECONDS``; logs once per opening."""
    global _down_until
    was_down = is_down()
    _down_until = time.monotonic() + settings.BROKER_DOWN_SECONDS
    if not was_down:
        logger.warning("broker_unavailable url=%s error=%s: skipping Redis for %.0f s",
                       _safe_url(), _describe(exc), settings.BROKER_DOWN_SECONDS)


def reset() -> None:
    """Close the breaker and forget the clients (tests; a changed ``REDIS_URL`` gets its own client anyway)."""
    global _down_until
    _down_until = 0.0
    with _lock:
        for each in _clients.values():
            each.close()
        _clients.clear()


def reconnect() -> None:
    """Close the breaker and drop this process's idle pooled Redis connections: the next call opens a fresh one.

    After a failover, connections opened before it can be half-open (the old server
    vanished without closing them): a call on one times out however healthy Redis is now.
    Callers that must not lose their turn (the beat's sweep of due streams, a stream
    check) retry once after this. Celery's own publish retries once on a fresh
    connection by itself (:data:`PUBLISH_RETRY_POLICY`).
    """
    global _down_until
    _down_until = 0.0
    with _lock:
        for each in _clients.values():
            each.connection_pool.disconnect(inuse_connections=False)


def check() -> redis.Redis:
    """The client, after one bounded round trip; raises :class:`BrokerUnavailable` when Redis is down."""
    if is_down():
        raise BrokerUnavailable("任务队列（Redis）暂时不可用")
    found = client()
    try:
        found.ping()
    except REDIS_ERRORS as exc:
        mark_down(exc)
        raise BrokerUnavailable(f"任务队列（Redis）不可用：{_describe(exc)}") from exc
    return found


def publish(task: str, args: tuple | list = (), **options: Any) -> None:
    """Send the task named ``task`` with ``args`` to the broker, or raise :class:`BrokerUnavailable` within ~0.1 s.

    :func:`check` first (one bounded round trip), then :func:`send`.
    """
    check()
    send(task, args, **options)


def send(task: str, args: tuple | list = (), **options: Any) -> None:
    """Publish without the round trip of :func:`check` (the caller has just talked to Redis).

    At most one reconnect (a Redis restart leaves pooled connections stale);
    a Redis that dies in between is bounded by Celery's transport timeouts.
    Raises :class:`BrokerUnavailable` and opens the breaker on failure.
    """
    if is_down():
        raise BrokerUnavailable("任务队列（Redis）暂时不可用")
    try:
        current_app.send_task(task, tuple(args), retry=True, retry_policy=PUBLISH_RETRY_POLICY, **options)
    except REDIS_ERRORS as exc:
        mark_down(exc)
        raise BrokerUnavailable(f"任务队列（Redis）不可用：{_describe(exc)}") from exc


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "-"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


def _safe_url() -> str:
    url = settings.REDIS_URL
    if "@" in url:  # never log a password
        scheme, _, rest = url.partition("://")
        url = f"{scheme}://***@{rest.rpartition('@')[2]}"
    return url
