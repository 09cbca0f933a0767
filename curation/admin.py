"""Django admin for the operation journal as curation sees it: read-only (undo is an operation of its own)."""
from __future__ import annotations

from django.contrib import admin

from curation.models import FactOperation
from memory.admin import FactOperationAdmin

admin.site.register(FactOperation, FactOperationAdmin)
