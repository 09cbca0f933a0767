"""Celery tasks of the tuning app: thin adapters over :mod:`tuning.evaluation`.

Both take only the job id; the job row carries the resolved parameters, and its
conditional state transitions make a duplicate delivery a no-op. ``acks_late``:
a worker killed mid-run leaves the message to be redelivered, and the job's
lease (its worker name and heartbeat) lets the start-up / beat sweep re-queue it.
Nothing imports this module but the worker: jobs are sent by name
(:data:`tuning.evaluation.JOB_TASKS`, through :mod:`memory.dispatch.enqueue`).
"""
from __future__ import annotations

import os
from typing import Any

from celery import shared_task

from memory import overrides
from memory.dispatch import jobs
from tuning import evaluation


# Safe to redeliver: a replay only reads, and job_start (queued → running) lets one delivery run it.
@shared_task(bind=True, name=evaluation.JOB_TASKS["evaluate"], ignore_result=True, acks_late=True,
             soft_time_limit=1800, time_limit=1860)
def evaluate_task(self: Any, job_id: int) -> bool:
    """Evaluate one parameter set by trace replay (job kind ``evaluate``)."""
    return evaluation.run_job(int(job_id), worker=self.request.hostname or "")


# Safe to redeliver: as evaluate_task.
@shared_task(bind=True, name=evaluation.JOB_TASKS["compare"], ignore_result=True, acks_late=True,
             soft_time_limit=1800, time_limit=1860)
def compare_task(self: Any, job_id: int) -> bool:
    """What-if comparison of two parameter sets on the same traces (job kind ``compare``)."""
    return evaluation.run_job(int(job_id), worker=self.request.hostname or "")


@shared_task(name="tuning.tasks.probe_overrides_task", ignore_result=True)
def probe_overrides_task(job_id: int) -> bool:
    """Record on a ``tuning_probe`` job which profile and overrides *this worker* sees.

    Diagnostics (and the integration test): proves an applied profile reached the
    worker processes without a restart.
    """
    if not jobs.job_start(job_id=int(job_id)):
        return False
    return jobs.job_finish(
        job_id=int(job_id),
        result={"profile": overrides.cached_active_profile(), "overrides": overrides.active_overrides(),
                "pid": os.getpid()},
    )
