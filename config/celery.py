"""The Celery application: Redis broker, JSON only, no result backend.

Job state lives in our own ``jobs`` table, so results are never stored.
When a worker is ready it releases locks left by its killed predecessor and
enqueues one edge-decay sweep, one vector backfill and one sweep of streams
with due work (see :func:`memory.tasks.worker_startup`).
"""
from __future__ import annotations

import os
import time

from celery import Celery
from celery.signals import worker_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("memory_console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

_started_at: float | None = None


@worker_init.connect
def _on_worker_init(**kwargs) -> None:
    """Load jieba's dictionary and IDF table and the local embedding model once, before the pool forks.

    Every child would otherwise pay 1–3 s on its first task; loaded here, the
    children share the parent's pages copy-on-write.
    """
    global _started_at
    _started_at = time.time()  # before any task of this worker can start a job (see worker_startup)

    import jieba.analyse  # noqa: F401  (builds the default TF-IDF table at import)

    from memory.engine import tokenize

    tokenize.warm_up()

    # The embedding model too (1–2 s, ~100 MB): loaded before the fork, the pool's
    # children share it and no task pays the load (nor the children's start-up timeout).
    from memory.providers.config import preload_embedder

    preload_embedder()


@worker_ready.connect
def _on_worker_ready(sender=None, **kwargs) -> None:
    # This module is imported with the settings (config/__init__.py), before the apps are loaded.
    from memory.tasks import worker_startup

    worker_startup(getattr(sender, "hostname", None), started_at=_started_at)
