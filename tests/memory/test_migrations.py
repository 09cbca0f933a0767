"""Migrations of the memory app: FTS tables, vocab tables, revision triggers, reversibility, the FTS5 check."""
from __future__ import annotations

import pytest
from django.core import checks
from django.core.management import call_command
from django.db import connection

import memory.checks
from memory import selectors, services
from memory.search import lexical

FTS = {"facts_fts", "cues_fts", "knowledge_fts", "messages_fts"}
VOCAB = {f"{t}_vocab" for t in FTS}
TRIGGERS = {"knowledge_q8_insert", "knowledge_q8_update", "knowledge_q8_delete"} | {
    f"{table}_lexical_{op}" for table in ("facts", "episode_cues", "knowledge") for op in ("delete", "update")
} | {"messages_fts_delete"} | {f"{table}_change_log" for table in ("facts", "episode_cues", "knowledge")}
# PostgreSQL (0020_postgresql): postings tables instead of FTS5, plpgsql triggers
PG_TABLES = {"lexical_docs", "lexical_postings", "lexical_stats"}
PG_TRIGGERS = {"knowledge_q8_insert", "knowledge_q8_update", "knowledge_q8_delete"} | {
    f"{table}_{op}" for table in ("facts", "episode_cues", "knowledge")
    for op in ("lexical_deleted", "lexical_truncated", "lexical_update", "change_log")
} | {"messages_lexical_deleted", "messages_lexical_truncated"}


def _objects(kind: str) -> set[str]:
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            if kind == "table":
                cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
            else:
                cur.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")
        else:
            cur.execute("SELECT name FROM sqlite_master WHERE type = %s", [kind])
        return {r[0] for r in cur.fetchall()}


@pytest.mark.sqlite_only("FTS5 and fts5vocab tables, SQLite triggers")
def test_fts_vocab_and_triggers_exist(db):
    tables = _objects("table")
    assert FTS <= tables
    assert VOCAB <= tables
    assert TRIGGERS <= _objects("trigger")
    with connection.cursor() as cur:
        cur.execute("SELECT sql FROM sqlite_master WHERE name = 'facts_fts'")
        sql = cur.fetchone()[0]
    assert "fts5" in sql and "content=''" in sql and "unicode61" in sql


def test_seed_rows(db):
    from memory.models import Person, Stream

    assert Person.objects.get(pk=1).kind == "owner"
    assert Stream.objects.get(pk=1).kind == "desktop"


@pytest.mark.sqlite_only("fts5vocab")
def test_vocab_reports_document_frequencies(person):
    services.add_fact(person_id=person.pk, content="玩家不喜欢吃香菜", at=1)
    services.add_fact(person_id=person.pk, content="他喜欢香菜和猫", at=1)
    with connection.cursor() as cur:
        cur.execute("SELECT doc FROM facts_fts_vocab WHERE term = '香菜'")
        assert cur.fetchone()[0] == 2


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_memory_migrations_are_reversible():
    postgresql = connection.vendor == "postgresql"
    lexical_tables, triggers = (PG_TABLES, PG_TRIGGERS) if postgresql else (FTS | VOCAB, TRIGGERS)
    call_command("migrate", "memory", "zero", verbosity=0)
    tables = _objects("table")
    assert not lexical_tables & tables
    assert not triggers & _objects("trigger")
    assert "facts" not in tables
    call_command("migrate", verbosity=0)
    assert lexical_tables <= _objects("table")
    assert triggers <= _objects("trigger")
    # the store works again after the round trip
    person = services.resolve_person(platform="qq", external_id="mig", name="迁移", at=1)
    fid = services.add_fact(person_id=person.pk, content="玩家不喜欢吃香菜", at=1).fact_id
    hits = selectors.recall_facts_in_scope(person_ids=[person.pk], query="香菜", now=1, stream_kind="direct")
    assert [h.id for h in hits] == [fid]
    for table in FTS:  # flush does not empty virtual tables
        lexical.clear(table)


@pytest.mark.sqlite_only("migration 0009 builds the FTS5 message index")
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_message_index_migration_indexes_existing_rows():
    call_command("migrate", "memory", "0008", verbosity=0)
    assert "messages_fts" not in _objects("table") and "messages_fts_delete" not in _objects("trigger")
    stream = services.resolve_stream(platform="qq", kind="direct", external_id="mig", name="迁移")
    other = services.resolve_stream(platform="qq", kind="direct", external_id="mig2", name="迁移2")
    with connection.cursor() as cur:  # rows written before the index existed
        cur.executemany(
            "INSERT INTO messages(role, content, created_at, stream_id) VALUES ('assistant', %s, 1, %s)",
            [("周末去爬山", stream.pk), ("！？", stream.pk), ("周末去爬山", other.pk), ("晚上喝乌龙茶", stream.pk)],
        )
    call_command("migrate", verbosity=0)
    assert [m.content for m in selectors.search_messages(stream_id=stream.pk, query="爬山")] == ["周末去爬山"]
    assert [m.content for m in selectors.search_messages(stream_id=stream.pk, query="乌龙茶")] == ["晚上喝乌龙茶"]
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM messages_fts_docsize")
        assert cur.fetchone()[0] == 3  # the punctuation-only message has no FTS row
        cur.execute("SELECT count(*) FROM messages WHERE tokens = ''")
        assert cur.fetchone()[0] == 1
    from memory.models import Message

    Message.objects.filter(stream_id=other.pk).delete()  # the trigger removes its FTS row
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM messages_fts_docsize")
        assert cur.fetchone()[0] == 2
    # teardown's flush deletes the messages: the trigger empties messages_fts with them


@pytest.mark.sqlite_only("the FTS5 system check")
def test_system_check_reports_missing_fts5(monkeypatch):
    assert [e for e in memory.checks.check_fts5() if e.id == "memory.E001"] == []
    monkeypatch.setattr(memory.checks, "fts5_available", lambda: False)
    errors = memory.checks.check_fts5()
    assert [e.id for e in errors] == ["memory.E001"]
    assert isinstance(errors[0], checks.Error)
    registered = checks.run_checks(tags=[checks.Tags.database], databases=None, include_deployment_checks=False)
    assert "memory.E001" in [e.id for e in registered]


@pytest.mark.sqlite_only("FTS5 in the linked SQLite")
def test_fts5_is_available_here():
    assert memory.checks.fts5_available() is True


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_tokens_from_before_scopes_keep_every_scope():
    call_command("migrate", "memory", "0011", verbosity=0)
    with connection.cursor() as cur:  # a token issued before scopes existed
        cur.execute("INSERT INTO api_tokens(name, token_hash, created_at) VALUES ('old-bot', 'ab12', '2026-01-01')")
    call_command("migrate", verbosity=0)
    from memory.models import ApiToken

    token = ApiToken.objects.get(name="old-bot")
    assert token.scopes == ["admin"] and token.has_scope("undo") and token.revoked_at is None


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_tokens_column_rename_keeps_a_stores_index():
    """0032 renames facts' and knowledge's ``tokens_v2`` to ``tokens``: the stored tokens, the
    lexical index and the triggers that watch the column (SQLite 0008, PostgreSQL 0020) go on."""
    from memory.backends import postgresql
    from memory.engine.tokenize import index_tokens
    from memory.models import Fact, Knowledge

    def revision(table: str) -> str | None:
        with connection.cursor() as cur:
            cur.execute("SELECT value FROM meta WHERE key = %s", [f"lexical_revision:{table}"])
            row = cur.fetchone()
        return row and row[0]

    call_command("migrate", "memory", "0031", verbosity=0)
    fact, knowledge = index_tokens("玩家不喜欢吃香菜"), index_tokens("香菜是伞形科植物")
    with connection.cursor() as cur:  # a store written before the rename: rows and their index
        cur.execute(
            "INSERT INTO facts(id, person_id, kind, content, content_key, strength, half_life_hours, updated_at,"
            " created_at, hit_count, due_at, active, origin_kind, slot, tokens_v2, source)"
            " VALUES (900, 1, '偏好', '玩家不喜欢吃香菜', 'k900', 0.8, 720, 1, 1, 0, 10, TRUE, 'legacy', '', %s, 'mig')",
            [fact],
        )
        cur.execute(
            "INSERT INTO knowledge(id, content, content_key, source, tokens_v2, created_at, hit_count)"
            " VALUES (900, '香菜是伞形科植物', 'k900', 'mig', %s, 1, 0)", [knowledge],
        )
        if connection.vendor == "postgresql":
            postgresql.reindex_all(cur, {"facts_fts": "tokens_v2", "knowledge_fts": "tokens_v2"})
        else:
            cur.execute("INSERT INTO facts_fts(rowid, tokens, person) VALUES (900, %s, 'p1')", [fact])
            cur.execute("INSERT INTO knowledge_fts(rowid, tokens) VALUES (900, %s)", [knowledge])
    call_command("migrate", verbosity=0)
    try:
        assert Fact.objects.get(pk=900).tokens == fact and Knowledge.objects.get(pk=900).tokens == knowledge
        hits = selectors.recall_facts_in_scope(person_ids=[1], query="香菜", now=1, stream_kind="direct")
        assert [h.id for h in hits] == [900]
        match = lexical.match_for("knowledge_fts", "香菜")
        assert [i for i, _ in lexical.knowledge_candidates(match, limit=5)] == [900]
        for table, model in (("facts", Fact), ("knowledge", Knowledge)):  # the update triggers follow the column
            before = revision(table)
            model.objects.filter(pk=900).update(tokens="别的 词")
            assert revision(table) != before, table
    finally:
        Fact.objects.filter(pk=900).delete()
        Knowledge.objects.filter(pk=900).delete()
        for table in FTS:  # flush does not empty virtual tables
            lexical.clear(table)
