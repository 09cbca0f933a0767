"""Operator commands: backfill_vectors, decay_edges, sweep_facts, import_knowledge FILE."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memory import services
from memory.models import Fact, ImportBatch, Job, Knowledge
from tests.workers.conftest import T0, FakeEmbedder, make_person

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _offline_embeddings(monkeypatch):
    from memory.providers import config

    monkeypatch.setattr(config, "get_embedder", lambda **_: FakeEmbedder())


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_backfill_vectors_embeds_everything_missing():
    person = make_person("u1", "小明")
    services.add_fact(person_id=person.pk, content="小明住在杭州", at=T0)
    services.add_knowledge(content="月球没有全球性磁场", source="t", at=T0)

    assert run("backfill_vectors").splitlines()[-1] == "facts=1 knowledge=1 messages=0 failed=0 cleared=0"
    assert run("backfill_vectors").splitlines()[-1] == "facts=0 knowledge=0 messages=0 failed=0 cleared=0"
    assert not Fact.objects.filter(embedding__isnull=True).exists()


def test_backfill_vectors_refuses_when_embeddings_are_off(settings, monkeypatch):
    from memory.providers import config

    monkeypatch.setattr(config, "get_embedder", lambda **_: None)
    with pytest.raises(CommandError, match="disabled"):
        run("backfill_vectors")


def test_decay_edges_and_sweep_facts_report_counts():
    assert run("decay_edges").strip() == "frozen=0"
    assert run("sweep_facts").strip() == "frozen=0"


def test_import_knowledge_imports_a_file_with_progress(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("\n\n".join(f"第{i}条笔记：编号{i * 13}" for i in range(25)) + "\n\n第0条笔记：编号0", "utf-8")

    out = run("import_knowledge", str(path))

    assert "imported 20/26 chunks" in out and "imported 26/26 chunks" in out
    assert out.strip().splitlines()[-1].endswith("submitted=26 added=25 duplicated=1 embedded=25")
    batch = ImportBatch.objects.get()
    assert (batch.kind, batch.origin_name, batch.status) == ("upload", "notes.txt", "done")
    assert Job.objects.get().status == "done" and Knowledge.objects.count() == 25


def test_import_knowledge_reports_limits(tmp_path):
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 2_000_001)
    with pytest.raises(CommandError, match="2000000"):
        run("import_knowledge", str(path))
    with pytest.raises(CommandError, match="cannot read"):
        run("import_knowledge", str(tmp_path / "missing.txt"))
