"""Celery tasks of the memory layer: thin adapters over :mod:`memory.pipeline` and services.

A task takes ids, runs a pipeline function and owns only the retry policy and
the per-stream exclusivity. Nothing here decides what is written.

**At most one summarisation and one extraction in flight per stream.** A task
holds a Redis lock (``memory:lock:<queue>:<stream>``) while it works; the lock
expires on its own after the task's hard time limit, and its token starts with
the worker's node name, so a worker restarted under the same name releases the
locks its killed predecessor left behind (:func:`worker_startup`).
:func:`memory.dispatch.enqueue.stream_check` skips a stream whose lock is held — the
holder re-checks the trigger after releasing it and re-enqueues itself while
work remains — and a short-lived ``memory:queued:…`` marker keeps a burst of
messages from queueing the same check many times. Every task is sent by name
through :mod:`memory.dispatch.enqueue`, which never imports this module.

**Retries** are declarative and narrow: only broker/Redis connection errors,
SQLite "database is locked" (``OperationalError``) and provider timeouts or
rate limits are retried, with exponential backoff and jitter. Model failures
of a batch are not retried here: the pipeline counts them and gives the batch
up after the third.
"""
from __future__ import annotations

import datetime
import logging
import os
import socket
import time
import uuid
from typing import Any

import redis
from celery import shared_task
from django.db import OperationalError
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import LockError

from memory import backends, broker, pipeline, services
from memory.dispatch import enqueue, jobs, triggers
from memory.pipeline import retention
from memory.privacy import forget
from memory.providers.chat import ProviderRateLimited, ProviderTimeout

logger = logging.getLogger(__name__)

__all__ = [
    "edges_decay_task",
    "expire_message_bodies_task",
    "extract_stream_task",
    "facts_sweep_task",
    "import_knowledge_task",
    "jobs_recover_task",
    "release_stale_locks",
    "retention_sweep_task",
    "stream_checks_sweep_task",
    "summarize_stream_task",
    "vectors_backfill_task",
    "worker_startup",
]

TRANSIENT = (
    broker.BrokerUnavailable,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    BrokerError,
    OperationalError,
    ProviderTimeout,
    ProviderRateLimited,
)
RETRY = {
    "autoretry_for": TRANSIENT,
    "retry_backoff": True,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 5,
}

STREAM_SOFT_LIMIT = 300
STREAM_HARD_LIMIT = 330
#: A lock outlives the task that holds it by a margin, never by much.
STREAM_LOCK_TIMEOUT = STREAM_HARD_LIMIT + 30
#: One task works through batches for at most this long, then re-enqueues itself.
STREAM_STEP_BUDGET = 120.0
#: After a counted model failure the batch is tried again this much later.
FAILURE_RETRY_DELAY = 30
#: After an unexpected error of a stream task (a bug, not a model failure) the stream is checked again this much later.
ERROR_RETRY_DELAY = 60
VECTORS_SOFT_LIMIT = 600
VECTORS_HARD_LIMIT = 660
VECTORS_LOCK_TIMEOUT = VECTORS_HARD_LIMIT + 30
#: Rows one backfill task embeds before handing over to a fresh task.
VECTORS_ROWS_PER_TASK = 400

#: Outcomes after which running again at once cannot get further (a batch < 4 stays < 4).
NO_PROGRESS = frozenset({"too_few", "disabled", "missing"})

_CAS_DELETE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


def _redis() -> redis.Redis:
    return broker.client()  # short timeouts, no client-side retries (memory/broker.py)


def _node_name(hostname: str | None) -> str:
    return hostname or f"{socket.gethostname()}:{os.getpid()}"


def _token(hostname: str | None) -> str:
    return f"{_node_name(hostname)}|{uuid.uuid4().hex}"


# --- stream work ------------------------------------------------------------------------------


def _run_stream_queue(queue: str, stream_id: int, hostname: str | None) -> dict[str, Any]:
    client = _redis()
    client.delete(enqueue.queued_key(queue, stream_id))
    lock = client.lock(enqueue.lock_key(queue, stream_id), timeout=STREAM_LOCK_TIMEOUT)
    if not lock.acquire(blocking=False, token=_token(hostname)):
        return {"status": "busy", "stream_id": stream_id}
    step = pipeline.summarize_stream if queue == triggers.SUMMARIZE else pipeline.extract_stream
    deadline = time.monotonic() + STREAM_STEP_BUDGET
    statuses: list[str] = []
    unexpected = False
    try:
        while True:
            outcome = step(stream_id=stream_id)
            statuses.append(outcome.status)
            if not outcome.more or time.monotonic() >= deadline:
                break
    except Exception as exc:
        # Celery retries the TRANSIENT errors (RETRY); nothing retries an unexpected one (a bug, not
        # a model failure), and a message stored while the lock was held skipped its own enqueue.
        unexpected = not isinstance(exc, TRANSIENT)
        if unexpected:
            logger.exception("stream_task_error queue=%s stream=%s: checking it again in %ss",
                             queue, stream_id, ERROR_RETRY_DELAY)
        raise
    finally:
        try:
            lock.release()
        except LockError:  # expired: the work is done and a newer holder may exist
            logger.warning("stream_lock_expired queue=%s stream=%s", queue, stream_id)
        if unexpected:  # after the release: the later check must find the stream free
            enqueue.stream_check(queue, stream_id, countdown=ERROR_RETRY_DELAY)
    # Re-check after releasing: a message stored while the lock was held skipped its own enqueue.
    if outcome.status == "failed":
        enqueue.stream_check(queue, stream_id, countdown=FAILURE_RETRY_DELAY)
    elif outcome.status not in NO_PROGRESS:
        enqueue.stream_check(queue, stream_id)
    return {"status": outcome.status, "stream_id": stream_id, "steps": statuses}


# Safe to redeliver: the batch is recomputed from the messages still pending and the
# episode, cues and archive marks are written in one transaction that first re-checks
# that the batch is still pending, so a rerun after a crash redoes it exactly once.
@shared_task(bind=True, name=enqueue.SUMMARIZE_TASK, acks_late=True, soft_time_limit=STREAM_SOFT_LIMIT,
             time_limit=STREAM_HARD_LIMIT, **RETRY)
def summarize_stream_task(self: Any, stream_id: int) -> dict[str, Any]:
    """Summarise a stream's due batches (:func:`memory.pipeline.summarize_stream`)."""
    return _run_stream_queue(triggers.SUMMARIZE, int(stream_id), self.request.hostname)


# Safe to redeliver: the batch starts at the stored cursor, and facts, knowledge, edges
# and the new cursor are written in one transaction that first re-reads the cursor;
# facts and knowledge are deduplicated by content, so a rerun cannot double them.
@shared_task(bind=True, name=enqueue.EXTRACT_TASK, acks_late=True, soft_time_limit=STREAM_SOFT_LIMIT,
             time_limit=STREAM_HARD_LIMIT, **RETRY)
def extract_stream_task(self: Any, stream_id: int) -> dict[str, Any]:
    """Extract facts and knowledge from a stream's due batches (:func:`memory.pipeline.extract_stream`)."""
    return _run_stream_queue(triggers.EXTRACT, int(stream_id), self.request.hostname)


# Safe to redeliver: it only reads which streams are due and enqueues deduplicated checks.
@shared_task(name="memory.tasks.stream_checks_sweep_task", acks_late=True, soft_time_limit=60, time_limit=90,
             **RETRY)
def stream_checks_sweep_task() -> int:
    """Enqueue the checks of every stream whose summarisation or extraction is due (:func:`enqueue.sweep`)."""
    return enqueue.sweep(list(triggers.streams_due()))


# --- vectors, decay, sweep ------------------------------------------------------------------


# Safe to redeliver: rows are selected by `embedding IS NULL`, so a rerun embeds only
# what is still missing and rewrites nothing already stored.
@shared_task(bind=True, name=enqueue.VECTORS_TASK, acks_late=True, soft_time_limit=VECTORS_SOFT_LIMIT,
             time_limit=VECTORS_HARD_LIMIT, **RETRY)
def vectors_backfill_task(self: Any) -> dict[str, Any]:
    """Embed up to 400 rows whose vector is missing; re-enqueue while batches come back full."""
    client = _redis()
    client.delete(enqueue.queued_key(enqueue.VECTORS))
    lock = client.lock(enqueue.lock_key(enqueue.VECTORS), timeout=VECTORS_LOCK_TIMEOUT)
    if not lock.acquire(blocking=False, token=_token(self.request.hostname)):
        return {"status": "busy"}
    try:
        result = pipeline.backfill_vectors(max_rows=VECTORS_ROWS_PER_TASK)
    finally:
        try:
            lock.release()
        except LockError:
            logger.warning("vector_lock_expired")
    if result.more or (result.enabled and not result.failed and pipeline.vectors_pending_after(result.last_ids)):
        enqueue.vector_backfill()
    return result.as_dict()


# Safe to redeliver: retention is computed from stored timestamps, so a rerun at the
# same time freezes nothing new (and edges are never deleted).
@shared_task(name="memory.tasks.edges_decay_task", acks_late=True, soft_time_limit=120, time_limit=150, **RETRY)
def edges_decay_task() -> int:
    """Freeze decayed association edges (event ``edges_decayed``)."""
    return pipeline.edges_decay()


# Safe to redeliver: a passive checkpoint copies what it can and waits for nobody.
@shared_task(name="memory.tasks.wal_checkpoint_task", acks_late=True, soft_time_limit=50, time_limit=60, expires=55)
def wal_checkpoint_task() -> list[int] | None:
    """SQLite: copy the write-ahead log back into the database file (``backends.checkpoint``)."""
    done = backends.checkpoint()
    return None if done is None else list(done)


# Safe to redeliver: freezing is decided from stored timestamps; a rerun freezes nothing new.
@shared_task(name="memory.tasks.facts_sweep_task", acks_late=True, soft_time_limit=120, time_limit=150, **RETRY)
def facts_sweep_task() -> int:
    """Freeze facts whose retention fell below the threshold."""
    return services.sweep()


# Safe to redeliver: it deletes by age and count; a rerun finds nothing more to delete.
@shared_task(name="memory.tasks.retention_sweep_task", acks_late=True, soft_time_limit=300, time_limit=330, **RETRY)
def retention_sweep_task() -> dict[str, int]:
    """Prune ``pipeline_events`` and ``turns`` to their limits (:mod:`memory.pipeline.retention`)."""
    deleted = retention.retention_sweep()
    if deleted["events"] or deleted["turns"]:
        logger.info("retention_swept events=%d turns=%d", deleted["events"], deleted["turns"])
    return deleted


# Safe to redeliver: it empties bodies selected by age and state; a rerun finds none left.
@shared_task(name="memory.tasks.expire_message_bodies_task", acks_late=True, soft_time_limit=600, time_limit=660,
             **RETRY)
def expire_message_bodies_task() -> int:
    """Empty old message bodies (``MESSAGE_RETENTION_DAYS``; 0 = off) — :func:`memory.privacy.forget.expire_message_bodies`."""
    emptied = forget.expire_message_bodies(days=forget.message_retention_days())
    if emptied:
        logger.info("message_bodies_expired count=%d", emptied)
    return emptied


# --- import centre ------------------------------------------------------------------------------


# Safe to redeliver: knowledge is deduplicated by content, so a rerun of a half-done
# import re-finds its rows; a finished job returns its stored result. Not retried:
# a failure marks the job and its batch failed for the operator to see.
@shared_task(bind=True, name=enqueue.IMPORT_TASK, acks_late=True, soft_time_limit=1800, time_limit=1860)
def import_knowledge_task(self: Any, job_id: int, batch_id: int | None = None) -> dict[str, Any] | None:
    """Run an import job (:func:`memory.pipeline.run_import`); a missing job, or one of another batch, is a no-op."""
    return pipeline.run_import(job_id=int(job_id), batch_id=None if batch_id is None else int(batch_id),
                               worker=self.request.hostname or "")


# Safe to redeliver: every transition is conditional on the job still running.
@shared_task(name="memory.tasks.jobs_recover_task", acks_late=True, soft_time_limit=60, time_limit=90, **RETRY)
def jobs_recover_task() -> dict[str, list[int]]:
    """Re-queue or fail running jobs whose worker stopped sending heartbeats (:func:`memory.dispatch.jobs.recover_orphaned_jobs`)."""
    return jobs.recover_orphaned_jobs()


# --- worker start-up ----------------------------------------------------------------------------


def release_stale_locks(hostname: str) -> int:
    """Delete the locks held under this worker's node name by its previous (dead) process.

    Node names are unique among live workers, so a lock carrying this name but
    taken before this start can only belong to a killed predecessor.
    """
    client = _redis()
    released = 0
    prefix = f"{hostname}|".encode()
    for key in client.scan_iter(match=f"{enqueue.LOCK_PREFIX}*", count=500):
        value = client.get(key)
        if value is not None and value.startswith(prefix):
            released += int(client.eval(_CAS_DELETE, 1, key, value))
    if released:
        logger.warning("stale_locks_released worker=%s count=%d", hostname, released)
    return released


def worker_startup(hostname: str | None, *, started_at: float | None = None) -> None:
    """What a worker does once it is ready to consume.

    Re-queues (or fails) the jobs its killed predecessor was running and the
    jobs whose lease ran out, releases its predecessor's locks and queued
    markers, then enqueues one edge-decay sweep (edges kept decaying while no
    worker ran), one vector backfill, one sweep of due streams (work left by a
    killed worker) and one retention sweep. ``started_at`` (epoch seconds) is
    when this worker booted: a job of this node name with an older heartbeat
    belonged to its predecessor.
    """
    try:
        started = datetime.datetime.fromtimestamp(started_at or time.time(), tz=datetime.UTC)
        recovered = jobs.recover_orphaned_jobs(worker=hostname, worker_started=started)
        if recovered["requeued"] or recovered["failed"]:
            logger.warning("orphaned_jobs_recovered worker=%s requeued=%s failed=%s", hostname,
                           recovered["requeued"], recovered["failed"])
    except Exception:  # start-up housekeeping must never stop the worker
        logger.exception("job_recovery_failed worker=%s", hostname)
    try:
        client = _redis()
        if hostname:
            release_stale_locks(hostname)
        for key in client.scan_iter(match=f"{enqueue.QUEUED_PREFIX}*", count=500):
            client.delete(key)
        for task in (edges_decay_task, vectors_backfill_task, stream_checks_sweep_task, retention_sweep_task):
            enqueue.send(task.name)
    except Exception:  # start-up housekeeping must never stop the worker
        logger.exception("worker_startup_failed worker=%s", hostname)
