"""Rows of the ``jobs`` table: long background work the console shows as progress bars.

Every state change is a conditional UPDATE (``filter(pk=…, status=OLD).update(…)``):
the return value says whether this caller made the transition, so a duplicate
delivery of a task, or two workers racing, never moves a finished job back.

``queued → running → done | failed``; ``queued → failed`` is allowed too (a job
that could not even start). Progress is only written while the job runs.

**Leases.** A running job records its worker's node name; its start and every
progress write refresh ``heartbeat_at``. :func:`recover_orphaned_jobs` (worker
start-up and beat) finds running jobs whose worker is gone — the same node name
starting again (its predecessor was killed), or no heartbeat for
``JOB_LEASE_SECONDS`` — and moves them ``running → queued`` to be sent again
(kinds whose task is safe to rerun, up to ``JOB_MAX_ATTEMPTS`` starts) or
``running → failed`` with the reason.

**Which kinds rerun** is a registry, job kind → registered task name
(:data:`RERUNNABLE`): this module sends the task by name through
:mod:`memory.dispatch.enqueue` and imports no task module; an app whose jobs rerun safely
registers its kinds in its ``AppConfig.ready`` (:func:`register_rerunnable`).
"""
from __future__ import annotations

import datetime
import logging
from typing import Any

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from memory import broker
from memory.dispatch import enqueue
from memory.models import ImportBatch, Job

logger = logging.getLogger(__name__)

__all__ = [
    "RERUNNABLE",
    "job_create",
    "job_fail",
    "job_finish",
    "job_progress",
    "job_requeue",
    "job_start",
    "recover_orphaned_jobs",
    "register_rerunnable",
]

ERROR_MAX_CHARS = 500
WORKER_GONE = "运行它的工作进程（{worker}）已退出"

QUEUED = Job.Status.QUEUED
RUNNING = Job.Status.RUNNING
DONE = Job.Status.DONE
FAILED = Job.Status.FAILED

#: Job kinds whose task is safe to run again from the start (``task(job_id)``) → the task's registered name.
RERUNNABLE: dict[str, str] = {"import": enqueue.IMPORT_TASK}


def register_rerunnable(kind: str, task_name: str) -> None:
    """Let :func:`recover_orphaned_jobs` re-queue jobs of ``kind`` by sending ``task_name`` with the job id."""
    RERUNNABLE[kind] = task_name


def job_create(*, kind: str, total: int = 0, params: dict[str, Any] | None = None, user: str = "") -> Job:
    """Insert a queued job (the caller enqueues the task that runs it)."""
    return Job.objects.create(kind=kind, total=max(0, int(total)), params=params or {}, created_by=user or "")


def job_start(*, job_id: int, total: int | None = None, worker: str = "") -> bool:
    """``queued → running`` under ``worker`` (its node name); False if missing or already past ``queued``."""
    now = timezone.now()
    fields: dict[str, Any] = {"status": RUNNING, "started_at": now, "heartbeat_at": now, "worker": (worker or "")[:200],
                              "attempts": F("attempts") + 1, "error": ""}
    if total is not None:
        fields["total"] = max(0, int(total))
    return Job.objects.filter(pk=job_id, status=QUEUED).update(**fields) == 1


def job_progress(*, job_id: int, progress: int, total: int | None = None) -> bool:
    """Record progress (and a heartbeat) of a running job; False if it is not running (nothing written)."""
    fields: dict[str, Any] = {"progress": max(0, int(progress)), "heartbeat_at": timezone.now()}
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


def job_requeue(*, job_id: int, reason: str) -> bool:
    """``running → queued`` (the caller sends its task again); ``reason`` stays visible until it restarts."""
    fields = {"status": QUEUED, "error": (reason or "")[:ERROR_MAX_CHARS], "worker": "", "heartbeat_at": None}
    return Job.objects.filter(pk=job_id, status=RUNNING).update(**fields) == 1


def recover_orphaned_jobs(
    *, worker: str | None = None, worker_started: datetime.datetime | None = None, now: datetime.datetime | None = None,
) -> dict[str, list[int]]:
    """Re-queue or fail running jobs whose worker is gone; returns ``{"requeued": [...], "failed": [...]}``.

    1. Orphans are running jobs of ``worker`` whose last heartbeat predates
       ``worker_started`` (called by that node as it starts: such a job belonged
       to its killed predecessor), and jobs with no heartbeat for ``JOB_LEASE_SECONDS``.
    2. A kind whose task reruns safely (import: knowledge is deduplicated by
       content; evaluate / compare: read-only replays) goes back to ``queued``
       and its task is sent again, until it has been started ``JOB_MAX_ATTEMPTS``
       times; then, and for every other kind, the job fails with the reason.
    3. Each transition is conditional on the job still running, so two sweeps
       racing move a job once. If the broker is down the job fails instead
       (a queued job nobody will run would block nothing but lie on the card).
    """
    now = now or timezone.now()
    lease = datetime.timedelta(seconds=settings.JOB_LEASE_SECONDS)
    max_attempts = settings.JOB_MAX_ATTEMPTS
    stale = Q(heartbeat_at__lt=now - lease) | Q(heartbeat_at__isnull=True, started_at__lt=now - lease)
    if worker:
        stale |= Q(worker=worker, heartbeat_at__lt=worker_started or now)
    orphans = list(Job.objects.filter(Q(status=RUNNING) & stale).values("id", "kind", "worker", "attempts", "heartbeat_at"))
    out: dict[str, list[int]] = {"requeued": [], "failed": []}
    if not orphans:
        return out
    for job in orphans:
        gone = WORKER_GONE.format(worker=job["worker"] or "?")
        last = job["heartbeat_at"].isoformat(timespec="seconds") if job["heartbeat_at"] else "-"
        task_name = RERUNNABLE.get(job["kind"])
        if task_name is not None and job["attempts"] < max_attempts:
            reason = f"{gone}（最后心跳 {last}），已重新排队，第 {job['attempts'] + 1} 次尝试"
            if job_requeue(job_id=job["id"], reason=reason):
                try:
                    enqueue.publish(task_name, (job["id"],))
                except broker.BrokerUnavailable as exc:
                    _fail_orphan(job["id"], job["kind"], f"{gone}；重新排队失败：{exc}")
                    out["failed"].append(job["id"])
                    continue
                out["requeued"].append(job["id"])
                logger.warning("job_requeued job=%s kind=%s worker=%s attempts=%s", job["id"], job["kind"],
                               job["worker"], job["attempts"])
            continue
        why = f"{gone}（最后心跳 {last}）" + (f"，已尝试 {job['attempts']} 次" if task_name is not None else "")
        if _fail_orphan(job["id"], job["kind"], why):
            out["failed"].append(job["id"])
            logger.warning("job_failed_orphaned job=%s kind=%s worker=%s", job["id"], job["kind"], job["worker"])
    return out


def _fail_orphan(job_id: int, kind: str, error: str) -> bool:
    """Fail a job (queued or running) whose worker is gone; an import's batch fails with it."""
    job = Job.objects.filter(pk=job_id).only("params").first()
    params = {k: v for k, v in (job.params or {}).items() if k != "text"} if job is not None else None
    failed = job_fail(job_id=job_id, error=error, params=params if kind == "import" else None)
    if failed and kind == "import" and job is not None:
        ImportBatch.objects.filter(pk=(job.params or {}).get("batch_id"), status=ImportBatch.Status.RUNNING).update(
            status=ImportBatch.Status.FAILED, error=error[:ERROR_MAX_CHARS], finished_at=int(timezone.now().timestamp() * 1000)
        )
    return failed
