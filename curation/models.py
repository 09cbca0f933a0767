"""The curation app's view of the fact-operations journal.

The journal itself (table ``fact_operations``) is :class:`memory.models.FactOperation`:
memory writes it too (``add_fact`` journals a supersede). This proxy keeps the
curation permissions where they always were (``curation.curate_fact``,
``curation.undo_operation``: the same content type, so roles granted before stay
granted) and the journal's page in the Django admin.
"""
from __future__ import annotations

from memory.models import FactOperation as JournalRow


class FactOperation(JournalRow):
    class Meta:
        proxy = True
        permissions = [
            ("curate_fact", "Can pin, invalidate, restore and replace facts"),
            ("undo_operation", "Can undo fact operations"),
        ]
