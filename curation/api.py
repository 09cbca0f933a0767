"""Curation routes of the bot API (mounted under ``/api/v1``).

Pin, unpin, invalidate, restore and replace facts, resolve slot conflicts, read and undo
the operation journal. Token scope ``curation``; undo needs ``undo``. Errors of ``curation.services``
map to HTTP statuses through ``ERROR_STATUSES`` (registered by :mod:`config.api`):
``FactNotFoundError`` → 404, ``FactStateError`` → 409, ``CurationInputError`` → 422.
"""
from __future__ import annotations

from typing import Annotated, Any

from django.db import transaction
from django.http import Http404, HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import ValidationError
from pydantic import StringConstraints

from curation import selectors as journal
from curation import services
from memory import selectors
from memory import services as memory_services
from memory.api.auth import BearerTokenAuth, api_user
from memory.api.schemas import (
    EPOCH_MS_HELP,
    FACT_MAX_CHARS,
    HAS_WORD,
    MAX_EPOCH_MS,
    MAX_ID,
    EpochMs,
    ErrorOut,
    Id,
    In,
    fact_row,
)
from memory.engine.similarity import exact_key
from memory.models import Fact, Person

router = Router(tags=["curation"], auth=BearerTokenAuth(scope="curation"))

ERRORS: dict[int, Any] = {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 422: ErrorOut}
#: Exceptions of the curation services → HTTP status (mapped by :mod:`config.api`).
ERROR_STATUSES: dict[type[BaseException], int] = {
    services.FactNotFoundError: 404,
    services.FactStateError: 409,
    services.CurationInputError: 422,
}


class AtIn(In):
    at: EpochMs | None = None


class ReplaceIn(In):
    content: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=FACT_MAX_CHARS)] = Field(
        description="must contain at least one letter or digit", json_schema_extra={"pattern": HAS_WORD}
    )
    at: EpochMs | None = None


class ResolveIn(In):
    # JSON Schema cannot compare two properties: "keep ≠ drop" is stated in words (422 otherwise)
    keep_fact_id: Id = Field(description="the member to keep; must differ from drop_fact_id")
    drop_fact_id: Id = Field(description="the member to invalidate; must differ from keep_fact_id")
    at: EpochMs | None = None


class KeepAllIn(In):
    fact_id: Id = Field(description="any member of the slot-conflict group")
    member_ids: list[Id] | None = Field(
        None, max_length=200,
        description="the members you saw; refused (409) when the group has changed since (omit: whatever it holds)",
    )
    at: EpochMs | None = None


class KeepAllOut(Schema):
    ok: bool
    operation_ids: list[int] = Field(description="one journal row per member, each undoable on its own")
    fact_ids: list[int] = Field(description="the members, all still valid, out of the slot")


class OperationResult(Schema):
    ok: bool
    operation_id: int
    fact_id: int | None = None
    new_fact_id: int | None = None
    conflict_with: list[int] = Field(default_factory=list)
    undo_of: int | None = None


class ConflictMember(Schema):
    id: int
    kind: str
    content: str
    origin_kind: str
    retention: float
    strength: float
    half_life_hours: float
    updated_at: int


class ConflictGroup(Schema):
    person_id: int
    person_name: str
    slot: str
    members: list[ConflictMember]


class ConflictsOut(Schema):
    at: int
    groups: list[ConflictGroup]


class OperationOut(Schema):
    id: int
    at: int
    actor: str
    op: str
    person_id: int
    fact_id: int
    fact_content: str | None
    related_fact_id: int | None
    prev: dict[str, Any]
    undone_by: int | None
    undo_of: int | None
    user: str


class OperationsOut(Schema):
    operations: list[OperationOut]


def _at(value: int | None) -> int:
    return memory_services.now_ms() if value is None else int(value)


def _simple(op, fact_id: int, payload: AtIn | None, request: HttpRequest) -> dict[str, Any]:
    at = _at(payload.at if payload else None)
    with transaction.atomic():
        operation = op(fact_id=fact_id, user=api_user(request), at=at)
    return {"ok": True, "operation_id": operation.pk, "fact_id": fact_id}


@router.post("/facts/{fact_id}/pin", response={200: OperationResult, **ERRORS}, summary="Pin a fact")
def pin(request: HttpRequest, fact_id: Id, payload: AtIn | None = None):
    """Keep a valid, active fact for good (strength 1, half-life 876 000 h). A frozen fact → 409."""
    return _simple(services.pin_fact, fact_id, payload, request)


@router.post("/facts/{fact_id}/unpin", response={200: OperationResult, **ERRORS}, summary="Unpin a fact")
def unpin(request: HttpRequest, fact_id: Id, payload: AtIn | None = None):
    return _simple(services.unpin_fact, fact_id, payload, request)


@router.post("/facts/{fact_id}/invalidate", response={200: OperationResult, **ERRORS}, summary="Invalidate a fact")
def invalidate(request: HttpRequest, fact_id: Id, payload: AtIn | None = None):
    return _simple(services.invalidate_fact, fact_id, payload, request)


@router.post("/facts/{fact_id}/restore", response={200: OperationResult, **ERRORS}, summary="Restore a fact")
def restore(request: HttpRequest, fact_id: Id, payload: AtIn | None = None):
    return _simple(services.restore_fact, fact_id, payload, request)


@router.post("/facts/{fact_id}/replace", response={200: OperationResult, **ERRORS}, summary="Replace a fact's text")
def replace(request: HttpRequest, fact_id: Id, payload: ReplaceIn):
    """Supersede a valid fact by a new text (same kind, slot and origin); undoable."""
    if not exact_key(payload.content):
        raise ValidationError(
            [{"loc": ("body", "content"), "msg": "must contain at least one letter or digit", "type": "value_error"}]
        )
    with transaction.atomic():
        result = services.replace_fact(fact_id=fact_id, content=payload.content, user=api_user(request), at=_at(payload.at))
    return {
        "ok": True,
        "operation_id": result.operation_id,
        "fact_id": fact_id,
        "new_fact_id": result.fact_id,
        "conflict_with": list(result.conflict_with or []),
    }


def _member(m: Any, now: int) -> dict[str, Any]:
    if isinstance(m, Fact):
        row = fact_row(m, now)
    elif isinstance(m, dict):
        row = m
    else:
        row = {k: getattr(m, k, None) for k in ConflictMember.model_fields}
    return {k: row.get(k) for k in ConflictMember.model_fields}


@router.get("/conflicts", response={200: ConflictsOut, **ERRORS}, summary="Slot conflict groups")
def conflicts(
    request: HttpRequest,
    person_id: int | None = Query(None, ge=1, le=MAX_ID),
    at: int | None = Query(None, ge=0, le=MAX_EPOCH_MS, description=f"{EPOCH_MS_HELP} (default now)"),
):
    """Groups of valid, active facts of one person sharing a non-empty slot (shown whole)."""
    now = _at(at)
    if person_id is not None and not Person.objects.filter(pk=person_id).exists():
        raise Http404(f"person {person_id} does not exist")
    groups = selectors.conflict_groups(person_id=person_id, now=now)
    out = [
        {"person_id": g.person_id, "person_name": g.person_name or "", "slot": g.slot,
         "members": [_member(m, now) for m in g.members]}
        for g in groups
    ]
    return {"at": now, "groups": out}


@router.post("/conflicts/resolve", response={200: OperationResult, **ERRORS}, summary="Resolve a conflict")
def resolve_conflict(request: HttpRequest, payload: ResolveIn):
    """Keep one member of a slot conflict group and invalidate the other (one drop per call)."""
    with transaction.atomic():
        result = services.adjudicate(
            keep_fact_id=payload.keep_fact_id,
            drop_fact_id=payload.drop_fact_id,
            user=api_user(request),
            at=_at(payload.at),
        )
    return {"ok": True, "operation_id": result.pk, "fact_id": payload.drop_fact_id}


@router.post("/conflicts/keep-all", response={200: KeepAllOut, **ERRORS}, summary="Keep every member of a conflict")
def keep_all_conflict(request: HttpRequest, payload: KeepAllIn):
    """"Both are true": every member of the fact's slot-conflict group stays valid and leaves the slot, so the
    prompt no longer sets them side by side as a contradiction (a person with two homes, two jobs). 409 when
    the fact is not in a group, or the group is not ``member_ids``."""
    ops = services.keep_all(
        fact_id=payload.fact_id, expected_member_ids=payload.member_ids, user=api_user(request), at=_at(payload.at)
    )
    return {"ok": True, "operation_ids": [op.pk for op in ops], "fact_ids": [op.fact_id for op in ops]}


@router.get("/operations", response={200: OperationsOut, **ERRORS}, summary="The operation journal")
def operations(
    request: HttpRequest,
    person_id: int | None = Query(None, ge=1, le=MAX_ID),
    fact_id: int | None = Query(None, ge=1, le=MAX_ID),
    limit: int = Query(50, ge=1, le=200),
):
    """The operation journal, newest first (manual curation and automatic supersedes alike)."""
    rows = journal.operations(person_id=person_id, fact_id=fact_id)[:limit]
    return {
        "operations": [
            {
                "id": r.pk,
                "at": r.at,
                "actor": r.actor,
                "op": r.op,
                "person_id": r.person_id,
                "fact_id": r.fact_id,
                "fact_content": r.fact.content,
                "related_fact_id": r.related_fact_id,
                "prev": r.prev if isinstance(r.prev, dict) else {},
                "undone_by": r.undone_by_id,
                "undo_of": r.undo_of_id,
                "user": r.user,
            }
            for r in rows
        ]
    }


@router.post(
    "/operations/{operation_id}/undo",
    response={200: OperationResult, **ERRORS},
    summary="Undo an operation",
    auth=BearerTokenAuth(scope="undo"),
)
def undo(request: HttpRequest, operation_id: Id, payload: AtIn | None = None):
    """Restore what an operation changed, exactly. Undoing twice, or undoing an undo, is a 409."""
    at = _at(payload.at if payload else None)
    with transaction.atomic():
        result = services.undo_operation(operation_id=operation_id, user=api_user(request), at=at)
    return {"ok": True, "operation_id": result.pk, "fact_id": result.fact_id, "undo_of": operation_id}


# --- one real example of every body (demo memory), for /api/docs (config.api; tests/api/test_openapi.py) ---

_MEMBERS = [
    {"id": 11, "kind": "身份", "content": "阿杰住在成都", "origin_kind": "direct", "retention": 0.9145, "strength": 1.0,
     "half_life_hours": 8760.0, "updated_at": 1792317720000},
    {"id": 44, "kind": "身份", "content": "阿杰住在重庆", "origin_kind": "direct", "retention": 0.9942, "strength": 1.0,
     "half_life_hours": 8760.0, "updated_at": 1796124732000},
]
_OPERATION = {"id": 14, "at": 1796383932959, "actor": "manual", "op": "replace", "person_id": 2, "fact_id": 50,
              "fact_content": "小林喜欢在西湖边散步", "related_fact_id": 51,
              "prev": {"superseded_by": None, "new_row_created": True}, "undone_by": None, "undo_of": None,
              "user": "api:ops-bot"}
EXAMPLES: dict[type, Any] = {
    AtIn: {"at": 1796383932894},
    ReplaceIn: {"content": "小林喜欢傍晚在西湖边散步"},
    ResolveIn: {"keep_fact_id": 44, "drop_fact_id": 11},
    KeepAllIn: {"fact_id": 44, "member_ids": [11, 44]},
    KeepAllOut: {"ok": True, "operation_ids": [15, 16], "fact_ids": [11, 44]},
    OperationResult: {"ok": True, "operation_id": 14, "fact_id": 50, "new_fact_id": 51, "conflict_with": [],
                      "undo_of": None},
    ConflictMember: _MEMBERS[0],
    ConflictGroup: {"person_id": 3, "person_name": "阿杰", "slot": "居住地", "members": _MEMBERS},
    ConflictsOut: {"at": 1796383932971,
                   "groups": [{"person_id": 3, "person_name": "阿杰", "slot": "居住地", "members": _MEMBERS}]},
    OperationOut: _OPERATION,
    OperationsOut: {"operations": [_OPERATION]},
}
