"""Reads of the fact operation journal: the one filter behind the console log, a fact's
history and the API's ``/operations``."""
from __future__ import annotations

from django.db.models import Q, QuerySet

from memory.models import FactOperation

#: Vectors of the joined facts are never shown with an operation.
_VECTORS = ("fact__embedding", "fact__embedding_q8", "related_fact__embedding", "related_fact__embedding_q8")


def operations(
    *, person_id: int | None = None, fact_id: int | None = None, touching: int | None = None,
    actor: str | None = None, op: str | None = None,
) -> QuerySet[FactOperation]:
    """Operations newest first, with the facts and person they name (vectors deferred).

    ``fact_id``: operations that changed that fact; ``touching``: also those that name it as
    the related fact (the kept member of an adjudication, the new row of a replace). Empty
    filters are ignored; slice the result for a page or a limit.
    """
    rows = FactOperation.objects.select_related("fact", "related_fact", "person").defer(*_VECTORS)
    if person_id is not None:
        rows = rows.filter(person_id=person_id)
    if fact_id is not None:
        rows = rows.filter(fact_id=fact_id)
    if touching is not None:
        rows = rows.filter(Q(fact_id=touching) | Q(related_fact_id=touching))
    if actor:
        rows = rows.filter(actor=actor)
    if op:
        rows = rows.filter(op=op)
    return rows.order_by("-at", "-id")
