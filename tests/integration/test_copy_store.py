"""``manage.py copy_store --to postgres://…`` (issue 12, item 7): a SQLite store moved into PostgreSQL.

A file SQLite store is filled by ``seed_demo`` (every layer, vectors, the journal, turns, a job,
an import) plus an API token, then copied into a throwaway PostgreSQL database. The copy keeps
ids and vectors, resets sequences, indexes the rows for the target's BM25, and the command's
own verification (row counts, same top ids of a recall sample) passes. A second copy into the
now non-empty database is refused without touching it.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests import dbenv

pytestmark = [
    pytest.mark.integration,
    # the source is a SQLite file and the target a PostgreSQL database it creates, whatever the suite's
    # backend: the PostgreSQL suite (.ci/run runs both at once) would repeat the very same test
    pytest.mark.sqlite_only("copies a SQLite store into its own PostgreSQL database: run once, by the SQLite suite"),
]

ROOT = Path(__file__).resolve().parents[2]
SERVER = os.environ.get("MEMORY_TEST_PG_SERVER", "postgres://postgres@127.0.0.1:5432")
PREFIX = os.environ.get("MEMORY_TEST_PG_PREFIX", "test_memory")


def _psycopg():
    import psycopg  # a requirement; PostgreSQL 15 runs on every machine here and in CI
    try:
        psycopg.connect(f"{SERVER}/postgres", connect_timeout=3).close()
    except psycopg.OperationalError:
        pytest.fail(f"no PostgreSQL at {SERVER}: this test needs it (it must not be skipped)")
    return psycopg


def manage(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    if check:
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
    return done


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> dict[str, str]:
    db = tmp_path_factory.mktemp("copy-store") / "source.sqlite3"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "MEMORY_DB": str(db),
           "MEMORY_ENQUEUE_TASKS": "0", "EMBEDDING_PROVIDER": "local", "LLM_BASE_URL": "", "LLM_MODEL": "",
           "LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)
    dbenv.migrated_store(env)
    manage(env, "seed_demo")
    manage(env, "create_api_token", "copy-bot", "--scope", "bot", "--scope", "curation")
    return env


@pytest.fixture
def target():
    psycopg = _psycopg()
    name = f"{PREFIX}_copy_store_{os.getpid()}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"{SERVER}/{name}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_copy_keeps_every_layer_and_answers_alike(source, target):
    psycopg = _psycopg()
    done = manage(source, "copy_store", "--to", target, "--sample", "12")
    out = done.stdout
    assert "target is empty: migrating it" in out and "lexical index:" in out
    assert "← differs" not in out
    recall_line = next(line for line in out.splitlines() if line.startswith("same top ids on both databases"))
    for part in recall_line.split(":", 1)[1].split(","):
        same, total = part.split()[-1].split("/")
        assert same == total and int(total) > 0, recall_line

    lite = sqlite3.connect(source["MEMORY_DB"])
    with psycopg.connect(target) as pg:
        for table in ("persons", "identities", "streams", "messages", "episodes", "episode_cues", "facts",
                      "knowledge", "memory_nodes", "memory_edges", "knowledge_nodes", "knowledge_edges", "meta",
                      "pipeline_events", "turns", "jobs", "api_tokens", "fact_operations", "vector_space",
                      "auth_user", "import_batches"):
            want = lite.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            got = pg.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            assert got == want, table
            assert want > 0 or table in ("api_tokens",), f"the demo store should have {table} rows"
        # ids, texts, vectors and booleans as they were
        want = lite.execute("SELECT id, content, embedding, embedding_q8, active, superseded_by FROM facts"
                            " ORDER BY id").fetchall()
        got = pg.execute("SELECT id, content, embedding, embedding_q8, active, superseded_by FROM facts"
                         " ORDER BY id").fetchall()
        assert [(i, c, bytes(e) if e else None, bytes(q) if q else None, bool(a), s) for i, c, e, q, a, s in want] == \
               [(i, c, bytes(e) if e else None, bytes(q) if q else None, a, s) for i, c, e, q, a, s in got]
        assert any(row[2] for row in want), "the demo facts carry vectors"
        assert pg.execute("SELECT token_hash, scopes FROM api_tokens").fetchall()[0][1] == ["bot", "curation"]
        assert pg.execute("SELECT count(*) FROM lexical_docs").fetchone()[0] > 0
        max_fact = pg.execute("SELECT max(id) FROM facts").fetchone()[0]

    # the moved store works: a new fact gets the next id and is found by the target's BM25
    check = (
        "from memory import services, selectors\n"
        "p = services.resolve_person(platform='qq', external_id='copy-check', name='搬家')\n"
        "w = services.add_fact(person_id=p.pk, content='搬家以后他喜欢喝桂花乌龙', kind='偏好')\n"
        "hits = selectors.recall_facts_in_scope(person_ids=[p.pk], query='桂花乌龙', limit=3,"
        " now=services.now_ms(), stream_kind='direct')\n"
        "print(w.fact_id, [h.id for h in hits])\n"
    )
    env = {**source, "DATABASE_URL": target}
    fact_id, hits = manage(env, "shell", "-c", check).stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(fact_id) == max_fact + 1 and hits == f"[{fact_id}]"


def test_a_target_with_data_is_refused_and_left_alone(source, target):
    psycopg = _psycopg()
    manage(source, "copy_store", "--to", target, "--no-verify")
    with psycopg.connect(target) as pg:
        before = pg.execute("SELECT count(*), max(id) FROM messages").fetchone()
    again = manage(source, "copy_store", "--to", target, check=False)
    assert again.returncode != 0 and "not empty" in again.stderr
    with psycopg.connect(target) as pg:
        assert pg.execute("SELECT count(*), max(id) FROM messages").fetchone() == before


def test_only_postgresql_targets(source, tmp_path):
    refused = manage(source, "copy_store", "--to", f"sqlite:///{tmp_path / 'x.sqlite3'}", check=False)
    assert refused.returncode != 0 and "PostgreSQL" in refused.stderr
