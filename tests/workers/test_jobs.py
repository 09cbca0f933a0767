"""Job rows: every transition is a conditional UPDATE."""
from __future__ import annotations

import pytest

from memory.dispatch.jobs import job_create, job_fail, job_finish, job_progress, job_start

pytestmark = pytest.mark.django_db


def test_a_job_runs_from_queued_to_done():
    job = job_create(kind="import", total=10, params={"a": 1}, user="alice")
    assert (job.status, job.progress, job.percent) == ("queued", 0, 0)

    assert job_start(job_id=job.pk)
    assert job_progress(job_id=job.pk, progress=4)
    job.refresh_from_db()
    assert (job.status, job.progress, job.percent) == ("running", 4, 40) and job.started_at

    assert job_finish(job_id=job.pk, result={"ok": True}, params={})
    job.refresh_from_db()
    assert (job.status, job.progress, job.result, job.params, job.percent) == ("done", 10, {"ok": True}, {}, 100)
    assert job.finished and job.finished_at


def test_transitions_happen_once():
    job = job_create(kind="import")
    assert job_start(job_id=job.pk) and not job_start(job_id=job.pk)
    assert job_finish(job_id=job.pk) and not job_finish(job_id=job.pk)
    assert not job_fail(job_id=job.pk, error="late")
    assert not job_progress(job_id=job.pk, progress=99)
    job.refresh_from_db()
    assert (job.status, job.error) == ("done", "")


def test_a_queued_job_can_fail_and_the_error_is_short():
    job = job_create(kind="import")
    assert job_fail(job_id=job.pk, error="x" * 2000)
    job.refresh_from_db()
    assert job.status == "failed" and len(job.error) == 500
    assert not job_start(job_id=job.pk)


def test_missing_jobs_are_ignored():
    assert not job_start(job_id=424242)
    assert not job_finish(job_id=424242)
    assert not job_fail(job_id=424242, error="")
