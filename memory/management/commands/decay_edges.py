"""Run the association-edge decay sweep once (a rerun at the same time freezes nothing new)."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory import pipeline


class Command(BaseCommand):
    help = "Freeze association edges whose retention fell below 0.1."

    def handle(self, *args: Any, **options: Any) -> None:
        frozen = pipeline.edges_decay()
        self.stdout.write(f"frozen={frozen}")
