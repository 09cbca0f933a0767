"""Freeze facts whose retention fell below the threshold (safe to rerun)."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory import services


class Command(BaseCommand):
    help = "Freeze active facts whose retention fell below the freeze threshold."

    def handle(self, *args: Any, **options: Any) -> None:
        frozen = services.sweep()
        self.stdout.write(f"frozen={frozen}")
