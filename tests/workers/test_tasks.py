"""Celery adapters: called directly (twice), enqueue-on-commit, locks and redelivery, against the real Redis."""
from __future__ import annotations

import json

import pytest

from memory import pipeline, services
from memory.dispatch import enqueue
from memory.models import Episode, Fact, ImportBatch, Job, MemoryEdge, MemoryNode, PipelineEvent
from memory.pipeline import tasks
from tests.workers.conftest import T0, FakeEmbedder, make_person, make_stream, post_messages

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _offline_embeddings(monkeypatch):
    """Tasks build their providers from settings; keep embeddings fast and deterministic."""
    from memory.providers import config

    monkeypatch.setattr(config, "get_embedder", lambda **_: FakeEmbedder())


def test_messages_enqueue_the_stream_checks_after_commit(settings, redis_db, burst, django_capture_on_commit_callbacks):
    settings.MEMORY_ENQUEUE_TASKS = True
    stream = make_stream()
    post_messages(stream, 47)
    assert burst.calls == []  # callbacks of the test transaction never ran

    with django_capture_on_commit_callbacks(execute=True):
        post_messages(stream, 1, start=47)

    assert sorted(burst.names()) == ["extract_stream_task", "summarize_stream_task", "vectors_backfill_task"]
    checks = [(name, args) for name, args, _ in burst.calls if name != enqueue.VECTORS_TASK]
    assert all(args == (stream.pk,) for _, args in checks)


def test_a_message_queues_its_vector_backfill_a_moment_later(settings, redis_db, burst,
                                                           django_capture_on_commit_callbacks):
    """The line is embedded by a worker before the next turns read it, not on their request path;
    the delay keeps the embedding out of the reply to the line itself."""
    settings.MEMORY_ENQUEUE_TASKS = True
    settings.MESSAGE_VECTOR_DELAY = 3
    stream = make_stream()
    with django_capture_on_commit_callbacks(execute=True):
        post_messages(stream, 1)

    sent = [(name, options) for (name, _, _), options in zip(burst.calls, burst.options, strict=True)
            if name == enqueue.VECTORS_TASK]
    assert [options.get("countdown") for _, options in sent] == [3]
    assert 3 < redis_db.ttl("memory:queued:vectors") <= enqueue.QUEUED_TTL + 3


def test_a_burst_of_messages_queues_one_vector_backfill(settings, redis_db, burst, django_capture_on_commit_callbacks):
    settings.MEMORY_ENQUEUE_TASKS = True
    stream, other = make_stream(), make_stream("g2")
    with django_capture_on_commit_callbacks(execute=True):
        post_messages(stream, 5)
        post_messages(other, 5, start=100)
    assert burst.names().count("vectors_backfill_task") == 1

    redis_db.delete("memory:queued:vectors")
    redis_db.set("memory:lock:vectors", "worker|abc", ex=60)  # a backfill is running: it looks again when done
    with django_capture_on_commit_callbacks(execute=True):
        post_messages(stream, 1, start=5)
    assert burst.names().count("vectors_backfill_task") == 1


def test_an_edited_message_queues_its_new_vector(settings, redis_db, burst, django_capture_on_commit_callbacks):
    settings.MEMORY_ENQUEUE_TASKS = True
    settings.MESSAGE_VECTOR_DELAY = 2
    stream = make_stream()
    message_id = post_messages(stream, 1)[0]
    with django_capture_on_commit_callbacks(execute=True):
        services.update_message_content(message_id=message_id, content="改过的内容")
    assert burst.names() == ["vectors_backfill_task"]
    assert burst.options[0].get("countdown") == 2

    redis_db.delete("memory:queued:vectors")
    with django_capture_on_commit_callbacks(execute=True):  # the same text: the vector stands
        services.update_message_content(message_id=message_id, content="改过的内容")
    assert burst.names() == ["vectors_backfill_task"]


@pytest.mark.parametrize("why", ["negative delay", "no embedder"])
def test_messages_queue_no_vector_backfill_when_it_is_off(settings, redis_db, burst, monkeypatch, why,
                                                          django_capture_on_commit_callbacks):
    from memory.providers import config

    settings.MEMORY_ENQUEUE_TASKS = True
    if why == "negative delay":
        settings.MESSAGE_VECTOR_DELAY = -1
    else:
        monkeypatch.setattr(config, "get_embedder", lambda **_: None)
    with django_capture_on_commit_callbacks(execute=True):
        post_messages(make_stream(), 48)
    assert "vectors_backfill_task" not in burst.names()
    assert sorted(set(burst.names())) == ["extract_stream_task", "summarize_stream_task"]


def test_a_burst_of_messages_queues_each_check_once(settings, redis_db, burst, django_capture_on_commit_callbacks):
    settings.MEMORY_ENQUEUE_TASKS = True
    stream = make_stream()
    post_messages(stream, 48)

    for _ in range(5):
        enqueue.stream_checks(stream.pk)

    assert sorted(burst.names()) == ["extract_stream_task", "summarize_stream_task", "vectors_backfill_task"]


def test_a_stream_that_is_not_due_is_not_queued(redis_db, burst):
    stream = make_stream()
    post_messages(stream, 10)
    enqueue.stream_checks(stream.pk)
    assert burst.names() == ["vectors_backfill_task"]  # the messages' vectors, nothing of the stream


def test_a_held_lock_skips_the_enqueue_and_the_task(redis_db, burst):
    stream = make_stream()
    post_messages(stream, 48)
    redis_db.set(f"memory:lock:summarize:{stream.pk}", "other-worker|abc", ex=60)

    enqueue.stream_check("summarize", stream.pk)
    result = tasks.summarize_stream_task(stream.pk)

    assert burst.calls == []
    assert result["status"] == "busy" and not Episode.objects.exists()


def test_summarize_task_twice_writes_one_episode_and_releases_its_lock(redis_db, burst):
    stream = make_stream()
    post_messages(stream, 48)

    first = tasks.summarize_stream_task(stream.pk)
    second = tasks.summarize_stream_task(stream.pk)

    assert (first["status"], second["status"]) == ("idle", "idle") or first["steps"] == ["written"]
    assert Episode.objects.count() == 1
    assert not redis_db.keys("memory:lock:*")
    assert burst.calls == []  # 32 pending: nothing left to re-enqueue


def test_extract_task_twice_extracts_each_batch_once(redis_db, burst):
    stream = make_stream("d1", kind="direct")
    post_messages(stream, 40, speakers=[make_person("u1", "小明")])

    tasks.extract_stream_task(stream.pk)
    tasks.extract_stream_task(stream.pk)

    # 40 after cursor 0 → one batch of 12 → 28 left, below the trigger of 32.
    assert PipelineEvent.objects.filter(kind="memory_extract").count() == 1
    assert Fact.objects.exists() and MemoryEdge.objects.exists()


def test_a_failed_batch_is_retried_later(redis_db, burst, monkeypatch):
    stream = make_stream()
    post_messages(stream, 48)

    class Broken:
        label = "broken"

        def summarise(self, lines, participants=()):
            return None

    from memory.providers import config

    monkeypatch.setattr(config, "get_summariser", lambda: Broken())

    result = tasks.summarize_stream_task(stream.pk)

    assert result["status"] == "failed"
    assert burst.names() == ["summarize_stream_task"]


def test_an_unexpected_error_frees_the_stream_and_checks_it_again_later(redis_db, burst, monkeypatch):
    stream = make_stream()
    post_messages(stream, 48)

    def broken(**kwargs):
        raise KeyError("a bug in the pipeline")

    monkeypatch.setattr(pipeline, "summarize_stream", broken)
    with pytest.raises(KeyError):
        tasks.summarize_stream_task(stream.pk)

    assert not redis_db.exists(enqueue.lock_key("summarize", stream.pk))
    assert burst.names() == ["summarize_stream_task"]  # not only at the next beat sweep
    assert burst.options[-1]["countdown"] == tasks.ERROR_RETRY_DELAY


def test_a_transient_error_is_left_to_celerys_retry(redis_db, burst, monkeypatch):
    from django.db import OperationalError

    stream = make_stream()
    post_messages(stream, 48)

    def locked(**kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(pipeline, "summarize_stream", locked)
    with pytest.raises(OperationalError):
        tasks._run_stream_queue("summarize", stream.pk, None)

    assert not redis_db.exists(enqueue.lock_key("summarize", stream.pk))
    assert burst.names() == []


def test_redelivered_tasks_do_the_work_once(settings, redis_db, burst, django_capture_on_commit_callbacks):
    """Every enqueued task runs twice, as after a crash before the ack."""
    settings.MEMORY_ENQUEUE_TASKS = True
    stream = make_stream("d1", kind="direct")
    with django_capture_on_commit_callbacks(execute=True):
        post_messages(stream, 80, speakers=[make_person("u1", "小明")])

    for _ in range(10):
        if not burst.calls:
            break
        with django_capture_on_commit_callbacks(execute=True):
            burst.run(times=2)

    # 80 → 64 → 48 → 32 pending; extraction 80 → 68 → 56 → 44 → 32 → 20 after the cursor.
    assert Episode.objects.count() == 3
    assert PipelineEvent.objects.filter(kind="memory_extract").count() == 5
    assert not Fact.objects.filter(embedding__isnull=True).exists()
    assert not redis_db.keys("memory:lock:*")


def test_vectors_backfill_task_reenqueues_while_batches_are_full(redis_db, burst, monkeypatch):
    monkeypatch.setattr(tasks, "VECTORS_ROWS_PER_TASK", 20)
    person = make_person("u1", "小明")
    for i in range(25):
        services.add_knowledge(content=f"知识{i}号：" + "甲乙丙丁戊己庚辛壬癸"[i % 10] * (i + 1), source="t", at=T0)
    services.add_fact(person_id=person.pk, content="小明住在杭州", at=T0)

    first = tasks.vectors_backfill_task()
    assert first["more"] and burst.names() == ["vectors_backfill_task"]
    burst.run()
    assert burst.calls == []
    assert not Fact.objects.filter(embedding__isnull=True).exists()


def test_vectors_backfill_task_twice_is_idempotent(redis_db, burst):
    person = make_person("u1", "小明")
    services.add_fact(person_id=person.pk, content="小明住在杭州", at=T0)
    assert tasks.vectors_backfill_task()["facts"] == 1
    assert tasks.vectors_backfill_task()["facts"] == 0
    assert burst.calls == []


def test_edges_decay_task_twice_freezes_once():
    services.link_together(refs=[("fact", 1), ("fact", 2)], at=T0)
    later = T0 + 60 * 24 * 3600 * 1000  # 60 days: past the 54.2-day freeze point of a fresh edge

    assert pipeline.edges_decay(at=later) == 1
    assert pipeline.edges_decay(at=later) == 0
    assert [e["frozen"] for e in PipelineEvent.objects.filter(kind="edges_decayed").values_list("payload", flat=True)] \
        == [1, 0]
    assert tasks.edges_decay_task() == 0


def test_import_task_twice_imports_once(redis_db):
    job = pipeline.start_import(text="第一条。\n\n第二条。", origin_name="t")

    first = tasks.import_knowledge_task(job.pk, job.params["batch_id"])
    second = tasks.import_knowledge_task(job.pk, job.params["batch_id"])

    assert first == second and first["added"] == 2
    assert ImportBatch.objects.get().status == "done" and Job.objects.get().status == "done"
    assert tasks.import_knowledge_task(99999, None) is None


def test_an_import_task_sent_for_another_batch_leaves_the_job_alone(redis_db):
    job = pipeline.start_import(text="第一条。\n\n第二条。", origin_name="t")
    batch_id = job.params["batch_id"]

    assert tasks.import_knowledge_task(job.pk, batch_id + 1) is None
    job.refresh_from_db()
    assert job.status == "queued" and ImportBatch.objects.get().status == "running"
    assert tasks.import_knowledge_task(job.pk)["added"] == 2  # a re-queued job is sent without its batch


def test_worker_startup_releases_only_its_own_locks_and_enqueues_housekeeping(redis_db, burst):
    redis_db.set("memory:lock:summarize:1", "celery@box|dead", ex=300)
    redis_db.set("memory:lock:extract:1", "celery@other|alive", ex=300)
    redis_db.set("memory:queued:summarize:2", "1", ex=60)

    tasks.worker_startup("celery@box")

    assert redis_db.keys("memory:lock:*") == [b"memory:lock:extract:1"]
    assert not redis_db.keys("memory:queued:*")
    assert sorted(burst.names()) == ["edges_decay_task", "retention_sweep_task", "stream_checks_sweep_task",
                                     "vectors_backfill_task"]
    for _, args, kwargs in burst.calls:
        json.dumps([args, kwargs])


def test_the_sweep_enqueues_due_streams(redis_db, burst):
    due, quiet = make_stream("g1"), make_stream("g2")
    post_messages(due, 48)
    post_messages(quiet, 5)

    assert tasks.stream_checks_sweep_task() == 2

    assert sorted(burst.names()) == ["extract_stream_task", "summarize_stream_task"]
    assert {args for _, args, _ in burst.calls} == {(due.pk,)}


def test_enqueueing_survives_a_redis_outage(settings, burst):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    stream = make_stream()
    post_messages(stream, 48)
    enqueue.stream_checks(stream.pk)  # logged, not raised
    assert burst.calls == []


def test_deleting_knowledge_of_a_batch_keeps_unrelated_nodes():
    MemoryNode.objects.create(ref_kind="fact", ref_id=1)
    job = pipeline.start_import(text="火星有两颗卫星。", origin_name="t")
    pipeline.run_import(job_id=job.pk, embed=False)
    pipeline.delete_batch(job.params["batch_id"])
    assert MemoryNode.objects.filter(ref_kind="fact").count() == 1


def test_a_batch_too_small_to_summarise_is_not_requeued_forever(settings, redis_db, burst):
    settings.SUMMARIZE_TRIGGER_MESSAGES = 3
    stream = make_stream()
    post_messages(stream, 3)

    assert tasks.summarize_stream_task(stream.pk)["status"] == "too_few"
    assert burst.calls == []


def test_every_name_enqueue_sends_is_a_registered_task():
    """Tasks are sent by name (memory.dispatch.enqueue, the job registry): a name without a task would be lost silently."""
    from celery import current_app

    from memory.dispatch import jobs
    from tuning import evaluation
    from tuning import tasks as tuning_tasks

    registered = set(current_app.tasks)
    names = {*enqueue.TASKS.values(), enqueue.VECTORS_TASK, enqueue.IMPORT_TASK, *evaluation.JOB_TASKS.values(),
             *jobs.RERUNNABLE.values()}
    assert names <= registered, names - registered
    assert set(jobs.RERUNNABLE) == {"import", "evaluate", "compare"}  # tuning registers its kinds when it loads
    assert tuning_tasks.evaluate_task.name == evaluation.JOB_TASKS["evaluate"]
    assert tasks.summarize_stream_task.name == enqueue.TASKS["summarize"]


def test_due_queues_decide_as_full_counts_do(settings):
    from memory.dispatch import triggers
    from memory.meta import meta_set
    from memory.models import EXTRACT_CURSOR_KEY, Message

    settings.SUMMARIZE_TRIGGER_MESSAGES, settings.FACT_EXTRACT_TRIGGER_MESSAGES = 6, 4
    stream, other = make_stream(), make_stream("g2")
    ids = post_messages(stream, 8)
    post_messages(other, 8)
    Message.objects.filter(pk__in=ids[:3]).update(episode=None)
    for cursor in [None, "not json", 0, *ids, True, 2.5]:
        if cursor == "not json":
            from memory.models import Meta

            Meta.objects.update_or_create(key=EXTRACT_CURSOR_KEY, defaults={"value": "{broken"})
        elif cursor is not None:
            meta_set(EXTRACT_CURSOR_KEY, {str(stream.pk): cursor, str(other.pk): 0})
        after = cursor if isinstance(cursor, int) and not isinstance(cursor, bool) else 0
        full_extract = Message.objects.filter(stream=stream, id__gt=after).count() >= 4
        full_summarize = Message.objects.filter(stream=stream, episode__isnull=True).count() >= 6
        expected = [q for q, due in ((triggers.SUMMARIZE, full_summarize), (triggers.EXTRACT, full_extract)) if due]
        assert triggers.due_queues(stream.pk) == expected, cursor
        assert triggers.extract_due(stream.pk) == full_extract and triggers.summarize_due(stream.pk) == full_summarize
    settings.FACT_EXTRACT_TRIGGER_MESSAGES = 0
    assert triggers.due_queues(stream.pk, [triggers.EXTRACT]) == [triggers.EXTRACT]


def test_every_task_keeps_its_registered_name():
    """Tasks are sent by name and may wait in Redis across a deploy: a name is a contract, not a module path."""
    from config.celery import app

    app.loader.import_default_modules()
    names = {name for name in app.tasks if not name.startswith("celery.")}
    assert names == {
        "memory.tasks.edges_decay_task", "memory.tasks.expire_message_bodies_task",
        "memory.tasks.extract_stream_task", "memory.tasks.facts_sweep_task",
        "memory.tasks.import_knowledge_task", "memory.tasks.jobs_recover_task",
        "memory.tasks.retention_sweep_task", "memory.tasks.stream_checks_sweep_task",
        "memory.tasks.summarize_stream_task", "memory.tasks.vectors_backfill_task",
        "memory.tasks.wal_checkpoint_task",
        "tuning.tasks.compare_task", "tuning.tasks.evaluate_task", "tuning.tasks.probe_overrides_task",
    }
