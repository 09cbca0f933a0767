"""When a stream's background work is due: the summarisation and extraction triggers.

* summarisation is due at ``SUMMARIZE_TRIGGER_MESSAGES`` messages not yet in an episode;
* extraction is due at ``FACT_EXTRACT_TRIGGER_MESSAGES`` messages after the stream's
  extraction cursor (``meta[EXTRACT_CURSOR_KEY]``, ``memory.models``: ``{stream id: last message id given
  to the extractor}``).

Reads only. :mod:`memory.enqueue` asks before sending a stream's check, the pipeline
before (and after) each batch, the beat sweep for every stream.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count

from memory.meta import meta_get
from memory.models import EXTRACT_CURSOR_KEY, Message, QueueFailure, Stream

__all__ = ["EXTRACT", "SUMMARIZE", "extract_due", "read_cursor", "streams_due", "summarize_due"]

SUMMARIZE = QueueFailure.Queue.SUMMARIZE
EXTRACT = QueueFailure.Queue.EXTRACT


def cursor_map() -> dict[str, Any]:
    """Every stream's extraction cursor (``{"<stream id>": message id}``), as stored."""
    value = meta_get(EXTRACT_CURSOR_KEY, {})
    return value if isinstance(value, dict) else {}


def read_cursor(stream_id: int) -> int:
    """Id of the last message already given to the extractor (0 = none)."""
    value = cursor_map().get(str(stream_id))
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def summarize_due(stream_id: int) -> bool:
    pending = Message.objects.filter(stream_id=stream_id, episode__isnull=True).count()
    return pending >= settings.SUMMARIZE_TRIGGER_MESSAGES


def extract_due(stream_id: int) -> bool:
    count = Message.objects.filter(stream_id=stream_id, id__gt=read_cursor(stream_id)).count()
    return count >= settings.FACT_EXTRACT_TRIGGER_MESSAGES


def due(queue: str, stream_id: int) -> bool:
    return summarize_due(stream_id) if queue == SUMMARIZE else extract_due(stream_id)


def streams_due() -> list[tuple[str, int]]:
    """``(queue, stream_id)`` of every stream whose summarisation or extraction is due."""
    out: list[tuple[str, int]] = []
    trigger = settings.SUMMARIZE_TRIGGER_MESSAGES
    pending = Message.objects.filter(episode__isnull=True).values("stream_id").annotate(n=Count("id"))
    for row in sorted(pending, key=lambda r: r["stream_id"]):
        if row["n"] >= trigger:
            out.append((SUMMARIZE, row["stream_id"]))
    for stream_id in Stream.objects.order_by("id").values_list("id", flat=True):
        if extract_due(stream_id):
            out.append((EXTRACT, stream_id))
    return out
