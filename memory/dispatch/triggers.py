"""When a stream's background work is due: the summarisation and extraction triggers.

* summarisation is due at ``SUMMARIZE_TRIGGER_MESSAGES`` messages not yet in an episode;
* extraction is due at ``FACT_EXTRACT_TRIGGER_MESSAGES`` messages after the stream's
  extraction cursor (``meta[EXTRACT_CURSOR_KEY]``, ``memory.models``: ``{stream id: last message id given
  to the extractor}``).

Reads only. :mod:`memory.dispatch.enqueue` asks before sending a stream's check, the pipeline
before (and after) each batch, the beat sweep for every stream.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count

from memory.meta import meta_text
from memory.models import EXTRACT_CURSOR_KEY, Message, QueueFailure, Stream

__all__ = ["EXTRACT", "SUMMARIZE", "due_queues", "extract_due", "read_cursor", "streams_due", "summarize_due"]

SUMMARIZE = QueueFailure.Queue.SUMMARIZE
EXTRACT = QueueFailure.Queue.EXTRACT


def _cursors(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _cursor(cursors: dict[str, Any], stream_id: int) -> int:
    value = cursors.get(str(stream_id))
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


#: The last cursor map parsed by this process and the stored text it came from. Every stored message
#: asks whether its stream's extraction is due, and the map holds every stream's cursor (32 KB at
#: 2,000 streams: 0.3 ms to parse, a tenth of a message's cost): it is parsed again only when the
#: text changed, i.e. once per extraction batch anywhere, not once per message.
_parsed: tuple[str | None, dict[str, Any]] = (None, {})


def _cursors_stored(raw: str | None) -> dict[str, Any]:
    """The cursor map of meta's stored text (``{}`` for none or text that is not JSON). Shared: read only."""
    global _parsed
    known, cursors = _parsed
    if raw is not None and raw == known:
        return cursors
    try:
        cursors = _cursors(json.loads(raw)) if raw is not None else {}
    except ValueError:  # as meta_get reads a value that is not JSON
        cursors = {}
    _parsed = (raw, cursors)
    return cursors


def cursor_map() -> dict[str, Any]:
    """Every stream's extraction cursor (``{"<stream id>": message id}``), as stored (a copy to change)."""
    return dict(_cursors_stored(meta_text(EXTRACT_CURSOR_KEY)))


def read_cursor(stream_id: int) -> int:
    """Id of the last message already given to the extractor (0 = none)."""
    return _cursor(_cursors_stored(meta_text(EXTRACT_CURSOR_KEY)), stream_id)


#: What decides each trigger, as subqueries: the stream's messages in no episode, counted up to the
#: trigger (a count that stops there); the id of its trigger-th newest message (extraction is due when
#: it lies after the cursor: then at least the trigger's number of messages do) and the cursors.
_READS = {
    SUMMARIZE: ("(SELECT count(*) FROM (SELECT 1 FROM messages WHERE stream_id = %s AND episode_id IS NULL LIMIT %s)"
                " AS t)"),
    EXTRACT: ("(SELECT id FROM messages WHERE stream_id = %s ORDER BY id DESC LIMIT 1 OFFSET %s),"
              " (SELECT value FROM meta WHERE key = %s)"),
}


def due_queues(stream_id: int, queues: Sequence[str] = (SUMMARIZE, EXTRACT)) -> list[str]:
    """Those of ``queues`` whose work is due for the stream, in their order: one statement reads for all."""
    triggers = {SUMMARIZE: settings.SUMMARIZE_TRIGGER_MESSAGES, EXTRACT: settings.FACT_EXTRACT_TRIGGER_MESSAGES}
    read = [q for q in queues if triggers[q] > 0]  # a trigger of 0 is always due
    due = {q for q in queues if triggers[q] <= 0}
    if read:
        params: list[Any] = []
        for queue in read:
            params += [stream_id, triggers[queue]] if queue == SUMMARIZE else [
                stream_id, triggers[queue] - 1, EXTRACT_CURSOR_KEY]
        with connection.cursor() as cur:
            cur.execute("SELECT " + ", ".join(_READS[q] for q in read), params)
            row = list(cur.fetchone())
        for queue in read:
            if queue == SUMMARIZE:
                if row.pop(0) >= triggers[queue]:
                    due.add(queue)
                continue
            nth_newest, value = row.pop(0), row.pop(0)
            if nth_newest is not None and nth_newest > _cursor(_cursors_stored(value), stream_id):
                due.add(queue)
    return [q for q in queues if q in due]


def summarize_due(stream_id: int) -> bool:
    """``SUMMARIZE_TRIGGER_MESSAGES`` messages of the stream are in no episode yet."""
    return bool(due_queues(stream_id, (SUMMARIZE,)))


def extract_due(stream_id: int) -> bool:
    """``FACT_EXTRACT_TRIGGER_MESSAGES`` messages of the stream come after its extraction cursor."""
    return bool(due_queues(stream_id, (EXTRACT,)))


def due(queue: str, stream_id: int) -> bool:
    return bool(due_queues(stream_id, (queue,)))


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
