"""Everything stored about one person, as plain data (the export API and the console page).

Identities, the messages they sent (every stream), their facts with the decay state at
``now``, the episodes their messages belong to, and the journal of operations on their
facts. Read-only; the same dict is served as JSON and rendered (escaped) as HTML.
"""
from __future__ import annotations

from typing import Any

from django.db.models import Count

from memory.api.schemas import fact_row
from memory.models import Episode, Fact, FactOperation, Identity, Message, Person, Stream

FORMAT = "memory-console.person-export.v1"


def person_export(*, person_id: int, now: int) -> dict[str, Any]:
    """The export document of a person (``Person.DoesNotExist`` when unknown)."""
    person = Person.objects.get(pk=person_id)
    messages = list(
        Message.objects.filter(sender_person_id=person_id)
        .select_related("stream")
        .order_by("id")
        .values("id", "stream_id", "stream__platform", "stream__kind", "stream__external_id", "role", "content",
                "created_at", "episode_id", "external_message_id")
    )
    episode_ids = sorted({m["episode_id"] for m in messages if m["episode_id"]})
    episodes = list(
        Episode.objects.filter(pk__in=episode_ids).order_by("id")
        .values("id", "stream_id", "kind", "summary", "started_at", "ended_at")
    )
    facts = Fact.objects.filter(person_id=person_id).defer("embedding", "embedding_q8", "tokens").order_by("id")
    operations = list(
        FactOperation.objects.filter(person_id=person_id).order_by("id")
        .values("id", "at", "op", "actor", "fact_id", "related_fact_id", "prev", "user", "undo_of_id", "undone_by_id")
    )
    return {
        "format": FORMAT,
        "exported_at": now,
        "person": {"id": person.pk, "kind": person.kind, "display_name": person.display_name,
                   "first_seen_at": person.first_seen_at},
        "identities": list(
            Identity.objects.filter(person_id=person_id).order_by("id").values("platform", "external_id", "display_name")
        ),
        "messages": [
            {"id": m["id"], "stream": {"id": m["stream_id"], "platform": m["stream__platform"], "kind": m["stream__kind"],
                                       "external_id": m["stream__external_id"]},
             "role": m["role"], "content": m["content"], "created_at": m["created_at"], "episode_id": m["episode_id"],
             "external_message_id": m["external_message_id"]}
            for m in messages
        ],
        "facts": [fact_row(f, now) | {"source": f.source, "source_message_id": f.source_message_id} for f in facts],
        "episodes": episodes,
        "operations": operations,
    }


def person_counts(person_ids: list[int]) -> dict[int, dict[str, int]]:
    """Per person: messages sent, facts, episodes and streams their messages are in (one query each)."""
    out = {pid: {"messages": 0, "facts": 0, "episodes": 0, "streams": 0} for pid in person_ids}
    sent = (
        Message.objects.filter(sender_person_id__in=person_ids).values("sender_person_id")
        .annotate(n=Count("id"), e=Count("episode_id", distinct=True), s=Count("stream_id", distinct=True))
    )
    for row in sent:
        out[row["sender_person_id"]].update(messages=row["n"], episodes=row["e"], streams=row["s"])
    for row in Fact.objects.filter(person_id__in=person_ids).values("person_id").annotate(n=Count("id")):
        out[row["person_id"]]["facts"] = row["n"]
    return out


def person_streams(person_ids: list[int], limit: int = 5) -> dict[int, list[Stream]]:
    """Up to ``limit`` streams each person has written in (two queries)."""
    pairs = Message.objects.filter(sender_person_id__in=person_ids).values_list("sender_person_id", "stream_id").distinct()
    by_person: dict[int, list[int]] = {}
    for pid, sid in pairs:
        if len(by_person.setdefault(pid, [])) < limit:
            by_person[pid].append(sid)
    streams = Stream.objects.in_bulk({sid for sids in by_person.values() for sid in sids})
    return {pid: [streams[s] for s in sids if s in streams] for pid, sids in by_person.items()}
