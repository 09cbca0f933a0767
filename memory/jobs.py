"""Rows of the ``jobs`` table: long background work the console shows as progress bars.

Every state change is a conditional UPDATE (``filter(pk=…, status=OLD).update(…)``):
the return value says whether this caller made the transition, so a duplicate
delivery of a task, or two workers racing, never moves a finished job back.

``queued → running → done | failed``; ``queued → failed`` is allowed too (a job
that could not even start). Progress is only written while the job runs.
"""
from __future__ import annotations

from typing import Any

from django.utils import timezone

from memory.models import Job

__all__ = ["job_create", "job_fail", "job_finish", "job_progress", "job_start"]

ERROR_MAX_CHARS = 500

QUEUED = Job.Status.QUEUED
RUNNING = Job.Status.RUNNING
DONE = Job.Status.DONE
FAILED = Job.Status.FAILED


def job_create(*, kind: str, total: int = 0, params: dict[str, Any] | None = None, user: str = "") -> Job:
    """Insert a queued job (the caller enqueues the task that runs it)."""
    return Job.objects.create(kind=kind, total=max(0, int(total)), params=params or {}, created_by=user or "")


def job_start(*, job_id: int, total: int | None = None) -> bool:
    """``queued → running``; False if the job is missing or already past ``queued``."""
    fields: dict[str, Any] = {"status": RUNNING, "started_at": timezone.now()}
    if total is not None:
        fields["total"] = max(0, int(total))
    return Job.objects.filter(pk=job_id, status=QUEUED).update(**fields) == 1


def job_progress(*, job_id: int, progress: int, total: int | None = None) -> bool:
    """Record progress of a running job; False if it is not running (nothing written)."""
    fields: dict[str, Any] = {"progress": max(0, int(progress))}
    if total is not None:
        fields["total"] = max(0, int(total))
    return Job.objects.filter(pk=job_id, status=RUNNING).update(**fields) == 1


def job_finish(*, job_id: int, result: dict[str, Any] | None = None, params: dict[str, Any] | None = None) -> bool:
    """``running → done`` with its result; progress is set to the total.

    ``params`` replaces the stored parameters when given (an import drops its
    pasted text once it is no longer needed).
    """
    job = Job.objects.filter(pk=job_id).only("total").first()
    if job is None:
        return False
    fields: dict[str, Any] = {
        "status": DONE,
        "result": result or {},
        "progress": job.total,
        "finished_at": timezone.now(),
        "error": "",
    }
    if params is not None:
        fields["params"] = params
    return Job.objects.filter(pk=job_id, status=RUNNING).update(**fields) == 1


def job_fail(*, job_id: int, error: str, params: dict[str, Any] | None = None) -> bool:
    """``queued | running → failed`` with a short error text."""
    fields: dict[str, Any] = {"status": FAILED, "error": (error or "")[:ERROR_MAX_CHARS], "finished_at": timezone.now()}
    if params is not None:
        fields["params"] = params
    return Job.objects.filter(pk=job_id, status__in=[QUEUED, RUNNING]).update(**fields) == 1
