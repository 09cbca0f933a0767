"""``manage.py copy_store --to postgres://user@host:5432/memory`` — move the store (memory/management/copy_store.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memory.management import copy_store as mover


class Command(BaseCommand):
    help = (
        "Copy every table of the configured database (ids, vectors, journal, jobs, tokens …) into an empty "
        "PostgreSQL database, migrate it first, rebuild its lexical index, then verify counts and a sample of recalls."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--to", dest="to", help="the empty target database, postgres://user@host:5432/name")
        parser.add_argument("--sample", type=int, default=20, help="queries per recall path compared (default 20)")
        parser.add_argument("--no-verify", action="store_true", help="skip the recall comparison (counts are checked)")
        # the step a child process runs on each side
        parser.add_argument("--answer", metavar="QUERIES.json", help="(internal) answer a recall sample here")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["answer"]:
            queries = json.loads(Path(options["answer"]).read_text(encoding="utf-8"))
            self.stdout.write(json.dumps(mover.answer_sample(queries)))
            return
        if not options["to"]:
            raise CommandError("--to postgres://… is required")
        try:
            report = mover.copy_store(
                options["to"], progress=lambda line: self.stdout.write(line, ending="\n") or self.stdout.flush(),
                sample=options["sample"], verify=not options["no_verify"],
            )
        except mover.CopyRefused as exc:
            raise CommandError(str(exc)) from exc
        width = max(len(t) for t in report.tables)
        self.stdout.write(f"{'table':<{width}}  {'source':>10}  {'target':>10}")
        for table, (a, b) in report.tables.items():
            self.stdout.write(f"{table:<{width}}  {a:>10,}  {b:>10,}{'' if a == b else '  ← differs'}")
        if report.recalls:
            paths = ", ".join(f"{p} {v}" for p, v in report.recalls["paths"].items())
            self.stdout.write(f"same top ids on both databases: {paths}")
            for miss in report.recalls["mismatches"]:
                self.stdout.write(f"  differs: {json.dumps(miss, ensure_ascii=False)}")
        self.stdout.write(f"done in {report.seconds:.1f} s")
        if not report.ok:
            raise CommandError("verification failed: " + ("row counts differ" if not report.counts_match else
                                                          "recalls differ"))
