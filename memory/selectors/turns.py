"""Recorded turns: the list the console browses and one turn's neighbourhood (read-only)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet

from memory import backends
from memory.models import Message, Turn

#: The columns a list of turns shows (the recorded pool, large, is left out).
LIST_COLUMNS = ("id", "stream_id", "speaker_id", "at", "text", "stream_kind", "prompt_fact_ids", "held_back_fact_ids",
                "confirmed_at", "present_person_ids")


def turn_list(
    *, stream_id: int | None = None, person_id: int | None = None, since: int | None = None, until: int | None = None,
    fact_id: int | None = None,
) -> QuerySet[Turn]:
    """Turns newest first: of a stream; with a person present; from ``since`` (ms, inclusive) to
    ``until`` (exclusive); whose prompt held a fact (``fact_id``: the turns that used it)."""
    rows = Turn.objects.select_related("stream", "speaker").only(*LIST_COLUMNS, "stream__display_name",
                                                                  "stream__kind", "speaker__display_name")
    if stream_id:
        rows = rows.filter(stream_id=stream_id)
    if since is not None:
        rows = rows.filter(at__gte=since)
    if until is not None:
        rows = rows.filter(at__lt=until)
    table = f'"{Turn._meta.db_table}"'
    if person_id:
        sql, params = backends.json_list_has(f'{table}."present_person_ids"', person_id)
        rows = rows.extra(where=[sql], params=params)
    if fact_id:
        sql, params = backends.json_list_has(f'{table}."prompt_fact_ids"', fact_id)
        rows = rows.extra(where=[sql], params=params)
    return rows.order_by("-id")


def conversation_before(turn: Any, *, limit: int = 20) -> list[Message]:
    """The stream's messages the turn could see, oldest first: up to its watermark (the message it
    answered), else those that arrived by its time; at most ``limit``, the newest ones."""
    rows = Message.objects.filter(stream_id=turn.stream_id).only(
        "id", "role", "content", "sender_person_id", "created_at", "episode_id"
    )
    if turn.watermark_message_id:
        rows = rows.filter(id__lte=turn.watermark_message_id)
    else:
        rows = rows.filter(created_at__lte=turn.at)
    found = list(rows.order_by("-id")[:limit])
    found.reverse()
    return found


def turn_neighbours(turn: Any) -> tuple[int | None, int | None]:
    """The previous and next turn of the same stream (ids), for paging through a conversation."""
    before = Turn.objects.filter(stream_id=turn.stream_id, id__lt=turn.pk).order_by("-id").values_list("id", flat=True)
    after = Turn.objects.filter(stream_id=turn.stream_id, id__gt=turn.pk).order_by("id").values_list("id", flat=True)
    return next(iter(before[:1]), None), next(iter(after[:1]), None)


def turns_by_id(ids: Sequence[int]) -> dict[int, Turn]:
    return Turn.objects.in_bulk(list(ids))
