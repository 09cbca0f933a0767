"""Import centre and job cards: start, progress, poll until done, delete after a preview."""
from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from memory import pipeline
from memory.models import ImportBatch, Job, Knowledge

pytestmark = pytest.mark.django_db

DOC = "猫是一种小型肉食动物。\n\n柴犬原产于日本。\n\n龙井茶是一种绿茶。"


def test_paste_starts_an_import_job_and_the_card_polls_until_done(staff, settings):
    response = staff.post(reverse("console:imports"), {"origin_name": "小知识", "text": DOC}, follow=True)
    assert "导入任务 #" in response.content.decode()
    job = Job.objects.get(kind="import")
    assert job.created_by == "staff" and job.status == "queued"
    card = staff.get(reverse("console:job", args=[job.pk]), headers={"HX-Request": "true"}).content.decode()
    assert 'hx-trigger="every 2s"' in card and "<html" not in card

    pipeline.run_import(job_id=job.pk, embed=False)
    response = staff.get(reverse("console:job", args=[job.pk]), headers={"HX-Request": "true"})
    card = response.content.decode()
    assert "hx-trigger" not in card and 'aria-valuenow="100"' in card and "完成" in card
    assert "jobFinished" in response["HX-Trigger"]
    page = staff.get(reverse("console:job", args=[job.pk])).content.decode()
    assert "<html" in page  # the card also has its own page without JavaScript
    batch = ImportBatch.objects.get()
    imports = staff.get(reverse("console:imports")).content.decode()
    assert "小知识" in imports and f'href="{reverse("console:import_delete", args=[batch.pk])}"' in imports


def test_upload_and_limits(staff):
    upload = SimpleUploadedFile("doc.txt", DOC.encode("utf-8"), content_type="text/plain")
    staff.post(reverse("console:imports"), {"upload": upload})
    job = Job.objects.get()
    assert job.params["kind"] == "upload" and job.params["origin_name"] == "doc.txt"
    busy = staff.post(reverse("console:imports"), {"text": DOC})
    assert busy.status_code == 400 and "另一个导入正在进行" in busy.content.decode()
    empty = staff.post(reverse("console:imports"), {"text": "   "})
    assert empty.status_code == 400 and "请粘贴文本" in empty.content.decode()
    bad = SimpleUploadedFile("x.bin", b"\xff\xfe\x00bad", content_type="application/octet-stream")
    assert "不是 UTF-8" in staff.post(reverse("console:imports"), {"upload": bad}).content.decode()


def test_delete_a_batch_after_a_preview(staff):
    job = pipeline.start_import(text=DOC, origin_name="x", kind="paste", user="staff", enqueue=False)
    pipeline.run_import(job_id=job.pk, embed=False)
    batch = ImportBatch.objects.get()
    url = reverse("console:import_delete", args=[batch.pk])
    preview = staff.get(url).content.decode()
    assert "将删除 3 条知识条目" in preview and "柴犬原产于日本" in preview
    assert Knowledge.objects.count() == 3
    response = staff.post(url, follow=True)
    assert "已删除导入批次" in response.content.decode()
    assert Knowledge.objects.count() == 0


def test_the_delete_preview_says_how_many_it_does_not_list(staff):
    doc = "\n\n".join(f"第{i}条：柴犬的小知识第{i}则" for i in range(12))
    job = pipeline.start_import(text=doc, origin_name="x", kind="paste", user="staff", enqueue=False)
    pipeline.run_import(job_id=job.pk, embed=False)
    batch = ImportBatch.objects.get()
    preview = staff.get(reverse("console:import_delete", args=[batch.pk])).content.decode()
    listed = pipeline.delete_batch_preview(batch.pk)["samples"]
    assert "将删除 12 条知识条目" in preview and f'data-more="{12 - len(listed)}"' in preview


def test_operators_cannot_import(operator):
    assert operator.post(reverse("console:imports"), {"text": DOC}).status_code == 403
    assert not (ImportBatch.objects.exists() or Job.objects.exists() or Knowledge.objects.exists())  # nothing queued
