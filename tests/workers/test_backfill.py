"""Embedding backfill (docs/REFERENCE.md §5): by missing vector, bounded batches, NULLs retried."""
from __future__ import annotations

import time

import numpy as np
import pytest

from memory import pipeline, services
from memory.engine.quantize import quantized_dimension, unpack_float32
from memory.models import Fact, Knowledge, VectorSpace
from memory.providers.embeddings import OpenAIEmbedder
from tests.providers.conftest import Reply, unit
from tests.workers.conftest import T0, FakeEmbedder, make_person

pytestmark = pytest.mark.django_db


POOL = "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成岁律吕调阳云腾致雨露结为霜金生丽水玉出昆冈剑号巨阙珠称夜光"


def distinct_text(i: int) -> str:
    """Texts different enough that the duplicate detector keeps them apart."""
    rng = np.random.default_rng(i)
    return "".join(rng.choice(list(POOL), 12))


def seed(facts: int = 3, knowledge: int = 2) -> None:
    person = make_person("u1", "小明")
    for i in range(facts):
        assert services.add_fact(person_id=person.pk, content=distinct_text(i), at=T0).created
    for i in range(knowledge):
        services.add_knowledge(content=distinct_text(10_000 + i), source="test", at=T0)
    assert Fact.objects.count() == facts and Knowledge.objects.count() == knowledge


def test_it_embeds_facts_then_knowledge_and_a_rerun_does_nothing():
    seed(3, 2)
    embedder = FakeEmbedder()

    first = pipeline.backfill_vectors(embedder=embedder)
    second = pipeline.backfill_vectors(embedder=embedder)

    assert (first.facts, first.knowledge, first.failed) == (3, 2, 0)
    assert (second.facts, second.knowledge) == (0, 0)
    assert len(embedder.batches) == 2  # one batch per table, none on the rerun
    for row in [*Fact.objects.all(), *Knowledge.objects.all()]:
        assert unpack_float32(bytes(row.embedding)).shape == (8,)
        assert quantized_dimension(bytes(row.embedding_q8)) == 8
    assert VectorSpace.objects.get(consumer="facts").model == "fake-embed"


def test_batches_never_exceed_twenty():
    seed(45, 0)
    embedder = FakeEmbedder()

    result = pipeline.backfill_vectors(embedder=embedder, batch=50)

    assert result.facts == 45
    assert [len(b) for b in embedder.batches] == [20, 20, 5]


def test_a_failed_batch_stays_null_for_the_next_run():
    seed(25, 0)
    failing = FakeEmbedder(fail_batches=[0])

    first = pipeline.backfill_vectors(embedder=failing)

    assert (first.facts, first.failed, first.more) == (5, 20, False)
    assert Fact.objects.filter(embedding__isnull=True).count() == 20
    second = pipeline.backfill_vectors(embedder=FakeEmbedder())
    assert second.facts == 20 and not Fact.objects.filter(embedding__isnull=True).exists()


def test_a_row_budget_reports_more_work():
    seed(30, 5)
    first = pipeline.backfill_vectors(embedder=FakeEmbedder(), max_rows=20)
    assert (first.facts, first.knowledge, first.more) == (20, 0, True)
    second = pipeline.backfill_vectors(embedder=FakeEmbedder(), max_rows=20)
    assert (second.facts, second.knowledge, second.more) == (10, 5, False)


def test_a_new_embedding_space_clears_and_recomputes_the_vectors():
    seed(2, 1)
    pipeline.backfill_vectors(embedder=FakeEmbedder(dim=8))
    bigger = FakeEmbedder(dim=16)
    bigger.name = "fake-embed-v2"

    result = pipeline.backfill_vectors(embedder=bigger)

    assert result.cleared == 3 and (result.facts, result.knowledge) == (2, 1)
    assert {unpack_float32(bytes(f.embedding)).shape for f in Fact.objects.all()} == {(16,)}


def test_disabled_embeddings_do_nothing(settings):
    settings.EMBEDDING_PROVIDER = "none"
    seed(1, 1)
    result = pipeline.backfill_vectors()
    assert not result.enabled and Fact.objects.filter(embedding__isnull=True).count() == 1


def test_backfill_over_an_openai_compatible_server(fake_openai):
    seed(23, 2)
    embedder = OpenAIEmbedder(fake_openai.base_url, "test-embed", dim=8, max_retries=0)

    result = pipeline.backfill_vectors(embedder=embedder)

    assert (result.facts, result.knowledge) == (23, 2)
    assert [len(c.json["input"]) for c in fake_openai.calls("/embeddings")] == [20, 3, 2]
    fact = Fact.objects.order_by("id").first()
    assert np.allclose(unpack_float32(bytes(fact.embedding)), unit(fact.content, 8), atol=1e-6)
    assert VectorSpace.objects.get(consumer="knowledge").api_format == "openai"


def test_a_server_error_leaves_nulls_and_the_next_run_fills_them(fake_openai):
    seed(3, 0)
    embedder = OpenAIEmbedder(fake_openai.base_url, "test-embed", dim=8, max_retries=0)
    fake_openai.push("/embeddings", Reply(500, json={"error": {"message": "overloaded"}}))

    first = pipeline.backfill_vectors(embedder=embedder)
    second = pipeline.backfill_vectors(embedder=embedder)

    assert (first.facts, first.failed) == (0, 3)
    assert second.facts == 3


def test_a_provider_found_down_ends_the_run_after_its_first_failed_batch(fake_openai, caplog):
    seed(23, 2)
    embedder = OpenAIEmbedder(fake_openai.base_url, "test-embed", dim=8, max_retries=0, down_seconds=0.5)
    fake_openai.push("/embeddings", Reply(503, body="down"))

    first = pipeline.backfill_vectors(embedder=embedder)

    assert (first.facts, first.knowledge, first.failed, first.more) == (0, 0, 20, False)
    assert len(fake_openai.calls("/embeddings")) == 1  # not the 3 facts after it, nor the knowledge
    assert "vector_backfill_stopped: the embedding provider is marked down" in caplog.messages
    time.sleep(0.6)  # the breaker closes: the next run (the beat's) embeds everything
    second = pipeline.backfill_vectors(embedder=embedder)
    assert (second.facts, second.knowledge, second.failed) == (23, 2, 0)


def test_a_wrong_dimension_from_the_server_stores_nothing(fake_openai):
    seed(2, 0)
    fake_openai.dim = 4
    embedder = OpenAIEmbedder(fake_openai.base_url, "test-embed", dim=8, max_retries=0)

    result = pipeline.backfill_vectors(embedder=embedder)

    assert (result.facts, result.failed) == (0, 2)
    assert Fact.objects.filter(embedding__isnull=True).count() == 2


def test_backfill_with_the_local_use_model():
    from memory.providers.local import LocalUSEEmbedder

    person = make_person("u1", "小明")
    for content in ["小明住在杭州", "小明的家在杭州市", "小明对花生过敏"]:
        services.add_fact(person_id=person.pk, content=content, at=T0)

    result = pipeline.backfill_vectors(embedder=LocalUSEEmbedder(threads=1))

    assert result.facts == 3
    vectors = [unpack_float32(bytes(f.embedding)) for f in Fact.objects.order_by("id")]
    assert {v.shape for v in vectors} == {(512,)}
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])
    assert VectorSpace.objects.get(consumer="facts").dim == 512


def test_messages_are_embedded_after_facts_and_knowledge_and_follow_the_space():
    from memory.models import Message
    from tests.workers.conftest import make_stream

    seed(1, 1)
    person = Fact.objects.get().person
    stream = make_stream("d1", kind="direct")
    ids = [
        services.append_message(stream_id=stream.pk, role="user", content=distinct_text(500 + i),
                                sender_person_id=person.pk, at=T0)[0].pk
        for i in range(25)
    ]
    embedder = FakeEmbedder()

    first = pipeline.backfill_vectors(embedder=embedder)

    assert (first.facts, first.knowledge, first.messages) == (1, 1, 25)
    assert [len(b) for b in embedder.batches] == [1, 1, 20, 5]
    assert {unpack_float32(bytes(m.embedding)).shape for m in Message.objects.filter(pk__in=ids)} == {(8,)}
    assert VectorSpace.objects.get(consumer="messages").dim == 8
    bigger = FakeEmbedder(dim=16)
    bigger.name = "fake-embed-v2"
    second = pipeline.backfill_vectors(embedder=bigger)
    assert second.cleared == 27 and second.messages == 25
    assert {unpack_float32(bytes(m.embedding)).shape for m in Message.objects.filter(pk__in=ids)} == {(16,)}
