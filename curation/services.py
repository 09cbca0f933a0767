"""Manual curation of facts, with one journal row per operation and undo.

Every operation writes its ``fact_operations`` row, with ``prev`` = the values
it overwrote, in the same transaction as the change. Undo writes ``prev``
back exactly (bit-identical decay fields) and is itself journalled.
Preconditions fail with typed errors the API maps to 404/409/422 (the console: 404/409/400).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from memory import services
from memory.engine import decay
from memory.engine.similarity import exact_key, is_same_fact
from memory.models import Fact, FactOperation, FactState

ACTOR_MANUAL = "manual"
DECAY_FIELDS = ("strength", "half_life_hours", "updated_at", "due_at", "active")


class FactNotFoundError(LookupError):
    """No such fact or operation (HTTP 404)."""


class FactStateError(Exception):
    """The row is not in a state this operation accepts (HTTP 409)."""


class CurationInputError(ValueError):
    """Invalid input (HTTP 422 over the API; the console answers 400 with its form)."""


class NotInConflictGroupError(FactStateError):
    """The fact is not a member of a slot-conflict group with someone to adjudicate away (HTTP 409)."""

    def __init__(self, fact_id: int) -> None:
        super().__init__(_("事实 #%(id)s 不在待裁决的冲突组里") % {"id": fact_id})


def _fact(fact_id: int) -> Fact:
    fact = Fact.objects.select_for_update().filter(pk=fact_id).first()
    if fact is None:
        raise FactNotFoundError(_("事实 #%(id)s 不存在") % {"id": fact_id})
    return fact


def _log(*, op: str, fact: Fact, prev: dict[str, Any], at: int, user: str, related: int | None = None,
         undo_of: int | None = None, actor: str = ACTOR_MANUAL) -> FactOperation:
    return services.journal_operation(
        op=op, actor=actor, person_id=fact.person_id, fact_id=fact.pk, related_fact_id=related, prev=prev,
        at=at, user=user, undo_of_id=undo_of,
    )


def _decay_snapshot(fact: Fact) -> dict[str, Any]:
    return {
        "strength": fact.strength, "half_life_hours": fact.half_life_hours, "updated_at": fact.updated_at,
        "due_at": fact.due_at, "active": 1 if fact.active else 0,
    }


def _event(kind: str, payload: dict[str, Any], at: int) -> None:
    services.emit_event(kind, payload, at=at, stage="curation")


def _journal(*, op: str, event: str, fact: Fact, prev: dict[str, Any], at: int, user: str) -> FactOperation:
    """The operation's journal row and its ledger event (fact, person and operation ids)."""
    operation = _log(op=op, fact=fact, prev=prev, at=at, user=user)
    _event(event, {"factId": fact.pk, "personId": fact.person_id, "operationId": operation.pk}, at)
    return operation


def _set_validity(fact_id: int, *, valid: bool, user: str, at: int | None) -> FactOperation:
    """Invalidate (self-pointing sentinel) or restore (no pointer) a fact; ``prev`` keeps the old pointer."""
    at = services.now_ms() if at is None else at
    with transaction.atomic():
        fact = _fact(fact_id)
        if fact.valid == valid:
            message = _("事实 #%(id)s 仍然有效，无需恢复") if valid else _("事实 #%(id)s 已经失效")
            raise FactStateError(message % {"id": fact_id})
        prev = {"superseded_by": fact.superseded_by_id}
        Fact.objects.filter(pk=fact.pk).update(superseded_by=None if valid else fact.pk)
        if valid:
            return _journal(op="restore", event="memory_fact_restored", fact=fact, prev=prev, at=at, user=user)
        return _journal(op="invalidate", event="memory_fact_invalidated", fact=fact, prev=prev, at=at, user=user)


def invalidate_fact(*, fact_id: int, user: str = "", at: int | None = None) -> FactOperation:
    """Mark a valid fact invalid with the self-pointing sentinel (frozen facts allowed)."""
    return _set_validity(fact_id, valid=False, user=user, at=at)


def restore_fact(*, fact_id: int, user: str = "", at: int | None = None) -> FactOperation:
    """Make an invalid fact (sentinel or supersede chain) valid again."""
    return _set_validity(fact_id, valid=True, user=user, at=at)


def pin_fact(*, fact_id: int, user: str = "", at: int | None = None) -> FactOperation:
    """Pin = strength 1 with a 876 000 h half-life: decay no longer visible on a human scale."""
    at = services.now_ms() if at is None else at
    with transaction.atomic():
        fact = _fact(fact_id)
        if not fact.valid:
            raise FactStateError(_("事实 #%(id)s 已失效，不能永久保留") % {"id": fact_id})
        if fact.pinned:
            raise FactStateError(_("事实 #%(id)s 已经是永久保留") % {"id": fact_id})
        if not fact.active:
            raise FactStateError(_("事实 #%(id)s 已冻结，请先让它被想起或恢复后再永久保留") % {"id": fact_id})
        prev = _decay_snapshot(fact)
        Fact.objects.filter(pk=fact.pk).update(
            strength=1.0, half_life_hours=decay.PIN_HALF_LIFE_HOURS, updated_at=at,
            due_at=decay.freeze_due_at(1.0, at, decay.PIN_HALF_LIFE_HOURS), active=True,
        )
        op = _journal(op="pin", event="memory_fact_pinned", fact=fact, prev=prev, at=at, user=user)
    return op


def unpin_fact(*, fact_id: int, user: str = "", at: int | None = None) -> FactOperation:
    """Back to the half-life of the fact's kind, from now, keeping its strength."""
    at = services.now_ms() if at is None else at
    with transaction.atomic():
        fact = _fact(fact_id)
        if not fact.pinned:
            raise FactStateError(_("事实 #%(id)s 不是永久保留") % {"id": fact_id})
        prev = _decay_snapshot(fact)
        half_life = decay.half_life_for(fact.kind)
        Fact.objects.filter(pk=fact.pk).update(
            half_life_hours=half_life, updated_at=at, due_at=decay.freeze_due_at(fact.strength, at, half_life),
            active=True,
        )
        op = _journal(op="unpin", event="memory_fact_unpinned", fact=fact, prev=prev, at=at, user=user)
    return op


def replace_fact(*, fact_id: int, content: str, user: str = "", at: int | None = None) -> services.FactWrite:
    """改成: supersede a valid fact with new text (same person, kind, slot and origin)."""
    at = services.now_ms() if at is None else at
    text = (content or "").strip()
    if not text:
        raise CurationInputError(_("新的事实内容不能为空"))
    if len(text) > 2000:
        raise CurationInputError(_("新的事实内容不能超过 2000 个字符"))
    with transaction.atomic():
        fact = _fact(fact_id)
        if not fact.valid:
            raise FactStateError(_("事实 #%(id)s 已失效，不能改写") % {"id": fact_id})
        if is_same_fact(text, fact.content):
            raise CurationInputError(_("新内容与原事实意思相同，无需改写"))
        key = exact_key(text)
        if Fact.objects.filter(person_id=fact.person_id, content_key=key, superseded_by__isnull=False).exists():
            raise FactStateError(_("同样内容的事实已被标失效，请先恢复那条事实"))
        write = services.add_fact(
            person_id=fact.person_id, content=text, kind=fact.kind, slot=fact.slot, supersedes=fact.pk,
            origin_kind=fact.origin_kind, actor=ACTOR_MANUAL, source="manual", user=user, at=at,
        )
        if not write.fact_id or not write.superseded:
            raise FactStateError(_("事实 #%(id)s 无法被取代") % {"id": fact_id})
        _event(
            "memory_fact_replaced",
            {"factId": fact.pk, "newFactId": write.fact_id, "personId": fact.person_id, "operationId": write.operation_id},
            at,
        )
    return write


def adjudicate(*, keep_fact_id: int, drop_fact_id: int, user: str = "", at: int | None = None) -> FactOperation:
    """Resolve a slot conflict: keep one member, invalidate another (one drop per call)."""
    at = services.now_ms() if at is None else at
    if keep_fact_id == drop_fact_id:
        raise CurationInputError(_("保留的和标失效的不能是同一条事实"))
    with transaction.atomic():
        rows = Fact.objects.select_for_update().in_bulk([keep_fact_id, drop_fact_id])
        missing = [i for i in (keep_fact_id, drop_fact_id) if i not in rows]
        if missing:
            raise FactNotFoundError(_("事实不存在：%(ids)s") % {"ids": _("、").join(f"#{i}" for i in missing)})
        keep, drop = rows[keep_fact_id], rows[drop_fact_id]
        if keep.person_id != drop.person_id or not keep.slot or keep.slot != drop.slot:
            raise CurationInputError(_("两条事实必须属于同一人物的同一个槽位"))
        for f in (keep, drop):
            if f.state != FactState.ACTIVE:
                raise FactStateError(_("事实 #%(id)s 不是活跃有效的冲突成员") % {"id": f.pk})
        Fact.objects.filter(pk=drop.pk).update(superseded_by=drop.pk)
        op = _log(op="adjudicate", fact=drop, prev={"superseded_by": None}, at=at, user=user, related=keep.pk)
        _event(
            "memory_conflict_resolved",
            {"keepFactId": keep.pk, "dropFactId": drop.pk, "personId": drop.person_id, "operationId": op.pk},
            at,
        )
    return op


def keep_only(
    *, keep_fact_id: int, expected_drop_ids: Iterable[int] | None = None, user: str = "", at: int | None = None
) -> list[FactOperation]:
    """Keep one member of its slot-conflict group and adjudicate every other member away: all or nothing.

    One transaction: the group (the person's active valid facts in the same non-empty slot)
    is read under lock and every other member gets its own ``adjudicate`` journal row, each
    undoable on its own. ``expected_drop_ids`` are the members the operator confirmed: if
    the group changed since (a member added, resolved or frozen), nothing is written. Any
    refusal rolls back every drop already made.
    """
    at = services.now_ms() if at is None else at
    with transaction.atomic():
        keep = _fact(keep_fact_id)
        others: list[int] = []
        if keep.slot and keep.state == FactState.ACTIVE:
            members = Fact.objects.select_for_update().in_state(FactState.ACTIVE).filter(
                person_id=keep.person_id, slot=keep.slot
            )
            others = list(members.exclude(pk=keep.pk).order_by("id").values_list("id", flat=True))
        if not others:
            raise NotInConflictGroupError(keep_fact_id)
        if expected_drop_ids is not None and set(expected_drop_ids) != set(others):
            raise FactStateError(_("冲突组在确认之后有了变化，请核对后再裁决"))
        return [adjudicate(keep_fact_id=keep.pk, drop_fact_id=drop, user=user, at=at) for drop in others]


def keep_all(
    *, fact_id: int, expected_member_ids: Iterable[int] | None = None, user: str = "", at: int | None = None
) -> list[FactOperation]:
    """"Both are true": the members of a fact's slot-conflict group stop conflicting, all of them stay valid.

    The slot names a value a person has once (居住地, 职业); when the person has several, the members
    leave the slot (slot cleared), so they are no longer a group and the prompt no longer sets them
    side by side as a contradiction. One ``adjudicate`` journal row per member (``prev``: its slot),
    each undoable on its own; all or nothing, and refused when the group differs from
    ``expected_member_ids`` (the members the operator saw).
    """
    at = services.now_ms() if at is None else at
    with transaction.atomic():
        fact = _fact(fact_id)
        members: list[Fact] = []
        if fact.slot and fact.state == FactState.ACTIVE:
            members = list(Fact.objects.select_for_update().in_state(FactState.ACTIVE).filter(
                person_id=fact.person_id, slot=fact.slot).order_by("id"))
        if len(members) < 2:
            raise NotInConflictGroupError(fact_id)
        if expected_member_ids is not None and set(expected_member_ids) != {m.pk for m in members}:
            raise FactStateError(_("冲突组在确认之后有了变化，请核对后再裁决"))
        Fact.objects.filter(pk__in=[m.pk for m in members]).update(slot="")
        ops = [_log(op="adjudicate", fact=m, prev={"slot": m.slot, "superseded_by": None}, at=at, user=user,
                    related=fact.pk) for m in members]
        _event("memory_conflict_kept_all", {"factIds": [m.pk for m in members], "slot": fact.slot,
                                            "personId": fact.person_id, "operationIds": [op.pk for op in ops]}, at)
    return ops


def undo_operation(*, operation_id: int, user: str = "", at: int | None = None) -> FactOperation:
    """Write an operation's ``prev`` back exactly and journal the undo.

    An undo cannot be undone and an operation cannot be undone twice. Undoing a
    supersede/replace that created a new row self-invalidates that row (rows are
    never deleted); a reinforced existing row is left as it is.
    """
    at = services.now_ms() if at is None else at
    with transaction.atomic():
        op = FactOperation.objects.select_for_update().filter(pk=operation_id).first()
        if op is None:
            raise FactNotFoundError(_("操作 #%(id)s 不存在") % {"id": operation_id})
        if op.op == FactOperation.Op.UNDO:
            raise FactStateError(_("撤销条目本身不能再撤销"))
        if op.undone_by_id is not None:
            raise FactStateError(_("操作 #%(id)s 已经撤销过了") % {"id": operation_id})
        fact = _fact(op.fact_id)
        prev = op.prev or {}
        if op.op in ("invalidate", "restore", "adjudicate"):
            undo_prev: dict[str, Any] = {"superseded_by": fact.superseded_by_id}
            restored: dict[str, Any] = {"superseded_by": prev.get("superseded_by")}
            if "slot" in prev:  # keep_all took the fact out of its slot: it goes back
                undo_prev["slot"], restored["slot"] = fact.slot, prev["slot"]
            Fact.objects.filter(pk=fact.pk).update(**restored)
        elif op.op in ("pin", "unpin"):
            undo_prev = _decay_snapshot(fact)
            Fact.objects.filter(pk=fact.pk).update(**{k: prev[k] for k in DECAY_FIELDS})
        elif op.op in ("supersede", "replace"):
            undo_prev = {"superseded_by": fact.superseded_by_id}
            Fact.objects.filter(pk=fact.pk).update(superseded_by=prev.get("superseded_by"))
            if prev.get("new_row_created") and op.related_fact_id:
                if Fact.objects.valid().filter(pk=op.related_fact_id).update(
                    superseded_by=op.related_fact_id
                ):
                    undo_prev["related_fact_invalidated"] = op.related_fact_id
        else:
            raise FactStateError(_("未知的操作类型 %(id)s") % {"id": op.op})
        undo = _log(
            op="undo", fact=fact, prev=undo_prev, at=at, user=user, related=op.fact_id, undo_of=op.pk,
        )
        FactOperation.objects.filter(pk=op.pk).update(undone_by=undo)
        _event(
            "memory_operation_undone",
            {"operationId": undo.pk, "undoOf": op.pk, "factId": fact.pk, "personId": fact.person_id},
            at,
        )
    return undo
