"""Running jobs whose worker is gone are re-queued (safe kinds) or failed with the reason."""
from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from memory import pipeline
from memory.dispatch.jobs import job_create, job_progress, job_start, recover_orphaned_jobs
from memory.models import ImportBatch, Job
from memory.pipeline.tasks import worker_startup

pytestmark = pytest.mark.django_db

NODE = "w1@host"


def _running(kind: str, *, worker: str = NODE, age_s: float = 0, attempts: int = 0) -> Job:
    job = job_create(kind=kind, total=10)
    Job.objects.filter(pk=job.pk).update(attempts=attempts)
    assert job_start(job_id=job.pk, worker=worker)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - datetime.timedelta(seconds=age_s))
    job.refresh_from_db()
    return job


def test_start_and_progress_record_the_lease():
    job = job_create(kind="import", total=10)
    assert job_start(job_id=job.pk, worker=NODE)
    job.refresh_from_db()
    first = job.heartbeat_at
    assert (job.worker, job.attempts) == (NODE, 1) and first is not None
    assert job_progress(job_id=job.pk, progress=3)
    job.refresh_from_db()
    assert job.heartbeat_at >= first


def test_a_fresh_job_of_another_worker_is_left_alone(burst, redis_db, settings):
    settings.JOB_LEASE_SECONDS = 900
    job = _running("evaluate", worker="other@host", age_s=10)
    assert recover_orphaned_jobs(worker=NODE) == {"requeued": [], "failed": []}
    job.refresh_from_db()
    assert job.status == "running" and burst.calls == []


def test_the_predecessors_jobs_are_requeued_when_the_node_starts_again(burst, redis_db):
    evaluate = _running("evaluate", age_s=1)
    compare = _running("compare", age_s=1)
    started = timezone.now()
    fresh = _running("evaluate", age_s=-5)  # started by this very worker after it booted
    out = recover_orphaned_jobs(worker=NODE, worker_started=started)
    assert sorted(out["requeued"]) == sorted([evaluate.pk, compare.pk]) and out["failed"] == []
    assert sorted(burst.names()) == ["compare_task", "evaluate_task"]
    evaluate.refresh_from_db()
    assert evaluate.status == "queued" and "w1@host" in evaluate.error and "重新排队" in evaluate.error
    fresh.refresh_from_db()
    assert fresh.status == "running"
    # the redelivered task runs it again; the requeue note goes once it restarts
    assert job_start(job_id=evaluate.pk, worker=NODE)
    evaluate.refresh_from_db()
    assert (evaluate.status, evaluate.attempts, evaluate.error) == ("running", 2, "")


def test_an_expired_lease_is_recovered_by_the_beat_sweep(burst, redis_db, settings):
    settings.JOB_LEASE_SECONDS = 60
    stale = _running("compare", worker="gone@host", age_s=120)
    out = recover_orphaned_jobs()
    assert out["requeued"] == [stale.pk]
    assert burst.calls == [("tuning.tasks.compare_task", (stale.pk,), {})]


def test_after_the_last_attempt_the_job_fails_with_the_reason(burst, redis_db, settings):
    settings.JOB_MAX_ATTEMPTS = 3
    job = _running("evaluate", attempts=2, age_s=1)  # this start was its third
    out = recover_orphaned_jobs(worker=NODE, worker_started=timezone.now())
    assert out == {"requeued": [], "failed": [job.pk]}
    job.refresh_from_db()
    assert job.status == "failed" and "w1@host" in job.error and "3 次" in job.error
    assert burst.calls == []


def test_a_kind_that_cannot_rerun_fails_at_once(burst, redis_db):
    job = _running("tuning_probe", age_s=1)
    assert recover_orphaned_jobs(worker=NODE, worker_started=timezone.now())["failed"] == [job.pk]


def test_an_import_whose_requeue_cannot_be_sent_fails_with_its_batch(redis_db, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    job = pipeline.start_import(text="龙井产自杭州。", origin_name="t", enqueue=False)
    assert job_start(job_id=job.pk, worker=NODE)
    out = recover_orphaned_jobs(worker=NODE, worker_started=timezone.now() + datetime.timedelta(seconds=1))
    assert out["failed"] == [job.pk]
    job.refresh_from_db()
    batch = ImportBatch.objects.get(pk=job.params["batch_id"])
    assert job.status == "failed" and "重新排队失败" in job.error and "text" not in job.params
    assert batch.status == "failed" and batch.error == job.error


def test_worker_startup_recovers_before_anything_else(burst, redis_db):
    job = _running("import", age_s=1)
    pipeline_job = Job.objects.get(pk=job.pk)
    Job.objects.filter(pk=job.pk).update(params={"batch_id": None, "text": "x"})
    worker_startup(NODE, started_at=timezone.now().timestamp())
    pipeline_job.refresh_from_db()
    assert pipeline_job.status == "queued"
    assert burst.names()[0] == "import_knowledge_task"
