"""inspect over a real index: the stream-scoped ``messages_fts`` (bm25) and message vectors cached by id."""
from __future__ import annotations

import numpy as np
import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory import pipeline, recall, selectors, services
from memory.engine.quantize import unpack_float32
from memory.engine.tokenize import index_tokens
from memory.models import Message
from memory.search import lexical
from tests import lexical_probe
from tests.memory.conftest import NOW


def _msg(stream, content, sender, role="user", at=NOW):
    return services.append_message(stream_id=stream.pk, role=role, content=content, sender_person_id=sender, at=at)[0]


def _docs(term: str) -> int:
    """How many FTS rows hold ``term`` (0 when none)."""
    return lexical_probe.docs("messages_fts", term)


def _fts_rows() -> int:
    return lexical_probe.rows("messages_fts")


def _search(stream, query, **kw):
    return [m.pk for m in selectors.search_messages(stream_id=stream.pk, query=query, **kw)]


class TestWrites:
    def test_append_writes_the_fts_row_and_keeps_its_tokens(self, person, direct_stream):
        m = _msg(direct_stream, "晚上喝了乌龙茶", person.pk)
        assert Message.objects.get(pk=m.pk).tokens == index_tokens("晚上喝了乌龙茶") != ""
        assert _docs("乌龙茶") == 1
        assert _search(direct_stream, "乌龙茶") == [m.pk]

    def test_a_rolled_back_append_leaves_no_fts_row(self, person, direct_stream):
        before = _fts_rows()
        with pytest.raises(RuntimeError), transaction.atomic():
            _msg(direct_stream, "晚上喝了乌龙茶", person.pk)
            assert _fts_rows() == before + 1
            raise RuntimeError("roll back")
        assert _fts_rows() == before and _docs("乌龙茶") == 0
        assert _search(direct_stream, "乌龙茶") == []

    def test_a_message_without_a_searchable_term_has_no_fts_row(self, person, direct_stream):
        m = _msg(direct_stream, "！？。，", person.pk)
        assert Message.objects.get(pk=m.pk).tokens == ""
        assert _fts_rows() == 0

    def test_update_message_content_reindexes(self, person, direct_stream):
        m = _msg(direct_stream, "[图片]", person.pk)
        services.store_message_vector(message_id=m.pk, vector=np.ones(4, dtype=np.float32))
        services.update_message_content(message_id=m.pk, content="一张猫咪晒太阳的照片")
        row = Message.objects.get(pk=m.pk)
        assert row.tokens == index_tokens("一张猫咪晒太阳的照片")
        assert row.embedding is None and row.embedding_q8 is None  # the old text's vector is gone
        assert _docs("图片") == 0 and _fts_rows() == 1
        assert _search(direct_stream, "图片") == []
        assert _search(direct_stream, "晒太阳") == [m.pk]
        services.update_message_content(message_id=m.pk, content="！！")  # no searchable term left
        assert Message.objects.get(pk=m.pk).tokens == "" and _fts_rows() == 0

    def test_an_update_that_fails_changes_nothing(self, person, direct_stream, group_stream):
        m = _msg(direct_stream, "晚上喝了乌龙茶", person.pk)
        with pytest.raises(services.NotFound):
            services.update_message_content(message_id=m.pk, content="别的", stream_id=group_stream.pk)
        assert _search(direct_stream, "乌龙茶") == [m.pk]

    def test_deleting_a_message_removes_its_fts_row(self, person, direct_stream):
        m = _msg(direct_stream, "晚上喝了乌龙茶", person.pk)
        _msg(direct_stream, "乌龙茶很香", person.pk)
        Message.objects.filter(pk=m.pk).delete()
        assert _docs("乌龙茶") == 1
        direct_stream.delete()  # the cascade deletes the rest
        assert _fts_rows() == 0


class TestSearch:
    def test_stream_scoping(self, person, direct_stream, group_stream):
        mine = _msg(direct_stream, "周末去爬山", person.pk)
        theirs = _msg(group_stream, "周末去爬山", person.pk)
        assert _search(direct_stream, "爬山") == [mine.pk]
        assert _search(group_stream, "周末爬山") == [theirs.pk]
        # the stream column is out of reach of user terms
        assert _search(direct_stream, f"s{group_stream.pk}") == []
        assert _search(direct_stream, f'stream : "s{group_stream.pk}"') == []

    def test_before_id_and_archived_messages(self, person, direct_stream):
        m1 = _msg(direct_stream, "周末爬山", person.pk)
        m2 = _msg(direct_stream, "周末爬山", person.pk)
        services.add_episode(
            stream_id=direct_stream.pk, summary="爬山", cues=[], started_at=NOW, ended_at=NOW, message_ids=[m1.pk]
        )
        assert _search(direct_stream, "爬山", before_id=m2.pk) == [m1.pk]  # archived, still found
        assert _search(direct_stream, "爬山", before_id=m1.pk) == []
        assert _search(direct_stream, "爬山") == [m1.pk, m2.pk]

    def test_nothing_to_search(self, person, direct_stream):
        _msg(direct_stream, "周末爬山", person.pk)
        assert _search(direct_stream, "！？。，") == []
        assert _search(direct_stream, "爬山", limit=0) == []
        assert _search(direct_stream, "") == []

    def test_ranked_by_bm25_returned_chronologically(self, person, direct_stream):
        rare = _msg(direct_stream, "昨天喝了乌龙茶", person.pk)
        common = [_msg(direct_stream, f"我们去吃饭吧 {i}", person.pk) for i in range(6)]
        long_one = _msg(direct_stream, "吃饭 " + "然后还要去超市买很多很多东西再回家" * 3, person.pk)
        # one term each: the rare term outweighs the common one; a word-count ranking would tie and pick the newest
        assert _search(direct_stream, "吃饭 乌龙茶", limit=1) == [rare.pk]
        hits = selectors.search_messages(stream_id=direct_stream.pk, query="吃饭 乌龙茶", limit=3)
        assert [m.pk for m in hits] == sorted(m.pk for m in hits)  # chronological
        assert hits[0].pk == rare.pk and long_one.pk not in [m.pk for m in hits]
        assert all(0 < m.score < 1 for m in hits)
        assert max(hits, key=lambda m: m.score).pk == rare.pk
        # equal bm25: the newer message first
        assert _search(direct_stream, "吃饭", limit=2) == [common[-2].pk, common[-1].pk]

    def test_no_six_term_cap(self, person, direct_stream):
        m = _msg(direct_stream, "七号", person.pk)
        assert _search(direct_stream, "苹果 香蕉 橘子 葡萄 西瓜 草莓 七号") == [m.pk]

    def test_fts_syntax_in_user_text(self, person, direct_stream):
        m = _msg(direct_stream, 'a*b NEAR c "引号" (香菜', person.pk)
        for query in ['a*b NEAR c', '"', '""', 'AND OR NOT', '-x', 'tokens:香菜', '^猫', '(香菜', 'NEAR(a b)', '%_\\']:
            selectors.search_messages(stream_id=direct_stream.pk, query=query)
        assert _search(direct_stream, '"引号"') == [m.pk]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(alphabet='"*()-:^+ NEARORANDOTstream香菜猫a', max_size=24) | st.text(max_size=30))
def test_arbitrary_queries_never_reach_the_parser(person, direct_stream, query):
    if not Message.objects.filter(stream=direct_stream).exists():
        _msg(direct_stream, "香菜 猫 stream NEAR", person.pk)
    found = selectors.search_messages(stream_id=direct_stream.pk, query=query, query_vector=np.ones(4))
    assert all(m.stream_id == direct_stream.pk for m in found)


class CountingEmbedder:
    name, label, dim = "count-embed", "count:count-embed", 4

    def __init__(self):
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts += list(texts)
        return [np.array([len(t), 1.0, 0.0, 0.0], dtype=np.float32) / np.hypot(len(t), 1.0) for t in texts]


class TestMessageVectors:
    def test_computed_once_and_stored(self, person, direct_stream):
        a = _msg(direct_stream, "第一句", person.pk)
        b = _msg(direct_stream, "第二句话", person.pk)
        embedder = CountingEmbedder()
        first = selectors.message_vectors([a.pk, b.pk, 99_999], embedder=embedder)
        assert set(first) == {a.pk, b.pk} and embedder.texts == ["第一句", "第二句话"]
        second = selectors.message_vectors([b.pk, a.pk], embedder=embedder)
        assert embedder.texts == ["第一句", "第二句话"]  # nothing embedded again
        for mid in (a.pk, b.pk):
            np.testing.assert_array_equal(first[mid], second[mid])
            assert unpack_float32(bytes(Message.objects.get(pk=mid).embedding)).shape == (4,)
        c = _msg(direct_stream, "第三句", person.pk)
        assert set(selectors.message_vectors([a.pk, c.pk], embedder=embedder)) == {a.pk, c.pk}
        assert embedder.texts[2:] == ["第三句"]  # only the missing one

    def test_without_an_embedder_only_stored_vectors(self, person, direct_stream):
        a = _msg(direct_stream, "第一句", person.pk)
        b = _msg(direct_stream, "第二句", person.pk)
        services.store_message_vector(message_id=a.pk, vector=[1.0, 0.0])
        got = selectors.message_vectors([a.pk, b.pk])  # EMBEDDING_PROVIDER = none here
        assert list(got) == [a.pk]

    def test_batches_of_at_most_twenty_and_failures_stay_missing(self, person, direct_stream):
        ids = [_msg(direct_stream, f"消息{i}", person.pk).pk for i in range(45)]

        class Batches(CountingEmbedder):
            def __init__(self):
                super().__init__()
                self.sizes = []

            def embed(self, texts):
                self.sizes.append(len(texts))
                if len(self.sizes) == 2:
                    raise RuntimeError("provider down")
                return super().embed(texts)

        embedder = Batches()
        got = selectors.message_vectors(ids, embedder=embedder)
        assert embedder.sizes == [20, 20, 5] and len(got) == 25
        assert Message.objects.filter(embedding__isnull=True).count() == 20

    def test_reconcile_clears_them(self, person, direct_stream):
        a = _msg(direct_stream, "第一句", person.pk)
        selectors.message_vectors([a.pk], embedder=CountingEmbedder())
        assert services.reconcile_vector_space(consumer="messages", model="m1", api_format="x", dim=4, at=NOW) == 0
        cleared = services.reconcile_vector_space(consumer="messages", model="m2", api_format="x", dim=4, at=NOW)
        assert cleared == 1
        row = Message.objects.get(pk=a.pk)
        assert row.embedding is None and row.embedding_q8 is None

    def test_backfill_fills_them(self, person, direct_stream):
        ids = [_msg(direct_stream, f"消息{i}", person.pk).pk for i in range(3)]
        result = pipeline.backfill_vectors(embedder=CountingEmbedder())
        assert result.messages == 3 and result.as_dict()["messages"] == 3
        assert not Message.objects.filter(pk__in=ids, embedding__isnull=True).exists()
        assert pipeline.backfill_vectors(embedder=CountingEmbedder()).messages == 0


class AxisEmbedder:
    """Texts mentioning a drink point one way, everything else the other way."""

    name, label, dim = "axis", "axis:axis", 2

    def embed(self, texts):
        return [np.array([1.0, 0.0] if ("茶" in t or "咖啡" in t) else [0.0, 1.0], dtype=np.float32) for t in texts]


class TestFused:
    def test_dense_hits_join_and_lexical_hits_get_their_vectors(self, person, direct_stream):
        tea = _msg(direct_stream, "晚上喝了乌龙茶", person.pk)
        coffee = _msg(direct_stream, "早上一杯咖啡", person.pk)  # no shared term with the query
        other = _msg(direct_stream, "晚上去跑步", person.pk)
        embedder = AxisEmbedder()
        selectors.message_vectors([coffee.pk, other.pk], embedder=embedder)  # the tea message has no vector yet
        query = np.array([1.0, 0.0], dtype=np.float32)  # "what did I drink in the evening"

        import memory.providers.config as config

        original = config.get_embedder
        config.get_embedder = lambda **_: embedder
        try:
            hits = selectors.search_messages(stream_id=direct_stream.pk, query="晚上 喝", query_vector=query, limit=2)
        finally:
            config.get_embedder = original
        assert [m.pk for m in hits] == [tea.pk, coffee.pk]  # the lexical-only "晚上去跑步" loses to the dense hit
        assert Message.objects.get(pk=tea.pk).embedding is not None  # computed once, on the way
        lexical_only = _search(direct_stream, "晚上 喝", limit=2)
        assert coffee.pk not in lexical_only

    def test_inspect_action_uses_the_configured_embedder(self, person, direct_stream, monkeypatch):
        tea = _msg(direct_stream, "晚上喝了乌龙茶", person.pk)
        coffee = _msg(direct_stream, "早上一杯咖啡", person.pk)
        run = _msg(direct_stream, "晚上去跑步", person.pk)
        embedder = AxisEmbedder()
        import memory.providers.config as config

        monkeypatch.setattr(config, "get_embedder", lambda **_: embedder)
        pipeline.backfill_vectors()  # the dense channel reads stored vectors only
        assert selectors.message_vectors([tea.pk, coffee.pk, run.pk]).keys() == {tea.pk, coffee.pk, run.pk}
        hits = recall.inspect_messages(stream_id=direct_stream.pk, query="晚上喝什么茶", limit=2)
        assert [m.pk for m in hits] == [tea.pk, coffee.pk]


def test_lexical_module_owns_the_message_sql(person, direct_stream):
    m = _msg(direct_stream, "周末爬山", person.pk)
    match = lexical.match_for("messages_fts", "爬山")
    hits = lexical.message_candidates(match, stream_id=direct_stream.pk, limit=5)
    assert [h[0] for h in hits] == [m.pk] and hits[0][1] < 0
    assert lexical.message_bm25(match, stream_id=direct_stream.pk, message_ids=[m.pk]) == {m.pk: hits[0][1]}
    assert lexical.message_bm25(match, stream_id=direct_stream.pk + 1000, message_ids=[m.pk]) == {}


def test_migration_0022_stores_old_rows_as_their_terms(person, direct_stream):
    """Rows stored before ``index_tokens`` wrote unicode61's terms are rewritten; rows already so,
    and rows whose string holds no term, are left alone; search finds the rewritten rows the same."""
    import importlib
    from types import SimpleNamespace

    from django.db import connection

    rewrite = importlib.import_module("memory.migrations.0022_message_tokens_as_terms").rewrite
    old, kept, empty = (_msg(direct_stream, text, person.pk, at=NOW + k)
                        for k, text in enumerate(["邮箱是 li_ming@x.com", "晚上喝了乌龙茶", "晚上喝茶"]))
    Message.objects.filter(pk=old.pk).update(tokens="邮箱 Li _ ming X com 邮箱 箱是")
    Message.objects.filter(pk=empty.pk).update(tokens="_ __")
    before = {m.pk: m.tokens for m in Message.objects.all()}
    rewrite(None, SimpleNamespace(connection=connection))
    after = {m.pk: m.tokens for m in Message.objects.all()}
    assert after[old.pk] == "邮箱 li ming x com 邮箱 箱是"
    assert after[kept.pk] == before[kept.pk] == index_tokens("晚上喝了乌龙茶")
    assert after[empty.pk] == "_ __"
    assert _search(direct_stream, "li 的邮箱") == [old.pk]
