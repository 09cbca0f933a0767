"""The broker's visibility timeout is chosen, not inherited: no running task is ever delivered twice."""
from __future__ import annotations

from django.conf import settings

import memory.pipeline.tasks  # noqa: F401  (registers the tasks)
import tuning.tasks  # noqa: F401
from config.celery import app


def _late_tasks():
    return {name: task for name, task in app.tasks.items()
            if not name.startswith("celery.") and getattr(task, "acks_late", False)}


def test_every_task_acknowledged_late_ends_before_its_message_becomes_visible_again():
    visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    assert visibility == settings.BROKER_VISIBILITY_TIMEOUT
    late = _late_tasks()
    assert "memory.tasks.summarize_stream_task" in late and len(late) >= 8
    for name, task in late.items():
        # a task without a hard limit could outlive any visibility timeout
        assert task.time_limit, f"{name} acknowledges late but has no hard time limit"
        # a retried task waits its backoff in the worker, unacknowledged, before it runs again
        delay = (task.retry_backoff_max or 0) if getattr(task, "autoretry_for", ()) else 0
        assert task.time_limit + delay < visibility, name


def test_the_documented_default_is_the_setting():
    text = (settings.BASE_DIR / "docs" / "CONFIGURATION.md").read_text("utf-8")
    assert f"`BROKER_VISIBILITY_TIMEOUT` ({settings.BROKER_VISIBILITY_TIMEOUT} s)" in text
    longest = max(task.time_limit for task in _late_tasks().values())
    deploy = (settings.BASE_DIR / "docs" / "DEPLOY.md").read_text("utf-8")
    assert f"{longest:,} s" in deploy  # the longest hard time limit it is derived from, as DEPLOY.md says
