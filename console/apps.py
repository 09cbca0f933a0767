from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The operator console's pages: on top of memory, curation and tuning, imported by none of them."""

    name = "console"
    verbose_name = "Console"
