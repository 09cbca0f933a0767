"""Embed every fact and knowledge row whose vector is missing, synchronously.

Safe to run at any time and any number of times: rows are selected by their
missing vector, and a changed embedding model or dimension first clears the
stored vectors so they are all recomputed.
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memory import pipeline


class Command(BaseCommand):
    help = "Embed facts, knowledge and messages whose vector is missing (after a model change: all of them)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch", type=int, default=None, help="texts per request (at most 20)")

    def handle(self, *args: Any, batch: int | None = None, **options: Any) -> None:
        total = pipeline.BackfillResult()
        while True:
            result = pipeline.backfill_vectors(batch=batch, max_rows=1000)
            if not result.enabled:
                raise CommandError("embeddings are disabled (EMBEDDING_PROVIDER=none or misconfigured)")
            total.facts += result.facts
            total.knowledge += result.knowledge
            total.messages += result.messages
            total.failed += result.failed
            total.cleared += result.cleared
            if options["verbosity"] >= 1 and (result.facts or result.knowledge or result.messages):
                self.stdout.write(
                    f"  embedded {total.facts} facts, {total.knowledge} knowledge, {total.messages} messages …"
                )
            if not result.more:
                break
        self.stdout.write(
            f"facts={total.facts} knowledge={total.knowledge} messages={total.messages} failed={total.failed}"
            f" cleared={total.cleared}"
        )
        if total.failed:
            self.stderr.write(f"{total.failed} rows could not be embedded; they stay NULL for the next run")
