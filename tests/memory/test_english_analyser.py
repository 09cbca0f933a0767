"""The English analyser in every index, and the migration that re-tokenises rows stored before it."""
from __future__ import annotations

import importlib
from types import SimpleNamespace

import jieba
import pytest
from django.db import connection

from memory import selectors, services
from memory.backends.portable import TOKEN_COLUMNS
from memory.engine.bm25 import fts_tokens
from memory.engine.tokenize import bigrams, index_tokens
from memory.models import Fact, Knowledge, Message
from memory.search import lexical_index
from tests import lexical_probe
from tests.memory.conftest import NOW

migration = importlib.import_module("memory.migrations.0028_english_analyser")


def _plain_tokens(text: str) -> str:
    """``index_tokens`` as it was before the analyser: jieba words lower-cased, unstemmed, no stop words dropped."""
    words = [t.strip().lower() for t in jieba.cut(text, cut_all=False)]
    words = [t for t in words if t and any(c.isalnum() for c in t)]
    return " ".join(fts_tokens(" ".join(words + bigrams(text))))


def _as_before(table: str, rowid: int, scope: str | None) -> None:
    """Put a row back as the old tokenizer indexed it: stored tokens and its index entry."""
    rows, column = TOKEN_COLUMNS[table]
    with connection.cursor() as cur:
        cur.execute(f"SELECT {column} FROM {rows} WHERE id = %s", [rowid])
        new = cur.fetchone()[0]
        text_column = {"episode_cues": "cue"}.get(rows, "content")
        cur.execute(f"SELECT {text_column} FROM {rows} WHERE id = %s", [rowid])
        old = _plain_tokens(cur.fetchone()[0])
        if connection.vendor == "sqlite":
            cols = f"{table}, rowid, tokens" + (f", {scope.split('=')[0]}" if scope else "")
            values = ["delete", rowid, new] + ([scope.split("=")[1]] if scope else [])
            cur.execute(f"INSERT INTO {table}({cols}) VALUES ({', '.join(['%s'] * len(values))})", values)
            cur.execute(f"INSERT INTO {table}({cols.split(', ', 1)[1]}) VALUES ({', '.join(['%s'] * (len(values) - 1))})",
                        values[1:2] + [old] + values[3:])
        cur.execute(f"UPDATE {rows} SET {column} = %s WHERE id = %s", [old, rowid])
        if connection.vendor == "postgresql":
            from memory.backends import postgresql

            postgresql.reindex_all(cur)


def _migrate() -> None:
    """0028's forward step on today's schema, where facts' and knowledge's tokens column is ``tokens`` (0032)."""
    today = {"facts_fts": "tokens", "knowledge_fts": "tokens"}
    sources = tuple((fts, select.replace("tokens_v2", "tokens"), table, today.get(fts, column), *rest)
                    for fts, select, table, column, *rest in migration.SOURCES)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(migration, "TOKENS", today)
        patch.setattr(migration, "SOURCES", sources)
        _forward()
    lexical_index.reset_all()


def _forward() -> None:
    forward = migration.postgresql_forward if connection.vendor == "postgresql" else migration.sqlite_forward
    forward(None, SimpleNamespace(connection=connection))


def test_english_words_match_across_forms(person, direct_stream):
    fact = services.add_fact(person_id=person.pk, content="Caroline painted a sunset last week", kind="事件",
                             origin_kind="direct", at=NOW)
    found = selectors.recall_facts_in_scope(person_ids=[person.pk], query="what does she paint?", now=NOW,
                                            stream_kind="direct")
    assert [f.id for f in found] == [fact.fact_id]
    message = services.append_message(stream_id=direct_stream.pk, role="user", content="I love paintings of lakes",
                                      sender_person_id=person.pk, at=NOW)[0]
    hits = selectors.search_messages(stream_id=direct_stream.pk, query="painting the lake")
    assert [m.pk for m in hits] == [message.pk]


def test_migration_retokenises_rows_stored_before_it(person, direct_stream):
    fact = services.add_fact(person_id=person.pk, content="Melanie adopted two puppies", kind="事件",
                             origin_kind="direct", at=NOW).fact_id
    zh = services.add_fact(person_id=person.pk, content="玩家养了一只猫", kind="事件", origin_kind="direct", at=NOW).fact_id
    message = services.append_message(stream_id=direct_stream.pk, role="user", content="We were running along the river",
                                      sender_person_id=person.pk, at=NOW)[0].pk
    knowledge = services.add_knowledge(content="Volcanoes are erupting mountains", source="test", at=NOW)
    _as_before("facts_fts", fact, f"person=p{person.pk}")
    _as_before("messages_fts", message, f"stream=s{direct_stream.pk}")
    _as_before("knowledge_fts", knowledge, None)
    lexical_index.reset_all()
    assert Fact.objects.get(pk=fact).tokens.startswith("melanie adopted two puppies")
    assert lexical_probe.docs("facts_fts", "adopt") == 0
    zh_tokens = Fact.objects.get(pk=zh).tokens

    _migrate()

    assert Fact.objects.get(pk=fact).tokens == index_tokens("Melanie adopted two puppies") == "melani adopt two puppi"
    assert Fact.objects.get(pk=zh).tokens == zh_tokens  # Chinese rows are not touched
    assert Message.objects.get(pk=message).tokens == "run along river"
    assert Knowledge.objects.get(pk=knowledge).tokens == index_tokens("Volcanoes are erupting mountains")
    assert lexical_probe.docs("facts_fts", "adopt") == 1 and lexical_probe.docs("facts_fts", "adopted") == 0
    assert lexical_probe.docs("messages_fts", "run") == 1 and lexical_probe.docs("messages_fts", "the") == 0
    found = selectors.recall_facts_in_scope(person_ids=[person.pk], query="adopting a puppy", now=NOW,
                                            stream_kind="direct")
    assert [f.id for f in found] == [fact]
    assert [m.pk for m in selectors.search_messages(stream_id=direct_stream.pk, query="runs")] == [message]
    # the index stays consistent: deleting the message removes its (new) index entry
    Message.objects.filter(pk=message).delete()
    assert lexical_probe.docs("messages_fts", "run") == 0
    # a second run changes nothing
    before = {f.pk: f.tokens for f in Fact.objects.all()}
    _migrate()
    assert {f.pk: f.tokens for f in Fact.objects.all()} == before
