"""The one place that sends Celery tasks: by name, so nothing here imports a task module.

Services call the ``*_on_commit`` helpers inside their transaction; the request
that stored a message or a fact never waits on Redis for more than the short
timeouts of :mod:`memory.broker` and never fails because of it. Tasks re-enqueue
themselves through the same functions. The web process therefore never imports
:mod:`memory.pipeline.tasks` (nor ``tuning.tasks``): ``current_app.send_task`` publishes a
task by its registered name, and the worker that consumes it has imported it.

**At most one summarisation and one extraction in flight per stream.** A task
holds a Redis lock (``memory:lock:<queue>:<stream>``) while it works
(:mod:`memory.pipeline.tasks`); :func:`stream_check` skips a stream whose lock is held —
the holder re-checks the trigger after releasing it — and a short-lived
``memory:queued:…`` marker keeps a burst of messages from queueing the same
check many times.

**A message's vector soon after it is stored.** The dense channel of a turn's confirm
reads the vectors of the conversation's last lines; a line still without one is embedded
on the request path. So a stored message also queues the vector backfill, delayed by
``MESSAGE_VECTOR_DELAY`` seconds (one task per burst, the same marker and lock as the
fact and knowledge backfills): the bot's reply to that line is not slowed by it, and the
lines are embedded before the next turns read them.

``MEMORY_ENQUEUE_TASKS`` (settings; off in tests and benchmarks) is read by
:func:`enabled` only: with it off, writes enqueue nothing after commit, and the
caller runs the work itself (``pipeline.run_import``, ``summarize_stream``, …).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import OperationalError, transaction

from memory import broker
from memory.dispatch import triggers
from memory.providers import config as provider_config

logger = logging.getLogger(__name__)

__all__ = [
    "LOCK_PREFIX",
    "QUEUED_PREFIX",
    "TASKS",
    "enabled",
    "lock_key",
    "message_vector_delay",
    "message_vector_on_commit",
    "publish",
    "queued_key",
    "send",
    "stream_check",
    "sweep",
    "stream_checks",
    "stream_checks_on_commit",
    "vector_backfill",
    "vector_backfill_on_commit",
]

#: Registered names of the memory tasks (``memory/pipeline/tasks.py`` declares them under these names).
SUMMARIZE_TASK = "memory.tasks.summarize_stream_task"
EXTRACT_TASK = "memory.tasks.extract_stream_task"
VECTORS_TASK = "memory.tasks.vectors_backfill_task"
IMPORT_TASK = "memory.tasks.import_knowledge_task"
TASKS = {triggers.SUMMARIZE: SUMMARIZE_TASK, triggers.EXTRACT: EXTRACT_TASK}

LOCK_PREFIX = "memory:lock:"
QUEUED_PREFIX = "memory:queued:"
VECTORS = "vectors"
#: A queued marker outlives the countdown of its task by this much (then it expires on its own).
QUEUED_TTL = 60

#: What a dead broker or a locked database raises while a check is decided and sent.
SEND_ERRORS: tuple[type[BaseException], ...] = (broker.BrokerUnavailable, OperationalError, *broker.REDIS_ERRORS)


def enabled() -> bool:
    """Whether writes enqueue their background work after commit (``MEMORY_ENQUEUE_TASKS``)."""
    return bool(settings.MEMORY_ENQUEUE_TASKS)


def lock_key(queue: str, stream_id: int | None = None) -> str:
    return f"{LOCK_PREFIX}{queue}" if stream_id is None else f"{LOCK_PREFIX}{queue}:{stream_id}"


def queued_key(queue: str, stream_id: int | None = None) -> str:
    return f"{QUEUED_PREFIX}{queue}" if stream_id is None else f"{QUEUED_PREFIX}{queue}:{stream_id}"


def send(name: str, args: Sequence[Any] = (), **options: Any) -> None:
    """Publish task ``name`` without a round trip first (:func:`memory.broker.send`)."""
    broker.send(name, args, **options)


def publish(name: str, args: Sequence[Any] = (), **options: Any) -> None:
    """Publish task ``name`` after one bounded round trip; raises ``BrokerUnavailable`` (a job's caller fails it)."""
    broker.publish(name, args, **options)


# --- after commit (what services call) ---------------------------------------------------------


def stream_checks_on_commit(stream_id: int) -> None:
    """Enqueue the stream's summarisation and extraction checks once the current transaction commits."""

    def run() -> None:
        if enabled():
            stream_checks(stream_id)

    transaction.on_commit(run)


def vector_backfill_on_commit() -> None:
    """Ask the workers to embed rows still without a vector once the current transaction commits."""

    def run() -> None:
        if enabled():
            vector_backfill()

    transaction.on_commit(run)


def message_vector_on_commit() -> None:
    """Once the current transaction commits, queue the backfill that embeds a message whose text
    changed, :func:`message_vector_delay` seconds later (a stored message queues it with its
    stream checks, :func:`stream_checks`)."""

    def run() -> None:
        if enabled() and (delay := message_vector_delay()) is not None:
            vector_backfill(countdown=delay)

    transaction.on_commit(run)


# --- stream checks and the vector backfill -------------------------------------------------------


def stream_check(queue: str, stream_id: int, *, countdown: int = 0, check_due: bool = True) -> bool:
    """Enqueue one stream's summarisation or extraction task if it is due and not in flight.

    Returns True when a task was sent. Never raises and never waits on Redis
    for more than its short timeouts (twice: a call that fails on a pooled
    connection is tried once more on a fresh one, :func:`memory.broker.reconnect`,
    since after a failover the pooled one may be half-open): a broker outage must
    not fail (or hold) the request that stored a message — the next message, the
    beat sweep or the worker's start-up sweep picks the work up from the database.
    """
    if broker.is_down():
        return False
    for attempt in (1, 2):
        try:
            return _stream_check(queue, stream_id, countdown=countdown, check_due=check_due)
        except SEND_ERRORS as exc:
            if attempt == 1 and isinstance(exc, broker.REDIS_ERRORS):
                broker.reconnect()
                continue
            if isinstance(exc, broker.REDIS_ERRORS):
                broker.mark_down(exc)
            logger.warning("stream_check_enqueue_failed queue=%s stream=%s error=%s", queue, stream_id, exc)
            return False
    return False


def _stream_check(queue: str, stream_id: int, *, countdown: int, check_due: bool) -> bool:
    if check_due and not countdown and not triggers.due(queue, stream_id):
        return False
    client = broker.client()
    if client.exists(lock_key(queue, stream_id)):
        return False  # the holder re-checks after it finishes
    marker = queued_key(queue, stream_id)
    if not client.set(marker, "1", nx=True, ex=QUEUED_TTL + countdown):
        return False  # already queued
    _send_or_forget(marker, TASKS[queue], (stream_id,), countdown=countdown or None)
    return True


def sweep(due: Sequence[tuple[str, int]]) -> int:
    """The beat's sweep: :func:`stream_check` for every ``(queue, stream)`` found due; how many were sent.

    Runs whatever this process's breaker says (the sweep arrived through Redis, so Redis
    answers now, and the sweep exists to catch up after an outage): it closes the breaker
    first, and each check gets its retry on a fresh connection. Once a check fails even
    then, the breaker stays open and the rest wait for the next sweep.
    """
    if due:
        broker.reconnect()
    return sum(stream_check(queue, stream_id, check_due=False) for queue, stream_id in due)


def stream_checks(stream_id: int) -> None:
    """After a message commits: enqueue the stream's summarisation and extraction checks, and
    the vector backfill a moment later (:func:`message_vector_delay`).

    Never raises: the message is already stored, and the beat sweep or the
    worker's start-up sweep picks up a check that could not be sent. While the
    broker is known to be down (:mod:`memory.broker`) it returns at once.
    """
    if broker.is_down():
        return
    queues = tuple(TASKS)
    delay = message_vector_delay()
    keys = [lock_key(q, stream_id) for q in queues] + [queued_key(q, stream_id) for q in queues]
    if delay is not None:
        keys += [lock_key(VECTORS), queued_key(VECTORS)]
    try:
        # One round trip first: during a burst a check is queued or running for
        # most messages, and those need no database query at all.
        held = _mget(keys)
    except broker.REDIS_ERRORS as exc:
        broker.mark_down(exc)
        logger.warning("stream_check_enqueue_failed stream=%s error=%s", stream_id, exc)
        return
    if delay is not None and held[-2] is None and held[-1] is None:
        try:
            vector_backfill(countdown=delay)
        except Exception:
            logger.exception("vector_backfill_enqueue_error stream=%s", stream_id)
    free = [q for i, q in enumerate(queues) if held[i] is None and held[i + len(queues)] is None]
    if not free:
        return
    try:
        due = triggers.due_queues(stream_id, free)  # one statement for both queues
    except OperationalError as exc:  # a locked database: the sweeps pick the check up
        logger.warning("stream_check_enqueue_failed stream=%s error=%s", stream_id, exc)
        return
    except Exception:
        logger.exception("stream_check_enqueue_error stream=%s", stream_id)
        return
    for queue in due:
        try:
            stream_check(queue, stream_id, check_due=False)
        except Exception:
            logger.exception("stream_check_enqueue_error queue=%s stream=%s", queue, stream_id)


def _mget(keys: list[str]) -> list[Any]:
    """``MGET`` of ``keys``, tried once more on a fresh connection (:func:`memory.broker.reconnect`)."""
    try:
        return broker.client().mget(keys)
    except broker.REDIS_ERRORS:
        broker.reconnect()
        return broker.client().mget(keys)


def message_vector_delay() -> int | None:
    """Seconds between a stored message and the backfill that embeds it (``MESSAGE_VECTOR_DELAY``);
    ``None`` when messages queue no backfill: no embedder is configured, or the setting is
    negative (then the beat's backfill, every 3 minutes, embeds them)."""
    delay = settings.MESSAGE_VECTOR_DELAY
    if delay < 0:
        return None
    return delay if provider_config.get_embedder(serving=True) is not None else None


def vector_backfill(*, countdown: int = 0) -> bool:
    """Embed new rows soon: enqueue one backfill (``countdown`` seconds from now) unless one is
    queued or running.

    Never raises; while Redis is down the beat schedule (every 3 minutes) and
    the worker's start-up backfill find the rows by ``embedding IS NULL``.
    """
    if broker.is_down():
        return False
    for attempt in (1, 2):
        try:
            return _vector_backfill(countdown)
        except SEND_ERRORS as exc:
            if attempt == 1 and isinstance(exc, broker.REDIS_ERRORS):
                broker.reconnect()  # a half-open pooled connection: once more on a fresh one
                continue
            if isinstance(exc, broker.REDIS_ERRORS):
                broker.mark_down(exc)
            logger.warning("vector_backfill_enqueue_failed error=%s", exc)
            return False
    return False


def _vector_backfill(countdown: int) -> bool:
    client = broker.client()
    if client.exists(lock_key(VECTORS)):
        return False  # the running backfill looks again after it finishes
    marker = queued_key(VECTORS)
    if not client.set(marker, "1", nx=True, ex=QUEUED_TTL + countdown):
        return False
    _send_or_forget(marker, VECTORS_TASK, countdown=countdown or None)
    return True


def _send_or_forget(marker: str, name: str, args: Sequence[Any] = (), **options: Any) -> None:
    """Send a task whose queued marker was just set; drop the marker if the send fails (then re-raise)."""
    try:
        send(name, args, **options)
    except broker.BrokerUnavailable:
        forget_marker(marker)
        raise


def forget_marker(marker: str) -> None:
    """Drop a queued marker (best effort: it expires anyway)."""
    if broker.is_down():
        return
    try:
        broker.client().delete(marker)
    except broker.REDIS_ERRORS:
        pass
