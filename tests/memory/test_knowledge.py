"""Knowledge layer, the resident int8 vector index and the vector-space registry.

docs/REFERENCE.md §13; the product adds the int8 index with
its SQLite revision triggers and dense candidates (docs/ARCHITECTURE.md).
"""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from django.db import connection

from memory import selectors, services
from memory.models import Fact, Knowledge, VectorSpace
from memory.search import lexical
from memory.search.vector_index import current_revision, knowledge_index
from tests.memory.conftest import NOW


def _fts_rowids(query: str) -> list[int]:
    return lexical.rows_containing("knowledge_fts", query, limit=100)


class TestAddKnowledge:
    def test_rowid_alignment(self, db):
        services.add_knowledge(content="幻影坦克可以伪装成树", source="test", at=NOW)
        b = services.add_knowledge(content="光学迷彩让单位隐形", source="test", at=NOW)
        hits = selectors.search_knowledge(query="光学迷彩")
        assert [h.id for h in hits] == [b]
        assert _fts_rowids('"光学"') == [b]

    def test_dedupe_by_content_key(self, db):
        a = services.add_knowledge(content="月球没有全球性磁场", source="x", at=NOW)
        b = services.add_knowledge(content="  月球没有全球性磁场。 ", source="y", at=NOW + 1, batch_id=None)
        assert a == b and Knowledge.objects.count() == 1
        row = Knowledge.objects.get(pk=a)
        assert (row.source, row.created_at) == ("x", NOW)

    @pytest.mark.parametrize("content", ["", "   ", "！？", None])
    def test_blank_content(self, db, content):
        assert services.add_knowledge(content=content, source="x", at=NOW) == 0
        assert Knowledge.objects.count() == 0

    def test_fts_row_and_tokens_written_at_once(self, db):
        kid = services.add_knowledge(content="幻影坦克可以伪装成树", source="x", at=NOW)
        assert _fts_rowids('"幻影"') == [kid]
        assert Knowledge.objects.get(pk=kid).tokens

    def test_touch_knowledge(self, db):
        a = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        b = services.add_knowledge(content="幻影坦克可以伪装成树", source="x", at=NOW)
        services.touch_knowledge(ids=[a, b, a], at=NOW)
        services.touch_knowledge(ids=[a], at=NOW + 1000)
        services.touch_knowledge(ids=[], at=NOW + 2000)
        services.touch_knowledge(ids=[999], at=NOW + 3000)
        rows = dict(Knowledge.objects.values_list("id", "hit_count"))
        assert rows == {a: 2, b: 1}
        assert Knowledge.objects.get(pk=a).last_hit_at == NOW + 1000
        assert Knowledge.objects.get(pk=b).last_hit_at == NOW


class TestSearch:
    def test_read_only(self, db):
        kid = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        selectors.search_knowledge(query="光学迷彩")
        assert Knowledge.objects.get(pk=kid).hit_count == 0

    @pytest.mark.parametrize("query", ["的了和", "", "！？。"])
    def test_stop_only_and_empty_queries(self, db, query):
        services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        assert selectors.search_knowledge(query=query, limit=5) == []
        assert selectors.search_knowledge(query="光学", limit=0) == []

    def test_empty_query_with_vector_finds_nothing(self, db):
        kid = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        services.store_knowledge_vector(knowledge_id=kid, vector=[1, 0, 0, 0])
        assert selectors.search_knowledge(query="", query_embedding=[1, 0, 0, 0]) == []

    def test_null_vector_keeps_lexical(self, db):
        services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        hits = selectors.search_knowledge(query="光学迷彩", query_embedding=[1.0, 0.0, 0.0, 0.0])
        assert len(hits) == 1 and hits[0].score > 0 and hits[0].cosine is None
        assert hits[0].score == hits[0].lexical

    def test_corrupt_vector_keeps_lexical(self, db):
        kid = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        plain = selectors.search_knowledge(query="光学迷彩")
        with connection.cursor() as cur:
            cur.execute("UPDATE knowledge SET embedding = %s, embedding_q8 = %s WHERE id = %s", [b"x", b"x", kid])
        hits = selectors.search_knowledge(query="光学迷彩", query_embedding=[1.0, 0.0, 0.0, 0.0])
        assert [(h.id, h.score) for h in hits] == [(plain[0].id, plain[0].score)]

    def test_other_dimension_vector_keeps_lexical(self, db):
        kid = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        services.store_knowledge_vector(knowledge_id=kid, vector=[1.0, 0.0, 0.0])
        hits = selectors.search_knowledge(query="光学迷彩", query_embedding=[1.0, 0.0, 0.0, 0.0])
        assert len(hits) == 1 and hits[0].cosine is None

    def test_stale_vectors_of_an_old_model_do_not_hide_the_current_ones(self, db):
        stale = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        a = services.add_knowledge(content="磁暴线圈需要大量电力", source="x", at=NOW)
        b = services.add_knowledge(content="天启坦克装甲很厚", source="x", at=NOW)
        services.store_knowledge_vector(knowledge_id=stale, vector=[1.0, 0.0, 0.0])
        services.store_knowledge_vector(knowledge_id=a, vector=[1.0, 0.0, 0.0, 0.0])
        services.store_knowledge_vector(knowledge_id=b, vector=[0.0, 1.0, 0.0, 0.0])
        hits = selectors.search_knowledge(query="光学迷彩", query_embedding=[1.0, 0.0, 0.0, 0.0], limit=5)
        by_id = {h.id: h for h in hits}
        assert by_id[a].cosine == pytest.approx(1.0) and by_id[b].cosine == pytest.approx(0.0)
        assert by_id[stale].cosine is None and by_id[stale].lexical > 0

    def test_fused_ranking_flips(self, db):
        a = services.add_knowledge(content="光学迷彩 光学迷彩 光学迷彩让单位隐形", source="x", at=NOW)
        b = services.add_knowledge(content="光学设备的保养方法和一些别的说明文字", source="x", at=NOW)
        services.store_knowledge_vector(knowledge_id=a, vector=[-1.0, 0.0, 0.0, 0.0])
        services.store_knowledge_vector(knowledge_id=b, vector=[1.0, 0.0, 0.0, 0.0])
        plain = selectors.search_knowledge(query="光学迷彩")
        assert [h.id for h in plain] == [a, b]
        fused = selectors.search_knowledge(query="光学迷彩", query_embedding=[1.0, 0.0, 0.0, 0.0])
        assert [h.id for h in fused] == [b, a]
        for h in fused:
            assert 0.0 <= h.score <= 1.0
            assert h.score == pytest.approx(0.4 * h.lexical + 0.6 * (h.cosine + 1) / 2)
        assert fused[0].cosine == pytest.approx(1.0) and fused[1].cosine == pytest.approx(-1.0)

    def test_dense_candidate_without_lexical_match(self, db):
        a = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        b = services.add_knowledge(content="磁暴线圈需要大量电力", source="x", at=NOW)
        services.store_knowledge_vector(knowledge_id=a, vector=[0.0, 1.0, 0.0, 0.0])
        services.store_knowledge_vector(knowledge_id=b, vector=[1.0, 0.0, 0.0, 0.0])
        hits = selectors.search_knowledge(query="光学迷彩", query_embedding=[1.0, 0.0, 0.0, 0.0], limit=5)
        by_id = {h.id: h for h in hits}
        assert set(by_id) == {a, b}
        assert by_id[b].lexical == 0.0 and by_id[b].score == pytest.approx(0.6)
        assert by_id[a].score == pytest.approx(0.4 * by_id[a].lexical + 0.3)


def _revision() -> int:
    """The counter part of the revision (``<counter>-<random token>``)."""
    return int(current_revision().split("-")[0])


class TestVectorIndexRevision:
    def test_triggers_bump_on_insert_update_delete(self, db):
        start = _revision()
        kid = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        assert _revision() == start  # insert without a vector: nothing to invalidate
        services.store_knowledge_vector(knowledge_id=kid, vector=[1.0, 0.0, 0.0, 0.0])
        assert _revision() == start + 1
        services.store_knowledge_vector(knowledge_id=kid, vector=[1.0, 0.0, 0.0, 0.0])
        assert _revision() == start + 1  # the same SQ8 value: no change
        services.store_knowledge_vector(knowledge_id=kid, vector=[0.0, 1.0, 0.0, 0.0])
        assert _revision() == start + 2
        with connection.cursor() as cur:
            cur.execute("UPDATE knowledge SET hit_count = 5 WHERE id = %s", [kid])
        assert _revision() == start + 2  # other columns never bump
        Knowledge.objects.create(content="x", content_key="x", created_at=NOW, embedding_q8=b"\x00")
        assert _revision() == start + 3
        Knowledge.objects.filter(pk=kid).delete()
        assert _revision() == start + 4
        Knowledge.objects.filter(content_key="x").update(embedding_q8=None)
        assert _revision() == start + 5

    def test_index_rebuilds_only_after_a_change(self, db):
        kid = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        services.store_knowledge_vector(knowledge_id=kid, vector=[1.0, 0.0, 0.0, 0.0])
        index = knowledge_index()
        assert [i for i, _ in index.top_k(np.array([1, 0, 0, 0], dtype=np.float32), 3)] == [kid]
        rebuilds = index.rebuilds
        index.top_k(np.array([1, 0, 0, 0], dtype=np.float32), 3)
        assert index.rebuilds == rebuilds
        other = services.add_knowledge(content="磁暴线圈需要大量电力", source="x", at=NOW)
        services.store_knowledge_vector(knowledge_id=other, vector=[0.0, 1.0, 0.0, 0.0])
        assert [i for i, _ in index.top_k(np.array([0, 1, 0, 0], dtype=np.float32), 1)] == [other]
        assert index.rebuilds == rebuilds + 1

    def test_a_large_index_is_searched_through_its_sketch(self, db, settings):
        rng = np.random.default_rng(4)
        ids = [services.add_knowledge(content=f"知识{i}", source="x", at=NOW) for i in range(40)]
        for kid in ids:
            services.store_knowledge_vector(knowledge_id=kid, vector=rng.standard_normal(8).tolist())
        query = rng.standard_normal(8).astype(np.float32)
        knowledge_index().reset()
        exact = knowledge_index().top_k(query, 3)
        assert knowledge_index()._fresh().sketch is None
        settings.KNOWLEDGE_EXACT_ROWS, settings.KNOWLEDGE_SKETCH_CANDIDATES = 40, 48
        knowledge_index().reset()
        assert knowledge_index()._fresh().sketch is None  # 48 candidates of 40 rows: nothing to skip
        settings.KNOWLEDGE_SKETCH_CANDIDATES = 10
        knowledge_index().reset()
        matrix = knowledge_index()._fresh()
        assert matrix.sketch is not None and matrix.sketch.candidates == 10
        approx = knowledge_index().top_k(query, 1)  # 16 candidates of 40 rows
        assert approx[0][0] in set(matrix.ids[matrix.sketch.nearest_rows(query, 16)].tolist())
        settings.KNOWLEDGE_EXACT_ROWS = 0
        knowledge_index().reset()
        assert knowledge_index().top_k(query, 3) == exact

    def test_cosines_of_given_ids_are_the_matrix_rows_ones(self, db):
        rng = np.random.default_rng(3)
        ids = [services.add_knowledge(content=f"知识{i}", source="x", at=NOW) for i in range(12)]
        for kid in ids[::-1]:
            if kid != ids[4]:  # one row without a vector
                services.store_knowledge_vector(knowledge_id=kid, vector=rng.standard_normal(8).tolist())
        query = rng.standard_normal(8).astype(np.float32)
        everyone = dict(knowledge_index().top_k(query, 20))
        asked = [ids[7], ids[4], ids[0], max(ids) + 5, ids[11], ids[7]]
        got = knowledge_index().cosines_for(query, asked)
        assert list(got) == [ids[7], ids[0], ids[11]]  # in the asked order, missing and unknown ids absent
        assert got == {kid: pytest.approx(everyone[kid], rel=1e-6) for kid in got}
        assert knowledge_index().cosines_for(query, []) == {}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
@pytest.mark.sqlite_only("writes through a second sqlite3 connection (PostgreSQL: tests/memory/test_changes.py)")
def test_write_from_another_connection_invalidates_the_resident_index():
    """A raw UPDATE through a separate sqlite3 connection (another process, a script) bumps the revision."""
    a = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
    b = services.add_knowledge(content="光学设备的保养方法", source="x", at=NOW)
    services.store_knowledge_vector(knowledge_id=a, vector=[1.0, 0.0, 0.0, 0.0])
    services.store_knowledge_vector(knowledge_id=b, vector=[0.0, 1.0, 0.0, 0.0])
    query = [1.0, 0.0, 0.0, 0.0]
    assert selectors.search_knowledge(query="光学", query_embedding=query)[0].id == a
    before = _revision()

    from memory.engine.quantize import quantize_vector

    settings_dict = connection.settings_dict
    name = settings_dict["NAME"]
    is_memory = connection.is_in_memory_db()
    other = sqlite3.connect(name, uri=is_memory) if is_memory else sqlite3.connect(name)
    try:
        other.execute(
            "UPDATE knowledge SET embedding_q8 = ? WHERE id = ?",
            (quantize_vector(np.array([-1.0, 0.0, 0.0, 0.0], dtype=np.float32)), a),
        )
        other.commit()
    finally:
        other.close()
    try:
        assert _revision() == before + 1
        hits = selectors.search_knowledge(query="光学", query_embedding=query)
        assert hits[0].id == b
        assert {h.id: h.cosine for h in hits}[a] == pytest.approx(-1.0)
    finally:
        lexical.clear("knowledge_fts")  # flush does not empty the contentless FTS table


class TestVectorSpace:
    def _vectors(self, person):
        fid = services.add_fact(person_id=person.pk, content="他喜欢喝冰美式", at=NOW).fact_id
        kid = services.add_knowledge(content="光学迷彩让单位隐形", source="x", at=NOW)
        services.store_fact_vector(fact_id=fid, vector=[1.0, 0.0, 0.0, 0.0])
        services.store_knowledge_vector(knowledge_id=kid, vector=[1.0, 0.0, 0.0, 0.0])
        return fid, kid

    def test_first_registration_keeps_vectors(self, person):
        fid, kid = self._vectors(person)
        assert services.reconcile_vector_space(consumer="facts", model="m1", api_format="openai", dim=4, at=NOW) == 0
        assert Fact.objects.get(pk=fid).embedding_q8 is not None
        assert VectorSpace.objects.get(consumer="facts").model == "m1"

    def test_identical_space_is_a_no_op(self, person):
        fid, _ = self._vectors(person)
        for _ in range(2):
            assert services.reconcile_vector_space(consumer="facts", model="m1", api_format="openai", dim=4) == 0
        assert Fact.objects.get(pk=fid).embedding is not None

    @pytest.mark.parametrize("change", [{"model": "m2"}, {"dim": 8}, {"api_format": "local"}, {"recipe": "kind+content"}])
    def test_change_clears_both_columns(self, person, change):
        fid, kid = self._vectors(person)
        services.reconcile_vector_space(consumer="facts", model="m1", api_format="openai", dim=4, at=NOW)
        services.reconcile_vector_space(consumer="knowledge", model="m1", api_format="openai", dim=4, at=NOW)
        wanted = {"model": "m1", "api_format": "openai", "dim": 4, **change}
        assert services.reconcile_vector_space(consumer="facts", at=NOW + 1, **wanted) == 1
        fact = Fact.objects.get(pk=fid)
        assert fact.embedding is None and fact.embedding_q8 is None
        assert Knowledge.objects.get(pk=kid).embedding_q8 is not None  # the other consumer is untouched
        space = VectorSpace.objects.get(consumer="facts")
        assert (space.updated_at, space.model, space.dim) == (NOW + 1, wanted["model"], wanted["dim"])
        before = _revision()
        assert services.reconcile_vector_space(consumer="knowledge", at=NOW + 2, **wanted) == 1
        assert Knowledge.objects.get(pk=kid).embedding is None
        assert _revision() == before + 1  # clearing knowledge vectors invalidates the resident index

    def test_unknown_consumer(self, db):
        with pytest.raises(services.MemoryInputError):
            services.reconcile_vector_space(consumer="episodes", model="m", api_format="openai", dim=4)

    def test_store_vector_validates_before_writing(self, person):
        fid, _ = self._vectors(person)
        for bad in ([], [float("nan"), 1.0], [float("inf")]):
            with pytest.raises(ValueError):
                services.store_fact_vector(fact_id=fid, vector=bad)
        assert Fact.objects.get(pk=fid).embedding_q8 is not None


def test_revision_never_repeats_after_a_rollback(db):
    """A rebuild inside a rolled-back transaction must not match the next real write."""
    from django.db import transaction

    kid = services.add_knowledge(content="回滚之后的修订号", source="test")
    with pytest.raises(RuntimeError), transaction.atomic():
        services.store_knowledge_vector(knowledge_id=kid, vector=[1.0, 0.0, 0.0])
        seen_inside = current_revision()
        raise RuntimeError("roll back")
    services.store_knowledge_vector(knowledge_id=kid, vector=[1.0, 0.0, 0.0])
    assert current_revision() != seen_inside
    assert current_revision().split("-")[0] == seen_inside.split("-")[0]


@pytest.mark.parametrize("seed", range(4))
def test_the_resident_matrix_keeps_the_majority_dimension(seed):
    """Stale rows of an old model (another dimension) and broken blobs are skipped; the dimension most
    valid rows have wins, equal counts go to the one met first — as counting every decoded blob does."""
    from collections import Counter

    from memory.engine.quantize import Int8Matrix, decode_q8, quantize_vector
    from memory.search.vector_index import _majority_matrix

    rng = np.random.default_rng(seed)
    counts = {8: int(rng.integers(0, 30)), 16: int(rng.integers(0, 30)), 4: int(rng.integers(0, 30))}
    blobs = [quantize_vector(rng.standard_normal(d)) for d, n in counts.items() for _ in range(n)]
    blobs += [b"YQ8\x01" + (16).to_bytes(4, "little") + b"\x00" * 20] * int(rng.integers(0, 40))  # 16-long, bad scale
    order = rng.permutation(len(blobs))
    pairs = [(int(10 + i), blobs[i]) for i in order]
    dims: Counter[int] = Counter()
    for _i, blob in pairs:
        try:
            dims[decode_q8(blob)[0]] += 1
        except ValueError:
            pass
    expected = Int8Matrix.from_blobs(pairs, dimension=dims.most_common(1)[0][0] if dims else None)
    got = _majority_matrix(pairs)
    assert got.ids.tolist() == expected.ids.tolist() and got.skipped == expected.skipped
    assert got.matrix.tolist() == expected.matrix.tolist() and got.norms.tolist() == expected.norms.tolist()
