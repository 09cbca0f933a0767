"""Django admin for the operation journal: read-only (undo is an operation of its own)."""
from __future__ import annotations

from django.contrib import admin

from curation.models import FactOperation
from memory.admin import ReadOnlyAdmin


@admin.register(FactOperation)
class FactOperationAdmin(ReadOnlyAdmin):
    list_display = ["id", "at", "actor", "op", "person_id", "fact_id", "related_fact_id", "undone_by", "undo_of", "user"]
    list_filter = ["op", "actor"]
    show_full_result_count = True
