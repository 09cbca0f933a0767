from __future__ import annotations

from django.apps import AppConfig


class TuningConfig(AppConfig):
    name = "tuning"
    default_auto_field = "django.db.models.BigAutoField"
