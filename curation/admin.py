"""Django admin for the operation journal: read-only (undo is an operation of its own)."""
from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from curation.models import FactOperation


@admin.register(FactOperation)
class FactOperationAdmin(admin.ModelAdmin):
    list_display = ["id", "at", "actor", "op", "person_id", "fact_id", "related_fact_id", "undone_by", "undo_of", "user"]
    list_filter = ["op", "actor"]
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
