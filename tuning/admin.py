"""Admin of stored retrieval profiles (read-mostly: apply and delete go through the console)."""
from __future__ import annotations

from django.contrib import admin

from tuning.models import RetrievalProfile


@admin.register(RetrievalProfile)
class RetrievalProfileAdmin(admin.ModelAdmin):
    list_display = ("name", "params", "created_at", "last_applied_at")
    search_fields = ("name",)
    readonly_fields = ("name", "params", "created_at", "last_applied_at")

    def has_add_permission(self, request) -> bool:
        # Profiles are validated on save by tuning.services; the admin would bypass it.
        return False
