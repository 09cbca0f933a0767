"""Knowledge import centre (docs/REFERENCE.md §13): chunking, limits, jobs, per-batch delete."""
from __future__ import annotations

import pytest

from memory import pipeline, selectors, services
from memory.dispatch import jobs
from memory.models import ImportBatch, Job, Knowledge, MemoryNode, PipelineEvent
from memory.search import lexical
from tests.workers.conftest import T0, FakeEmbedder

# --- chunking (no database) -----------------------------------------------------------------


def test_blank_lines_separate_chunks():
    assert pipeline.split_into_chunks("第一段\n第一段第二行\n\n\n第二段\r\n\r\n  \n第三段") == [
        "第一段\n第一段第二行", "第二段", "第三段"
    ]


def test_a_paragraph_of_1200_characters_is_one_chunk():
    text = "字" * 1200
    assert pipeline.split_into_chunks(text) == [text]


def test_long_paragraphs_are_packed_by_sentence():
    sentence = "这" * 499 + "。"
    chunks = pipeline.split_into_chunks(sentence * 5)
    assert chunks == [f"{sentence} {sentence}", f"{sentence} {sentence}", sentence]
    assert all(len(c) <= 1200 for c in chunks)


def test_a_sentence_longer_than_the_limit_is_cut_hard():
    chunks = pipeline.split_into_chunks("短句。" + "长" * 2600)
    assert [len(c) for c in chunks] == [3, 1200, 1200, 200]


def test_empty_text_has_no_chunks():
    assert pipeline.split_into_chunks(" \n\n \n") == []


# --- limits ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("字" * 200_001, "paste", "超过上限 200000 字"),
        ("字" * 700_000, "upload", "超过上限 2000000 字节"),
        ("\n\n".join(["条"] * 5001), "paste", "超过单批上限 5000 条"),
        ("  \n\n ", "paste", "没有可导入的内容"),
    ],
    ids=["paste-too-long", "file-too-big", "too-many-chunks", "empty"],
)
def test_limits_are_checked_before_anything_is_stored(text, kind, message):
    with pytest.raises(pipeline.ImportLimitError, match=message):
        pipeline.start_import(text=text, origin_name="x", kind=kind)
    assert not ImportBatch.objects.exists() and not Job.objects.exists()


def test_upload_validation_checks_bytes_and_encoding():
    assert pipeline.validate_upload("\ufeff你好".encode()) == "你好"
    with pytest.raises(pipeline.ImportLimitError, match="字节"):
        pipeline.validate_upload(b"x" * 2_000_001)
    with pytest.raises(pipeline.ImportLimitError, match="UTF-8"):
        pipeline.validate_upload("你好".encode("gbk"))


# --- jobs -------------------------------------------------------------------------------------------

TEXT = "月球没有全球性磁场。\n\n火星有两颗卫星：火卫一和火卫二。\n\n木星是太阳系最大的行星。\n\n月球没有全球性磁场。"


@pytest.mark.django_db
def test_start_import_registers_a_running_batch_and_a_queued_job():
    job = pipeline.start_import(text=TEXT, origin_name="planets.txt", kind="upload", user="alice", at=T0)

    batch = ImportBatch.objects.get()
    assert (batch.status, batch.submitted, batch.kind, batch.origin_name) == ("running", 4, "upload", "planets.txt")
    assert batch.summary == "月球没有全球性磁场。"
    assert (job.kind, job.status, job.total, job.created_by) == ("import", "queued", 4, "alice")
    assert job.params["batch_id"] == batch.pk


@pytest.mark.django_db
def test_the_import_task_is_enqueued_after_commit(settings, burst, redis_db, django_capture_on_commit_callbacks):
    settings.MEMORY_ENQUEUE_TASKS = True
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = pipeline.start_import(text=TEXT, origin_name="p")
    assert burst.calls == []  # nothing before commit
    callbacks[0]()
    assert burst.calls == [("memory.tasks.import_knowledge_task", (job.pk, job.params["batch_id"]), {})]


@pytest.mark.django_db
def test_a_second_import_while_one_runs_is_refused():
    pipeline.start_import(text=TEXT, origin_name="a", at=T0)
    with pytest.raises(pipeline.ImportBusyError):
        pipeline.start_import(text="另一段", origin_name="b", at=T0 + 1000)
    assert ImportBatch.objects.count() == 1


@pytest.mark.django_db
def test_a_stale_running_import_does_not_block_forever():
    pipeline.start_import(text=TEXT, origin_name="a", at=T0)
    pipeline.start_import(text="另一段", origin_name="b", at=T0 + pipeline.IMPORT_STALE_MS + 1)
    assert list(ImportBatch.objects.order_by("id").values_list("status", flat=True)) == ["failed", "running"]


@pytest.mark.django_db
def test_run_import_stores_chunks_embeds_them_and_a_rerun_changes_nothing():
    job = pipeline.start_import(text=TEXT, origin_name="planets.txt", at=T0)
    embedder = FakeEmbedder()
    seen = []

    result = pipeline.run_import(job_id=job.pk, embedder=embedder, at=T0 + 1, on_progress=lambda d, t: seen.append(d))
    again = pipeline.run_import(job_id=job.pk, embedder=embedder)

    batch = ImportBatch.objects.get()
    assert result == {"batch_id": batch.pk, "submitted": 4, "added": 3, "duplicated": 1, "embedded": 3}
    assert again == result and Knowledge.objects.count() == 3
    assert (batch.status, batch.added) == ("done", 3) and batch.finished_at
    job.refresh_from_db()
    assert (job.status, job.progress, job.total, job.result) == ("done", 4, 4, result)
    assert "text" not in job.params
    assert seen == [4]
    assert all(k.source == "import_center" and k.embedding_q8 for k in Knowledge.objects.all())
    assert selectors.search_knowledge(query="火星卫星")[0].content.startswith("火星")
    kinds = list(PipelineEvent.objects.order_by("seq").values_list("kind", flat=True))
    assert kinds.count("import_started") == 1 and kinds.count("import_done") == 1


@pytest.mark.django_db
def test_progress_is_written_every_twenty_chunks(monkeypatch):
    text = "\n\n".join(f"第{i}条知识：编号{i * 7}" for i in range(45))
    job = pipeline.start_import(text=text, origin_name="many")
    written: list[int] = []
    real = jobs.job_progress

    def spy(*, job_id, progress: int, total=None):
        written.append(progress)
        return real(job_id=job_id, progress=progress, total=total)

    monkeypatch.setattr(jobs, "job_progress", spy)

    pipeline.run_import(job_id=job.pk, embed=False)

    assert written == [20, 40, 45]


@pytest.mark.django_db
def test_a_failing_import_marks_batch_and_job_failed(monkeypatch):
    job = pipeline.start_import(text=TEXT, origin_name="x")

    def boom(**kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(services, "add_knowledge", boom)
    with pytest.raises(RuntimeError):
        pipeline.run_import(job_id=job.pk, embed=False)

    job.refresh_from_db()
    batch = ImportBatch.objects.get()
    assert (job.status, batch.status) == ("failed", "failed")
    assert "disk full" in job.error and "disk full" in batch.error
    assert PipelineEvent.objects.filter(kind="import_failed").exists()
    assert pipeline.run_import(job_id=job.pk) is None  # a redelivery does not resurrect it


@pytest.mark.django_db
def test_a_missing_job_is_a_no_op():
    assert pipeline.run_import(job_id=123456) is None


# --- per-batch delete ---------------------------------------------------------------------------------


def _import(text: str, name: str) -> int:
    job = pipeline.start_import(text=text, origin_name=name)
    return pipeline.run_import(job_id=job.pk, embedder=FakeEmbedder())["batch_id"]


@pytest.mark.django_db
def test_delete_preview_counts_and_samples():
    batch_id = _import("\n\n".join(f"第{i}条：" + "长" * 200 for i in range(7)), "long")

    preview = pipeline.delete_batch_preview(batch_id)

    assert preview["count"] == 7 and len(preview["samples"]) == 5
    assert all(len(s) == 120 for s in preview["samples"])


@pytest.mark.django_db
def test_delete_batch_removes_only_that_batch_and_its_index_rows():
    loose = services.add_knowledge(content="土星有美丽的光环", source="api", at=T0)
    first = _import("火星有两颗卫星。\n\n木星是最大的行星。", "a")
    second = _import("金星表面温度很高。", "b")
    services.link_together(refs=[("knowledge", loose), ("knowledge", Knowledge.objects.get(content__startswith="火星").pk)])

    deleted = pipeline.delete_batch(first)

    assert deleted == 2
    assert set(Knowledge.objects.values_list("content", flat=True)) == {"土星有美丽的光环", "金星表面温度很高。"}
    assert ImportBatch.objects.filter(pk=first).exists()
    assert lexical.knowledge_candidates(lexical.match_for("knowledge_fts", "火星卫星"), limit=5) == []
    assert [h.content for h in selectors.search_knowledge(query="金星温度")] == ["金星表面温度很高。"]
    assert not MemoryNode.objects.filter(ref_kind="knowledge").exclude(ref_id=loose).exists()
    assert PipelineEvent.objects.get(kind="import_batch_deleted").payload == {"batchId": first, "deleted": 2}
    assert pipeline.delete_batch(first) == 0
    assert Knowledge.objects.filter(import_batch_id=second).count() == 1


@pytest.mark.django_db
def test_unknown_batches_are_reported():
    with pytest.raises(pipeline.ImportBatchNotFoundError):
        pipeline.delete_batch_preview(999)
    with pytest.raises(pipeline.ImportBatchNotFoundError):
        pipeline.delete_batch(999)
