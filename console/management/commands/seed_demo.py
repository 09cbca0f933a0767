"""Fill an empty database with the demo conversation set, pushed through the real pipeline.

1. Roles and users: groups operator / reviewer / staff (``ensure_roles``), one user per
   group (password ``<name>-password``) and the superuser ``demo`` / ``demo-password``.
2. Messages of four streams (``_demo_data``) go through ``services.append_message`` in
   time order, with their original timestamps spread over the last two months. After
   each message the stream's summarisation and extraction run in-process
   (``pipeline.summarize_stream`` / ``extract_stream``, offline heuristic providers)
   whenever they are due, at the message's time — so facts, supersedes, knowledge and
   association edges carry realistic ages and the forgetting curve has done its work.
   The demo streams are short, so the triggers are lowered to 24 (summaries) and 12
   (extraction) messages; batch sizes are the production ones. One desktop batch is
   given to a summariser that fails three times, leaving an ``unsummarized`` placeholder.
3. Vectors are backfilled with the configured embedder (skipped when there is none).
4. Curation: two hand-written slot conflicts (``add_fact`` with the same slot), a pin,
   an invalidation, a 改成 (replace) and an invalidation that is undone.
5. Nine recorded turns (``prepare_turn`` + ``confirm_turn``) so the turn pages and tuning have traces, three
   active recalls (``cognitive_recall``, which link what they adopt), a knowledge import (``start_import`` + ``run_import``) and an edge-decay run.

Idempotent: messages carry external ids, users and groups are get-or-create, and
``--if-empty`` skips everything once the database holds any message.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from django.test.utils import override_settings
from django.utils import timezone

from console.management.commands._demo_data import KNOWLEDGE_DOC, PEOPLE, STREAMS, TURNS
from curation import services as curation
from memory import pipeline, recall, services
from memory.dispatch import triggers
from memory.management.commands.ensure_roles import ensure_roles
from memory.models import Episode, Fact, Knowledge, Message, Person, Stream

DAY = 24 * 3_600_000
HOUR = 3_600_000
MINUTE = 60_000
DEMO_TRIGGERS = {"SUMMARIZE_TRIGGER_MESSAGES": 24, "FACT_EXTRACT_TRIGGER_MESSAGES": 12, "MEMORY_ENQUEUE_TASKS": False}
USERS = [("operator", "operator"), ("reviewer", "reviewer"), ("staff", "staff")]


class _FailingSummariser:
    """A summariser whose model never answers: three failures make a placeholder episode."""

    label = "demo-failing"

    def summarise(self, lines: Any, participants: Any = ()) -> None:
        raise TimeoutError("模型超时（演示：连续三次失败后写入占位情节）")


@contextlib.contextmanager
def _quiet(logger: str, level: int):
    """The pipeline's per-batch log lines are for a running service: the command prints its own summary."""
    log = logging.getLogger(logger)
    previous = log.level
    log.setLevel(level)
    try:
        yield
    finally:
        log.setLevel(previous)


class Command(BaseCommand):
    help = "Create demo users and push a Chinese demo conversation set through the memory pipeline."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--if-empty", action="store_true", help="do nothing when the database has messages")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["if_empty"] and Message.objects.exists():
            self.stdout.write("seed_demo: the database already has messages, nothing to do")
            return
        started = time.monotonic()
        self.stdout.write("seed_demo: writing the demo memory (four conversations over two months, through the real pipeline) …")
        self._users()
        now = services.now_ms()
        with override_settings(**DEMO_TRIGGERS), _quiet("memory", logging.WARNING):
            people = self._conversations(now)
            self._vectors()
            self._curation(now, people)
            self._turns(now, people)
            self._import(now)
            frozen = pipeline.edges_decay(at=now)
        self.stdout.write(
            f"seed_demo: {Message.objects.count()} messages, {Episode.objects.count()} episodes, "
            f"{Fact.objects.count()} facts, {Knowledge.objects.count()} knowledge items; "
            f"{frozen} association edges decayed below the freezing line"
        )
        self.stdout.write(
            "seed_demo: one episode is a placeholder on purpose — a demonstration of a summary that failed three "
            "times (the demo's summariser of the desktop stream times out), as the dashboard and Episodes show it"
        )
        self.stdout.write(
            f"seed_demo: done in {time.monotonic() - started:.1f} s; log in as demo / demo-password "
            "(or operator, reviewer, staff with <name>-password)"
        )

    # --- users -----------------------------------------------------------------

    def _users(self) -> None:
        groups = ensure_roles()
        for name, group in USERS:
            user, created = User.objects.get_or_create(username=name, defaults={"is_staff": name == "staff"})
            if created:
                user.set_password(f"{name}-password")
                user.save(update_fields=["password"])
            user.groups.add(groups[group])
        if not User.objects.filter(username="demo").exists():
            User.objects.create_superuser("demo", "demo@example.com", "demo-password")

    # --- conversations through the pipeline --------------------------------------

    def _conversations(self, now: int) -> dict[str, Person]:
        people = {
            key: services.resolve_person(platform=p, external_id=ext, name=name, at=now - 60 * DAY)
            for key, (p, ext, name) in PEOPLE.items()
        }
        people["owner"] = Person.objects.get(pk=1)
        timeline = []
        for spec in STREAMS:
            stream = services.resolve_stream(
                platform=spec["platform"], kind=spec["kind"], external_id=spec["external_id"], name=spec["name"]
            )
            for s, (days_ago, hour, lines) in enumerate(spec["sessions"]):
                day = timezone.localtime(dt.datetime.fromtimestamp((now - days_ago * DAY) / 1000, tz=dt.UTC))
                start = int(day.replace(hour=hour, minute=0, second=0, microsecond=0).timestamp() * 1000)
                for i, (speaker, text) in enumerate(lines):
                    at = min(start + i * 2 * MINUTE, now - 10 * MINUTE)
                    timeline.append((at, stream, f"demo-{spec['key']}-{s}-{i}", speaker, text))
        timeline.sort(key=lambda row: (row[0], row[2]))
        failed_once: set[int] = set()
        for at, stream, external_id, speaker, text in timeline:
            sender = None if speaker == "bot" else people[speaker].pk
            services.append_message(
                stream_id=stream.pk, role="assistant" if speaker == "bot" else "user", content=text,
                sender_person_id=sender, external_message_id=external_id, at=at,
            )
            if stream.kind == "desktop" and stream.pk not in failed_once and triggers.summarize_due(stream.pk):
                failed_once.add(stream.pk)
                with _quiet("memory.pipeline", logging.CRITICAL):  # the three failures are the demonstration
                    for _ in range(3):
                        pipeline.summarize_stream(stream_id=stream.pk, summariser=_FailingSummariser(), at=at)
            while pipeline.summarize_stream(stream_id=stream.pk, at=at).status == "written":
                pass
            while pipeline.extract_stream(stream_id=stream.pk, at=at).status in ("written", "no_participants"):
                pass
        return people

    def _vectors(self) -> None:
        try:
            result = pipeline.backfill_vectors()
        except Exception as exc:  # vectors are a side channel; the demo works without them
            self.stderr.write(f"seed_demo: vector backfill skipped ({exc})")
            return
        if result.enabled:
            self.stdout.write(f"seed_demo: vectors of {result.facts} facts, {result.knowledge} knowledge items and "
                              f"{result.messages} messages (the configured embedding model)")
        else:
            self.stdout.write("seed_demo: no embedding model configured (EMBEDDING_PROVIDER=none): lexical recall only")

    # --- curation ----------------------------------------------------------------

    def _fact(self, person: Person, needle: str) -> Fact | None:
        return (
            Fact.objects.valid().filter(person=person, content__contains=needle)
            .order_by("-id").first()
        )

    def _curation(self, now: int, people: dict[str, Person]) -> None:
        # Two hand-written conflicts: same slot, no supersede → a review-queue group each.
        services.add_fact(person_id=people["jie"].pk, content="阿杰住在重庆", kind="身份", slot="居住地",
                          origin_kind="direct", actor="manual", source="seed_demo", user="demo", at=now - 3 * DAY)
        services.add_fact(person_id=people["zhou"].pk, content="老周在开一家照相馆", kind="身份", slot="职业",
                          origin_kind="group", actor="manual", source="seed_demo", user="demo", at=now - 2 * DAY)
        # A wrong fact written by a bot client (invalidated below) and two short-lived states
        # (状态 has a 12 h half-life: the older one is frozen by the first turn's sweep).
        services.add_fact(person_id=people["owner"].pk, content="主人住在苏州", kind="身份", slot="居住地",
                          origin_kind="direct", source="api", at=now - 5 * DAY)
        services.add_fact(person_id=people["owner"].pk, content="主人这周在赶季度报告", kind="状态",
                          origin_kind="direct", source="seed_demo", at=now - 53 * DAY)
        services.add_fact(person_id=people["lin"].pk, content="小林今天加班到九点", kind="状态",
                          origin_kind="direct", source="seed_demo", at=now - 1 * DAY)
        steps = [
            ("pin", people["lin"], "花生过敏", {}),
            ("invalidate", people["owner"], "苏州", {}),
            ("replace", people["jie"], "喜欢打篮球", {"content": "阿杰喜欢打篮球，也开始打羽毛球"}),
            ("invalidate-undo", people["zhou"], "柯基", {}),
        ]
        for i, (op, person, needle, extra) in enumerate(steps):
            fact = self._fact(person, needle)
            if fact is None:
                self.stderr.write(f"seed_demo: no fact of {person} with {needle!r} to {op}")
                continue
            at = now - (10 - i) * HOUR
            try:
                if op == "pin":
                    curation.pin_fact(fact_id=fact.pk, user="operator", at=at)
                elif op == "invalidate":
                    curation.invalidate_fact(fact_id=fact.pk, user="operator", at=at)
                elif op == "replace":
                    curation.replace_fact(fact_id=fact.pk, user="operator", at=at, **extra)
                else:
                    operation = curation.invalidate_fact(fact_id=fact.pk, user="operator", at=at)
                    curation.undo_operation(operation_id=operation.pk, user="reviewer", at=at + 30 * MINUTE)
            except (curation.FactStateError, curation.CurationInputError, curation.FactNotFoundError) as exc:
                self.stderr.write(f"seed_demo: {op} of #{fact.pk} refused: {exc}")

    # --- turns, import -------------------------------------------------------------

    def _turns(self, now: int, people: dict[str, Person]) -> None:
        for (platform, kind, external_id), speaker, text, minutes_ago in TURNS:
            stream = Stream.objects.get(platform=platform, kind=kind, external_id=external_id)
            at = now - minutes_ago * MINUTE
            ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=people[speaker].pk, text=text, at=at)
            recall.confirm_turn(turn_id=ctx.turn_id, query_embedding=recall.embed_query(text), at=at + MINUTE)
        # Active recall actions the bot took: they link what they adopted (episodes too)
        # and leave ``memory_spread`` runs in the ledger.
        for (platform, kind, external_id), speaker, query in [
            (("qq", "direct", "lin"), "lin", "团子 猫"),
            (("qq", "direct", "jie"), "jie", "产品经理"),
            (("qq", "group", "hike-group"), "zhou", "爬山"),
        ]:
            stream = Stream.objects.get(platform=platform, kind=kind, external_id=external_id)
            recall.cognitive_recall(stream_id=stream.pk, speaker_id=people[speaker].pk, query=query, hops=2,
                                    at=now - 20 * MINUTE)

    def _import(self, now: int) -> None:
        job = pipeline.start_import(
            text=KNOWLEDGE_DOC, origin_name="宠物与出行小知识.txt", kind="paste", user="staff", enqueue=False,
            at=now - 2 * HOUR,
        )
        try:
            pipeline.run_import(job_id=job.pk, at=now - 2 * HOUR)
        except Exception as exc:  # an embedding failure must not stop the demo
            self.stderr.write(f"seed_demo: import job #{job.pk} failed: {exc}")
