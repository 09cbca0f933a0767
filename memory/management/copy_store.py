"""Move a store: every table of the configured database into an empty PostgreSQL database.

``manage.py copy_store --to postgres://user@host:5432/memory`` (the command is a thin
wrapper around :func:`copy_store`):

1. **Refuse a target that holds data.** Only what ``migrate`` itself writes may be
   there (``django_migrations``, content types, permissions).
2. **Migrate the target** (``migrate --database``), so its schema, indexes and the
   PostgreSQL side of the storage seam are those of this code.
3. **Copy every model table** of every installed app — persons, identities, streams,
   messages (vectors included), episodes and cues, facts, knowledge, import batches,
   the association graph (nodes, edges) and the concept graph, ``meta`` (cursors,
   revisions, the active tuning profile), vector spaces, pipeline events, turns,
   queue failures, jobs, API tokens, the forget log, the fact operations journal,
   retrieval profiles, users, groups, permissions, sessions, the admin log — with
   their ids, in one transaction and with PostgreSQL's ``COPY``. Content types and
   permissions that ``migrate`` created are replaced by the source's rows (same ids,
   so every reference to them stays right).
4. **Reset the sequences** of the target so that new rows get ids above the copied ones;
   after the rebuild below, ``VACUUM (ANALYZE)`` gives the planner its statistics at once.
5. **Rebuild the lexical index on the target** from the tokens every row keeps
   (``tokens``): SQLite's FTS5 tables are not copied, the postings
   tables of the PostgreSQL backend are filled from the same tokens
   (``memory.backends.postgresql.reindex_all``). The target's own triggers are off
   during the copy (the change log of resident indexes, ``memory_changes``, is not
   copied either: a process on the target builds its indexes from the rows).
6. **Verify**: the row count of every table, and a sample of recalls — facts in scope,
   ``inspect`` over a stream's messages, knowledge — must give the same top ids on both
   databases. Each side is asked by a child process configured for it (``DATABASE_URL``),
   so per-process caches (resident BM25 and vector indexes) are each backend's own.

What lives in Redis (per-stream locks, the short-term activation, queued tasks) is not
copied: stop the web processes and workers first, copy, then start them on the new
``DATABASE_URL`` (docs/DEPLOY.md).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dj_database_url
from django.apps import apps
from django.conf import settings
from django.core.management.color import no_style
from django.db import connections, models, transaction

from memory import selectors
from memory.backends import postgresql
from memory.engine.tokenize import query_terms
from memory.models import Fact, Knowledge, Message

TARGET = "copy_store_target"
#: Tables ``migrate`` fills itself; a target holding only these is empty.
MIGRATE_WRITES = {"django_migrations", "django_content_type", "auth_permission"}
#: Not copied: the change log resident indexes read (memory/search/changes.py) — its positions are the
#: source backend's; a process on the target builds its indexes from the rows and follows the
#: target's own log from there.
NOT_COPIED = {"memory_changes"}
CHUNK = 2000
ROOT = Path(settings.BASE_DIR)  # where manage.py is

Progress = Callable[[str], None]


class CopyRefused(RuntimeError):
    """The target is not an empty PostgreSQL database (nothing was written)."""


@dataclass
class CopyReport:
    tables: dict[str, tuple[int, int]] = field(default_factory=dict)  # table: (source rows, target rows)
    recalls: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def counts_match(self) -> bool:
        return all(a == b for a, b in self.tables.values())

    @property
    def recalls_match(self) -> bool:
        return not self.recalls.get("mismatches")

    @property
    def ok(self) -> bool:
        return self.counts_match and self.recalls_match


def target_settings(url: str) -> dict[str, Any]:
    config = dj_database_url.parse(url)
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise CopyRefused(f"--to must name a PostgreSQL database (postgres://…), not {config['ENGINE']}")
    return config


def open_target(url: str, alias: str = TARGET) -> str:
    """Register ``url`` as the database alias ``alias`` (settings are filled with Django's defaults)."""
    config = target_settings(url)
    filled = connections.configure_settings({"default": dict(connections.settings["default"]), alias: config})
    connections.settings[alias] = filled[alias]
    return alias


def copied_models() -> list[type[models.Model]]:
    """Every concrete table of the installed apps (M2M tables included), parents before children."""
    found = [
        m for m in apps.get_models(include_auto_created=True)
        if m._meta.managed and not m._meta.proxy and not m._meta.swapped
    ]
    by_table = {m._meta.db_table: m for m in found}
    ordered: list[type[models.Model]] = []
    seen: set[str] = set()

    def visit(model: type[models.Model], stack: tuple[str, ...] = ()) -> None:
        table = model._meta.db_table
        if table in seen or table in stack:
            return
        for f in model._meta.concrete_fields:
            if f.is_relation and f.related_model is not None and f.db_constraint:
                parent = f.related_model._meta.db_table
                if parent != table and parent in by_table:
                    visit(by_table[parent], (*stack, table))
        seen.add(table)
        ordered.append(model)

    for model in sorted(found, key=lambda m: m._meta.db_table):
        if model._meta.db_table not in NOT_COPIED:
            visit(model)
    return ordered


def _row_count(alias: str, table: str) -> int:
    with connections[alias].cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {connections[alias].ops.quote_name(table)}")
        return int(cur.fetchone()[0])


#: Rows the migrations themselves write (the owner person and the desktop stream, id 1).
MIGRATION_ROWS = {"persons": "id <> 1", "streams": "id <> 1"}


def check_empty(alias: str) -> None:
    """Raise :class:`CopyRefused` when a table of the target holds more than a fresh ``migrate`` writes."""
    conn = connections[alias]
    tables = set(conn.introspection.table_names())
    busy = {}
    for table in sorted(tables - MIGRATE_WRITES):
        where = MIGRATION_ROWS.get(table)
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {conn.ops.quote_name(table)}" + (f" WHERE {where}" if where else ""))
            if n := int(cur.fetchone()[0]):
                busy[table] = n
    if busy:
        listed = ", ".join(f"{t} ({n})" for t, n in list(busy.items())[:8])
        raise CopyRefused(f"the target database is not empty: {listed}{' …' if len(busy) > 8 else ''}")


def _converters(model: type[models.Model]) -> list[Callable[[Any], Any] | None]:
    """Per column: how a raw SQLite value becomes one PostgreSQL's COPY accepts."""
    out: list[Callable[[Any], Any] | None] = []
    for f in model._meta.concrete_fields:
        kind = f.get_internal_type()
        if kind in ("BooleanField", "NullBooleanField"):
            out.append(lambda v: None if v is None else bool(v))
        elif kind == "DateTimeField":  # SQLite keeps naive UTC text (USE_TZ); say so
            out.append(lambda v: v if v is None or not isinstance(v, str) or "+" in v[10:] else v + "+00:00")
        elif kind == "JSONField":
            out.append(lambda v: v if v is None or isinstance(v, str) else json.dumps(v))
        elif kind == "BinaryField":
            out.append(lambda v: None if v is None else bytes(v))
        else:
            out.append(None)
    return out


def copy_table(model: type[models.Model], *, source: str, target: str, progress: Progress) -> int:
    """``COPY`` every row of ``model``'s table from ``source`` into ``target``, ids included."""
    meta = model._meta
    columns = [f.column for f in meta.concrete_fields]
    convert = _converters(model)
    quote_src, quote_dst = connections[source].ops.quote_name, connections[target].ops.quote_name
    total = _row_count(source, meta.db_table)
    done, started, shown = 0, time.monotonic(), time.monotonic()
    select = (
        f"SELECT {', '.join(quote_src(c) for c in columns)} FROM {quote_src(meta.db_table)}"
        f" ORDER BY {quote_src(meta.pk.column)}"
    )
    copy_sql = f"COPY {quote_dst(meta.db_table)} ({', '.join(quote_dst(c) for c in columns)}) FROM STDIN"
    with connections[source].cursor() as src, connections[target].cursor() as dst:
        src.execute(select)
        with dst.cursor.copy(copy_sql) as copy:
            while rows := src.fetchmany(CHUNK):
                for row in rows:
                    copy.write_row([c(v) if c is not None and v is not None else v for c, v in zip(convert, row, strict=True)])
                done += len(rows)
                if time.monotonic() - shown > 2.0:
                    shown = time.monotonic()
                    rate = done / max(shown - started, 1e-9)
                    progress(f"  {meta.db_table}: {done:,}/{total:,} rows ({rate:,.0f} rows/s)")
    return done


def reset_sequences(alias: str, model_list: Iterable[type[models.Model]]) -> None:
    conn = connections[alias]
    with conn.cursor() as cur:
        for sql in conn.ops.sequence_reset_sql(no_style(), list(model_list)):
            cur.execute(sql)


def child_env(database_url: str | None) -> dict[str, str]:
    """The environment of a child process working on the source (``None``) or on ``database_url``."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings")}
    env.pop("DATABASE_URL", None)
    if database_url:
        env["DATABASE_URL"] = database_url
    else:
        source = settings.DATABASES["default"]
        if source["ENGINE"] == "django.db.backends.sqlite3":
            env["MEMORY_DB"] = str(source["NAME"])
        else:
            env["DATABASE_URL"] = os.environ.get("DATABASE_URL", "")
    env["MEMORY_ENQUEUE_TASKS"] = "0"  # nothing a child does enqueues work
    return env


def run_child(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "copy_store", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"copy_store {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def user_triggers(alias: str, tables: Iterable[str], *, enabled: bool) -> None:
    """Switch the target's own triggers (change log, lexical and revision bumps) off or on; FKs stay checked."""
    conn = connections[alias]
    with conn.cursor() as cur:
        cur.execute("SELECT DISTINCT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
                    " WHERE NOT t.tgisinternal AND c.relname = ANY(%s) ORDER BY 1", [list(tables)])
        with_triggers = [row[0] for row in cur.fetchall()]
        if enabled:  # the deferred foreign-key checks run now (ALTER TABLE refuses pending trigger events)
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for table in with_triggers:
            cur.execute(f"ALTER TABLE {conn.ops.quote_name(table)} {'ENABLE' if enabled else 'DISABLE'} TRIGGER USER")


# --- recall sample ------------------------------------------------------------------------------


def recall_sample(n: int) -> list[dict[str, Any]]:
    """``n`` queries per recall path, taken from the stored rows (spread over the id range)."""
    def spread_ids(qs, k: int) -> list[int]:
        ids = list(qs.order_by("id").values_list("id", flat=True))
        if len(ids) <= k:
            return ids
        step = len(ids) / k
        return [ids[int(i * step)] for i in range(k)]

    def words(text: str, count: int = 3) -> str:
        terms = [t for t in query_terms(text) if len(t) > 1]
        return " ".join(terms[:count]) or text[:12]

    now = max(Fact.objects.aggregate(m=models.Max("updated_at"))["m"] or 0, 1)
    queries: list[dict[str, Any]] = []
    for fid in spread_ids(Fact.objects.filter(superseded_by__isnull=True), n):
        fact = Fact.objects.only("person_id", "content").get(pk=fid)
        queries.append({"path": "facts", "person_ids": [fact.person_id], "query": words(fact.content), "now": now})
    for mid in spread_ids(Message.objects.exclude(tokens=""), n):
        msg = Message.objects.only("stream_id", "content").get(pk=mid)
        queries.append({"path": "inspect", "stream_id": msg.stream_id, "query": words(msg.content)})
    for kid in spread_ids(Knowledge.objects.all(), n):
        queries.append({"path": "knowledge", "query": words(Knowledge.objects.get(pk=kid).content)})
    return queries


def answer_sample(queries: list[dict[str, Any]]) -> list[list[int]]:
    """Top ids of each query on this process's database (lexical ranking: no query vectors)."""
    out: list[list[int]] = []
    for q in queries:
        if q["path"] == "facts":
            hits = selectors.recall_facts_in_scope(
                person_ids=q["person_ids"], query=q["query"], limit=6, now=q["now"], stream_kind="direct",
            )
        elif q["path"] == "inspect":
            hits = selectors.search_messages(stream_id=q["stream_id"], query=q["query"], limit=6)
        else:
            hits = selectors.search_knowledge(query=q["query"], limit=5)
        out.append([int(h.id) for h in hits])
    return out


def compare_recalls(target_url: str, n: int, progress: Progress) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "queries.json"
        queries = recall_sample(n)
        spec.write_text(json.dumps(queries, ensure_ascii=False), encoding="utf-8")
        progress(f"recall sample: {len(queries)} queries (facts in scope, inspect, knowledge) on both databases")
        source = json.loads(run_child(["--answer", str(spec)], child_env(None)).strip().splitlines()[-1])
        target = json.loads(run_child(["--answer", str(spec)], child_env(target_url)).strip().splitlines()[-1])
    by_path: dict[str, list[int]] = {}
    mismatches = []
    for q, a, b in zip(queries, source, target, strict=True):
        same = a == b
        by_path.setdefault(q["path"], [0, 0])
        by_path[q["path"]][0] += same
        by_path[q["path"]][1] += 1
        if not same:
            mismatches.append({**q, "source": a, "target": b})
    return {"paths": {p: f"{s}/{t}" for p, (s, t) in by_path.items()}, "mismatches": mismatches[:20]}


# --- the whole move ------------------------------------------------------------------------------


def copy_store(target_url: str, *, progress: Progress = print, sample: int = 20, verify: bool = True) -> CopyReport:
    started = time.monotonic()
    alias = open_target(target_url)
    report = CopyReport()
    try:
        check_empty(alias)
        progress("target is empty: migrating it")
        # In a child configured for the target: migrations and post_migrate see that backend as theirs.
        subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"], cwd=ROOT,
                       env=child_env(target_url), check=True)
        connections[alias].close()
        check_empty(alias)
        ordered = copied_models()
        progress(f"copying {len(ordered)} tables")
        target = connections[alias]
        tables = [m._meta.db_table for m in ordered]
        with transaction.atomic(using=alias):
            with target.cursor() as cur:  # what migrate wrote is replaced by the source's rows
                cur.execute("TRUNCATE " + ", ".join(target.ops.quote_name(t) for t in tables) + " CASCADE")
                cur.execute("SET CONSTRAINTS ALL DEFERRED")
            # Rows arrive with their ids and their stored tokens: the insert triggers (change log,
            # revision bumps per knowledge vector) would only log what the rebuild below indexes anyway.
            user_triggers(alias, tables, enabled=False)
            for model in ordered:
                t0 = time.monotonic()
                rows = copy_table(model, source="default", target=alias, progress=progress)
                if rows:
                    progress(f"{model._meta.db_table}: {rows:,} rows in {time.monotonic() - t0:.1f} s")
            user_triggers(alias, tables, enabled=True)
            reset_sequences(alias, ordered)
            progress("rebuilding the lexical index on the target from the stored tokens")
            t0 = time.monotonic()
            with target.cursor() as cur:
                indexed = postgresql.reindex_all(cur)
            progress(f"lexical index: {indexed:,} rows in {time.monotonic() - t0:.1f} s")
        # A bulk load leaves the planner without statistics (autovacuum gets to it later): until
        # then every query plans blind. VACUUM also marks the pages all-visible (index-only scans).
        t0 = time.monotonic()
        with target.cursor() as cur:
            cur.execute("VACUUM (ANALYZE)")
        progress(f"VACUUM (ANALYZE) in {time.monotonic() - t0:.1f} s")
        for model in ordered:
            table = model._meta.db_table
            report.tables[table] = (_row_count("default", table), _row_count(alias, table))
        if verify:
            report.recalls = compare_recalls(target_url, sample, progress)
    finally:
        connections[alias].close()
    report.seconds = time.monotonic() - started
    return report
