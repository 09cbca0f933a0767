"""The Celery application: Redis broker, JSON only, no result backend.

Job state lives in our own ``jobs`` table, so results are never stored.
When a worker is ready it releases locks left by its killed predecessor and
enqueues one edge-decay sweep, one vector backfill and one sweep of streams
with due work (see :func:`memory.tasks.worker_startup`).
"""
from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("memory_console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _on_worker_ready(sender=None, **kwargs) -> None:
    from memory.tasks import worker_startup

    worker_startup(getattr(sender, "hostname", None))
