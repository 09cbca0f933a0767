"""The Celery application: Redis broker, JSON only, no result backend.

Job state lives in our own ``jobs`` table, so results are never stored.
When a worker is ready it releases locks left by its killed predecessor and
enqueues one edge-decay sweep, one vector backfill and one sweep of streams
with due work (see :func:`memory.pipeline.tasks.worker_startup`).
"""
from __future__ import annotations

import logging
import os
import time

from celery import Celery
from celery.signals import after_setup_logger, beat_init, celeryd_init, worker_init, worker_ready

from config.logs import quiet_routine_tasks
from config.startup import missing_secret_key

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

logger = logging.getLogger(__name__)

app = Celery("memory_console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()  # each app's tasks.py (tuning.tasks)
app.autodiscover_tasks(["memory.pipeline"])  # memory's live in its pipeline package

_started_at: float | None = None


@celeryd_init.connect
def _on_celeryd_init(**kwargs) -> None:
    _refuse_without_secret_key("worker")


@beat_init.connect
def _on_beat_init(**kwargs) -> None:
    _refuse_without_secret_key("beat")


def _refuse_without_secret_key(process: str) -> None:
    """DEBUG off without DJANGO_SECRET_KEY: exit with the sentence (config/startup.py), before any broker connection.

    A ``SystemExit``: Celery logs and swallows an ``Exception`` raised by a signal's receiver."""
    why = missing_secret_key(process)
    if why:
        raise SystemExit(why)


@worker_init.connect
def _on_worker_init(**kwargs) -> None:
    """Load jieba's dictionary and IDF table and the local embedding model once, before the pool forks.

    Every child would otherwise pay 1–3 s on its first task; loaded here, the
    children share the parent's pages copy-on-write.
    """
    global _started_at
    _started_at = time.time()  # before any task of this worker can start a job (see worker_startup)
    lower_priority()

    import jieba.analyse  # noqa: F401  (builds the default TF-IDF table at import)

    from memory.engine import tokenize

    tokenize.warm_up()

    # The embedding model too (1–2 s, ~100 MB): loaded before the fork, the pool's
    # children share it and no task pays the load (nor the children's start-up timeout).
    from memory.providers.config import preload_embedder

    preload_embedder()

    from memory import backends
    from memory.search import residency  # the project's modules load with Django, after this module

    backends.checkpoint_on_commit()  # SQLite: the worker's commits, not the web's, copy the log back
    residency.settle_process()  # before the fork: the children share these pages and the collector skips them


def lower_priority() -> int:
    """Raise this process's niceness to ``settings.WORKER_NICENESS`` (never lower it); the new niceness.

    Background work on a host shared with gunicorn then takes the cores only when the
    web processes leave them idle, so a turn's latency does not depend on how busy
    summarisation is (BENCHMARKS.md: the bot API with a real worker). Where the kernel
    groups processes by session (``sched_autogroup``), niceness only orders processes
    of one session: a worker that leads its own session (started by a supervisor, or
    ``setsid``) also lowers its session group's weight, which only it and its children
    share; a worker sharing a session with the web (``make run``) needs no more than its
    own niceness.
    """
    from django.conf import settings  # this module loads with the settings (config/__init__.py): read them late

    current = os.nice(0)
    target = settings.WORKER_NICENESS
    if target > current:
        current = os.nice(target - current)
    if target > 0 and os.getsid(0) == os.getpid():
        try:
            with open("/proc/self/autogroup", "w") as group:
                group.write(str(target))
        except OSError:  # no autogroup (other kernels, cgroup schedulers): the niceness stands alone
            pass
    logger.info("worker_niceness niceness=%s", current)
    return current


@after_setup_logger.connect
def _on_setup_logger(**kwargs) -> None:
    # The beat's sweeps run every few minutes and log a line of their own when they find work:
    # Celery's "received / succeeded / Sending due task" lines about them are left out (config/logs.py).
    quiet_routine_tasks({entry["task"] for entry in app.conf.beat_schedule.values()})


@worker_ready.connect
def _on_worker_ready(sender=None, **kwargs) -> None:
    # This module is imported with the settings (config/__init__.py), before the apps are loaded.
    from memory.pipeline.tasks import worker_startup

    worker_startup(getattr(sender, "hostname", None), started_at=_started_at)
