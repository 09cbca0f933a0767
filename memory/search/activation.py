"""Short-term activation shared by every process and host, kept in Redis.

A recall lights its seeds and visible hits (``touch``); for ten minutes or so
spreading then favours them (``factor = 1 + exp(-Δt / 10 min)``,
``memory.engine.spreading``). With several gunicorn and worker hosts a
per-process table would make the same recall spread differently depending on
which process served the previous one, so the last touch of each memory node
lives in one sorted set of the deployment's Redis (``REDIS_URL``):
member = memory node id, score = epoch ms of the last touch.

* ``touch`` is one pipelined round trip (``ZADD`` + pruning of entries older
  than 40 τ, whose factor is exactly 1.0 in floating point, + an expiry);
* ``factors`` is one ``ZMSCORE`` per batch (the engine asks per hop or once for
  every candidate hit);
* every call goes through :mod:`memory.broker` (0.1 s timeouts and the
  breaker): with Redis down the process falls back to its own table, which
  always records its own touches too — spreading stays available, only the
  boost from other processes' recent recalls is missing until Redis is back.

``SHORT_TERM_ACTIVATION=process`` keeps the per-process table only (the test
settings do: unit tests must not write to a deployment's Redis database).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings

from memory import broker
from memory.engine.spreading import ACTIVATION_TAU_MS, ShortTermActivation, activation_factor

logger = logging.getLogger(__name__)

__all__ = ["KEY", "SharedActivation", "activation"]

#: The sorted set of last touches (member: memory node id, score: epoch ms).
KEY = "memory:short_term_activation"
#: Older touches give a factor of exactly 1.0 and are pruned.
HORIZON_MS = 40 * ACTIVATION_TAU_MS


class SharedActivation:
    """The interface of :class:`ShortTermActivation` (touch, factor, factors, clear) over Redis."""

    def __init__(self, key: str = KEY) -> None:
        self.key = key
        self.local = ShortTermActivation()

    def touch(self, nodes: Iterable[int], now: int) -> None:
        nodes = [int(n) for n in nodes]
        if not nodes:
            return
        self.local.touch(nodes, now)
        if broker.is_down():
            return
        try:
            pipe = broker.client().pipeline(transaction=False)
            # GT: a replayed or late touch never moves a node's last touch backwards.
            pipe.zadd(self.key, {str(n): now for n in nodes}, gt=True)
            pipe.zremrangebyscore(self.key, "-inf", f"({now - HORIZON_MS}")
            pipe.pexpire(self.key, HORIZON_MS)
            pipe.execute()
        except broker.REDIS_ERRORS as exc:
            broker.mark_down(exc)

    def at(self, nodes: Iterable[int]) -> dict[int, int]:
        """Last touch (epoch ms) of each node that has one; this process's own table when Redis is down."""
        nodes = [int(n) for n in nodes]
        if not nodes:
            return {}
        if not broker.is_down():
            try:
                scores = broker.client().zmscore(self.key, [str(n) for n in nodes])
                return {n: int(s) for n, s in zip(nodes, scores, strict=True) if s is not None}
            except broker.REDIS_ERRORS as exc:
                broker.mark_down(exc)
        return self.local.at(nodes)

    def factors(self, nodes: Iterable[int], now: int) -> dict[int, float]:
        nodes = list(nodes)
        last = self.at(nodes)
        return {n: activation_factor(last.get(n), now) for n in nodes}

    def factor(self, node: int, now: int) -> float:
        return self.factors([node], now)[node]

    def clear(self) -> None:
        self.local.clear()
        if broker.is_down():
            return
        try:
            broker.client().delete(self.key)
        except broker.REDIS_ERRORS as exc:
            broker.mark_down(exc)

    def discard(self, nodes: Iterable[int]) -> None:
        """Forget the last touch of these nodes (deleted ones), here and in Redis."""
        nodes = [int(n) for n in nodes]
        self.local.discard(nodes)
        if not nodes or broker.is_down():
            return
        try:
            broker.client().zrem(self.key, *[str(n) for n in nodes])
        except broker.REDIS_ERRORS as exc:
            broker.mark_down(exc)

    def __len__(self) -> int:
        if not broker.is_down():
            try:
                return int(broker.client().zcard(self.key))
            except broker.REDIS_ERRORS as exc:
                broker.mark_down(exc)
        return len(self.local)


_process = ShortTermActivation()
_shared = SharedActivation()


def activation() -> ShortTermActivation | SharedActivation:
    """The activation of this deployment: shared in Redis (default) or per process (``SHORT_TERM_ACTIVATION``)."""
    if settings.SHORT_TERM_ACTIVATION == "process":
        return _process
    return _shared
