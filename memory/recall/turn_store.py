"""A turn's writes behind one seam: record a prepared turn, confirm it.

The turn path decides *what* a turn writes (memory/recall/__init__.py); a :class:`TurnStore`
writes it. Two implementations keep one contract, and tests/memory/test_turn_store.py runs them
on the same inputs:

* :class:`OrmTurnStore` — the ORM's INSERTs and UPDATEs in one transaction. SQLite's store; it
  is correct on PostgreSQL too (the contract test compares the two there).
* :class:`PostgreSQLTurnStore` — the same writes as one statement, one round trip
  (:func:`memory.backends.postgresql.record_turn`, :func:`~memory.backends.postgresql.confirm_turn`):
  the bot waits for them, and on PostgreSQL every statement is a round trip.

The contract
============

``record(values, event, others, also)`` stores the turn and returns ``(its id, the result of
also)``: the ``turns`` row (``values``: its fields by attribute name, the model's defaults for
the rest); the trace event ``event`` (``at``, ``stream_id``, ``stage``, ``kind``, ``payload``)
with the new turn's id as its ``turn_id`` and as the payload's first key ``turnId``; and each of
``others`` (events of the same shape, without a turn; the order of one write's events in the
ledger is not part of the contract — PostgreSQL's one statement inserts them in an order of its
choosing). All of it or nothing, committed without
waiting for the disk flush (:func:`memory.backends.commit_without_flush`). ``also`` (a
:class:`~memory.search.read_ahead.Read`) is read with the write: on PostgreSQL in its round trip.

``confirm(turn_id, at, ranked, held_back_ids, event)`` claims the turn if it is not confirmed
yet: ``confirmed_at`` = ``at``, the prompt (``ranked``'s ids, in order) and ``held_back_ids``
recorded; each fact of ``ranked`` reinforced (:func:`memory.services.reinforcement`: its new
strength from the retention it was ranked with, due again accordingly, active, one more hit)
while it still belongs to the person it was recalled for; the ids actually reinforced recorded
as ``reinforced_fact_ids``; ``event`` written with the turn's id. Returns the reinforced ids in
prompt order, or ``None`` — nothing written — when the turn is missing or was confirmed already
(a second confirm waits for the first, then finds it confirmed). Committed like ``record``;
``also`` is read with the write as ``record``'s is, and ``confirm`` returns ``(the reinforced ids or
None, the result of also)``. With ``line`` (a :class:`LineVector`) the claim also stores the turn's vector on the turn's line —
the message ``line.message_id`` — when that message still has no vector and says exactly
``line.text``: the next turns of the conversation read it instead of embedding the line again.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from django.db import connection, transaction

from memory import backends, services
from memory.models import Turn
from memory.search import read_ahead

__all__ = ["LineVector", "OrmTurnStore", "PostgreSQLTurnStore", "TurnStore", "turn_store"]

_TURN_FIELDS = [f for f in Turn._meta.concrete_fields if not f.primary_key]


class LineVector(NamedTuple):
    """A confirmed turn's vector as its line's message vector (``confirm``'s ``line``)."""

    message_id: int
    text: str   # stored only while the message says exactly this
    raw: bytes  # float32, as services.store_message_vector writes it
    q8: bytes   # its SQ8 form


class TurnStore(Protocol):
    def record(self, values: Mapping[str, Any], event: Mapping[str, Any], others: Sequence[Mapping[str, Any]] = (),
               also: read_ahead.Read | None = None) -> tuple[int, Any]: ...

    def confirm(self, turn_id: int, *, at: int, ranked: Sequence[Any], held_back_ids: Sequence[int],
                event: Mapping[str, Any], line: LineVector | None = None,
                also: read_ahead.Read | None = None) -> tuple[list[int] | None, Any]: ...


def _unflushed() -> None:
    with connection.cursor() as cur:
        backends.commit_without_flush(cur)


class OrmTurnStore:
    """The writes through the ORM, in one transaction (SQLite's; module docstring)."""

    def record(self, values: Mapping[str, Any], event: Mapping[str, Any], others: Sequence[Mapping[str, Any]] = (),
               also: read_ahead.Read | None = None) -> tuple[int, Any]:
        with transaction.atomic():
            _unflushed()
            for other in others:
                services.emit_event(other["kind"], other["payload"], at=other["at"], stream_id=other["stream_id"],
                                    stage=other["stage"])
            turn = Turn.objects.create(**values)
            services.emit_event(event["kind"], {"turnId": turn.pk, **event["payload"]}, at=event["at"],
                                stream_id=event["stream_id"], turn_id=turn.pk, stage=event["stage"])
        return turn.pk, None if also is None else read_ahead.read(also)

    def confirm(self, turn_id: int, *, at: int, ranked: Sequence[Any], held_back_ids: Sequence[int],
                event: Mapping[str, Any], line: LineVector | None = None,
                also: read_ahead.Read | None = None) -> tuple[list[int] | None, Any]:
        reinforced = self._confirm(turn_id, at, ranked, held_back_ids, event, line)
        return reinforced, None if also is None else read_ahead.read(also)

    def _confirm(self, turn_id: int, at: int, ranked: Sequence[Any], held_back_ids: Sequence[int],
                 event: Mapping[str, Any], line: LineVector | None) -> list[int] | None:
        prompt_ids = [f.id for f in ranked]
        with transaction.atomic():
            _unflushed()
            # the turn first (a second confirm waits here, then finds it confirmed), recorded as reinforcing
            # every prompt fact; corrected below when one of them could not be (deleted or moved meanwhile)
            claimed = Turn.objects.filter(pk=turn_id, confirmed_at__isnull=True).update(
                confirmed_at=at, prompt_fact_ids=prompt_ids, reinforced_fact_ids=prompt_ids,
                held_back_fact_ids=list(held_back_ids),
            )
            if claimed != 1:
                return None
            reinforced = services.reinforce_recalled_facts(facts=ranked, at=at)
            if reinforced != prompt_ids:
                Turn.objects.filter(pk=turn_id).update(reinforced_fact_ids=reinforced)
            services.emit_event(event["kind"], event["payload"], at=at, stream_id=event["stream_id"], turn_id=turn_id,
                                stage=event["stage"])
            if line is not None:
                with connection.cursor() as cur:
                    cur.execute("UPDATE messages SET embedding = %s, embedding_q8 = %s"
                                " WHERE id = %s AND embedding IS NULL AND content = %s",
                                [line.raw, line.q8, line.message_id, line.text])
        return reinforced


class PostgreSQLTurnStore:
    """The writes as one statement each, one round trip (module docstring)."""

    def record(self, values: Mapping[str, Any], event: Mapping[str, Any], others: Sequence[Mapping[str, Any]] = (),
               also: read_ahead.Read | None = None) -> tuple[int, Any]:
        columns = {  # every column, as Turn.objects.create would write them (defaults included)
            field.column: field.get_db_prep_save(values[field.attname] if field.attname in values else field.get_default(),
                                                 connection)
            for field in _TURN_FIELDS
        }
        reads = [] if also is None else [(also.sql, also.params, also.binary)]
        turn_id, rows = backends.postgresql.record_turn(
            columns, {**event, "payload": {"turnId": None, **event["payload"]}}, others, reads=reads,
        )
        return turn_id, None if also is None else also.convert(rows[0])

    def confirm(self, turn_id: int, *, at: int, ranked: Sequence[Any], held_back_ids: Sequence[int],
                event: Mapping[str, Any], line: LineVector | None = None,
                also: read_ahead.Read | None = None) -> tuple[list[int] | None, Any]:
        reads = [] if also is None else [(also.sql, also.params, also.binary)]
        reinforced, rows = backends.postgresql.confirm_turn(
            turn_id, at=at, prompt_ids=[f.id for f in ranked], held_back_ids=list(held_back_ids),
            reinforce=services.reinforcement(ranked, at), event=event, line=line, reads=reads,
        )
        return reinforced, None if also is None else also.convert(rows[0])


def turn_store() -> TurnStore:
    """The store of the backend in use."""
    return PostgreSQLTurnStore() if backends.is_postgresql() else OrmTurnStore()
