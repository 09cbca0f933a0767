"""The Celery application: Redis broker, JSON only, no result backend.

Job state lives in our own ``jobs`` table, so results are never stored.
"""
from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("memory_console")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
