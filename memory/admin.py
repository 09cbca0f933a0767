"""Django admin for the memory tables: read-mostly.

Memory rows are written only through ``memory.services`` (FTS rows, vectors and
decay fields must change together), so the admin can list and inspect them but
not add, edit or delete them. Binary vector columns are never rendered.
"""
from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memory import models


class ReadOnlyAdmin(admin.ModelAdmin):
    """List and inspect; writes go through the services."""

    list_per_page = 50
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(models.Person)
class PersonAdmin(ReadOnlyAdmin):
    list_display = ["id", "display_name", "kind", "first_seen_at"]
    search_fields = ["display_name"]


@admin.register(models.Identity)
class IdentityAdmin(ReadOnlyAdmin):
    list_display = ["id", "person", "platform", "external_id", "display_name"]
    list_select_related = ["person"]
    search_fields = ["external_id", "display_name"]


@admin.register(models.Stream)
class StreamAdmin(ReadOnlyAdmin):
    list_display = ["id", "display_name", "platform", "kind", "external_id"]
    list_filter = ["kind"]


@admin.register(models.Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "stream", "role", "sender_person", "content", "episode_id", "created_at"]
    list_select_related = ["stream", "sender_person"]
    list_filter = ["role"]
    search_fields = ["content"]


@admin.register(models.Episode)
class EpisodeAdmin(ReadOnlyAdmin):
    list_display = ["id", "stream", "kind", "summary", "started_at", "ended_at", "source"]
    list_select_related = ["stream"]
    list_filter = ["kind"]


@admin.register(models.EpisodeCue)
class EpisodeCueAdmin(ReadOnlyAdmin):
    list_display = ["id", "episode_id", "cue"]


@admin.register(models.Fact)
class FactAdmin(ReadOnlyAdmin):
    list_display = ["id", "person", "kind", "slot", "content", "origin_kind", "strength", "active", "superseded_by_id"]
    list_select_related = ["person"]
    list_filter = ["kind", "origin_kind", "active"]
    search_fields = ["content"]
    exclude = ["embedding", "embedding_q8"]


@admin.register(models.ImportBatch)
class ImportBatchAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "origin_name", "submitted", "added", "status", "created_at"]


@admin.register(models.Knowledge)
class KnowledgeAdmin(ReadOnlyAdmin):
    list_display = ["id", "content", "source", "import_batch_id", "hit_count", "created_at"]
    search_fields = ["content"]
    exclude = ["embedding", "embedding_q8"]


@admin.register(models.KnowledgeNode)
class KnowledgeNodeAdmin(ReadOnlyAdmin):
    list_display = ["id", "concept", "created_at"]
    search_fields = ["concept"]


@admin.register(models.KnowledgeEdge)
class KnowledgeEdgeAdmin(ReadOnlyAdmin):
    list_display = ["id", "source", "target", "strength", "updated_at"]
    list_select_related = ["source", "target"]


@admin.register(models.MemoryNode)
class MemoryNodeAdmin(ReadOnlyAdmin):
    list_display = ["id", "ref_kind", "ref_id"]
    list_filter = ["ref_kind"]


@admin.register(models.MemoryEdge)
class MemoryEdgeAdmin(ReadOnlyAdmin):
    list_display = ["id", "source", "target", "strength", "updated_at", "active"]
    list_select_related = ["source", "target"]
    list_filter = ["active"]


@admin.register(models.Meta)
class MetaAdmin(ReadOnlyAdmin):
    list_display = ["key", "value"]


@admin.register(models.Change)
class ChangeAdmin(ReadOnlyAdmin):
    list_display = ("id", "source", "row_id", "xid")
    list_filter = ("source",)


@admin.register(models.PipelineEvent)
class PipelineEventAdmin(ReadOnlyAdmin):
    list_display = ["seq", "at", "kind", "stream_id", "turn_id", "stage"]
    list_filter = ["kind"]


@admin.register(models.VectorSpace)
class VectorSpaceAdmin(ReadOnlyAdmin):
    list_display = ["consumer", "model", "api_format", "dim", "recipe", "updated_at"]


@admin.register(models.Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ["id", "stream", "speaker", "at", "stream_kind", "confirmed_at"]
    list_select_related = ["stream", "speaker"]


@admin.register(models.QueueFailure)
class QueueFailureAdmin(ReadOnlyAdmin):
    list_display = ["id", "stream", "queue", "head_message_id", "failures", "updated_at"]
    list_select_related = ["stream"]


@admin.register(models.Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "status", "progress", "total", "created_by", "created_at", "finished_at"]
    list_filter = ["kind", "status"]


@admin.register(models.ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are issued by a management command or the console token page (only the hash is
    stored); revoke them there (the row stays); deleting one here is refused within 1 s too."""

    list_display = ["id", "name", "scopes", "created_at", "last_used_at", "revoked_at"]
    exclude = ["token_hash"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("memory.delete_apitoken")


@admin.register(models.ForgetRecord)
class ForgetRecordAdmin(ReadOnlyAdmin):
    """The forgetting journal: who, when, which target, counts (never text)."""

    list_display = ["id", "at", "user", "target", "target_id"]
    list_filter = ["target"]


@admin.register(models.FactOperation)
class FactOperationAdmin(ReadOnlyAdmin):
    """The fact-operations journal (undo is an operation of its own, in the console and the API)."""

    list_display = ["id", "at", "actor", "op", "person_id", "fact_id", "related_fact_id", "undone_by", "undo_of", "user"]
    list_filter = ["op", "actor"]
    show_full_result_count = True
