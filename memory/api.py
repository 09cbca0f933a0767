"""The bot-facing JSON API (django-ninja): ``/api/v1/...``, OpenAPI docs at ``/api/docs``.

A bot integrates with the memory system only through this API. Every route needs
``Authorization: Bearer <token>`` (``python manage.py create_api_token NAME``). All
instants are integer epoch milliseconds and every call that reads or writes memory
accepts an optional ``at`` (default: now) so replays and tests are deterministic.

Errors always have a JSON body ``{"detail": "<one sentence>", "errors": [...]}``:
422 for malformed JSON, missing fields and wrong types (the field path is named),
404 for unknown ids, 409 for a wrong state, 413 for oversized bodies, 401 without a
valid token, 403 for a token without the route's scope. Client input never produces a 500. Input is validated before anything is
written; the write endpoints (messages, facts, knowledge, curation) run in one
transaction, so nothing is half-written on an error. The read paths (turns, confirm,
actions) are not held in a write transaction — that would block ingest for the whole
computation; their services write in short transactions of their own.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Literal

import pydantic
from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.db import DatabaseError, OperationalError, transaction
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Query, Router, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from pydantic import Field as PydanticField

from curation import services as curation_services
from curation.api import router as curation_router
from memory import broker, export, forget, pipeline, recall, services
from memory.auth import BearerTokenAuth, api_user
from memory.engine.scope import origin_kind_for_stream
from memory.engine.similarity import exact_key
from memory.models import Fact, Job, Knowledge, Message, Person, Stream
from memory.schemas import (
    EPOCH_MS_HELP,
    IMPORT_MAX_CHARS,
    MAX_EPOCH_MS,
    ConfirmIn,
    ConfirmOut,
    ConsultIn,
    ConsultOut,
    EpochMs,
    ErrorOut,
    FactIn,
    FactWriteOut,
    Id,
    ImportIn,
    ImportOut,
    In,
    InspectIn,
    InspectOut,
    KnowledgeIn,
    KnowledgeOut,
    MessageIn,
    MessageOut,
    MessagePatch,
    PersonFactsOut,
    PersonRef,
    RecallIn,
    RecallOut,
    StreamRef,
    TurnIn,
    TurnOut,
    episode_out,
    fact_out,
    fact_row,
    inspect_message_out,
    knowledge_hit_out,
    rank_terms_out,
    spread_hit_out,
    working_message_out,
)
from tuning.api import router as tuning_router

logger = logging.getLogger(__name__)


# --- request body parsing ---------------------------------------------------------


class BodyParseError(ValueError):
    """The request body is not a JSON document the API can store."""


def _reject_constant(name: str) -> Any:
    raise BodyParseError(f"{name} is not a JSON number")


def _find_unencodable(value: Any, path: str = "body") -> str | None:
    """Path of the first string holding a lone surrogate (cannot be stored as UTF-8)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _find_unencodable(key, path) or _find_unencodable(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_unencodable(item, f"{path}.{index}")
            if found:
                return found
    return None


class StrictJsonParser(Parser):
    """JSON bodies only: no NaN/Infinity, valid UTF-8, no lone surrogates."""

    def parse_body(self, request: HttpRequest) -> Any:
        try:
            data = json.loads(request.body, parse_constant=_reject_constant)
        except BodyParseError:
            raise
        except UnicodeDecodeError as exc:
            raise BodyParseError("the request body is not valid UTF-8") from exc
        except json.JSONDecodeError as exc:
            raise BodyParseError(f"the request body is not valid JSON ({exc.msg} at position {exc.pos})") from exc
        except (ValueError, RecursionError) as exc:
            raise BodyParseError("the request body is not valid JSON") from exc
        bad = _find_unencodable(data)
        if bad:
            raise BodyParseError(f"{bad} contains a lone surrogate, which is not valid Unicode text")
        return data


class ScopedNinjaAPI(NinjaAPI):
    """States each route's token scope in the OpenAPI document (``x-token-scope`` + description).

    The security requirement keeps an empty scope list: OpenAPI 3.0 allows scopes only for
    OAuth2/OpenID schemes, and schema-driven clients read the bearer requirement as is.
    """

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        scopes: dict[str, str] = {}
        for bound in self._get_bound_routers():
            for path_view in bound.path_operations.values():
                for operation in path_view.operations:
                    scope = next((getattr(cb, "scope", "") for cb in operation.auth_callbacks), "")
                    if scope:
                        scopes[operation.operation_id or self.get_openapi_operation_id(operation)] = scope
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                scope = scopes.get(operation.get("operationId", "")) if isinstance(operation, dict) else None
                if scope:
                    operation["x-token-scope"] = scope
                    note = f"**Token scope:** `{scope}` (or `admin`); without it the answer is 403."
                    operation["description"] = f"{note}\n\n{operation.get('description', '')}".strip()
        return schema


api = ScopedNinjaAPI(
    title="Memory Console API",
    version="1",
    description=__doc__,
    urls_namespace="api",
    auth=BearerTokenAuth(scope="bot"),
    parser=StrictJsonParser(),
)

ERRORS: dict[int, Any] = {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}


# --- error mapping ----------------------------------------------------------------


def error_response(request: HttpRequest, status: int, detail: str, errors: list[dict] | None = None) -> HttpResponse:
    return api.create_response(request, {"detail": detail, "errors": errors or []}, status=status)


def _field_path(loc: Any) -> str:
    parts = [str(p) for p in (loc or ())]
    # ninja prefixes the parameter source and, for a body schema, the parameter name
    if len(parts) >= 2 and parts[0] == "body" and parts[1] == "payload":
        parts = [parts[0], *parts[2:]]
    return ".".join(parts) or "body"


def _on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = []
    for err in exc.errors:
        errors.append(
            {"field": _field_path(err.get("loc")), "message": str(err.get("msg", "invalid")), "type": err.get("type", "")}
        )
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
    return error_response(request, 422, detail, errors)


def _on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cause = exc.__cause__
    if isinstance(cause, BodyParseError):
        return error_response(request, 422, str(cause), [{"field": "body", "message": str(cause), "type": "json_invalid"}])
    if isinstance(cause, RequestDataTooBig):
        return _on_too_big(request, cause)
    if isinstance(exc, AuthenticationError):
        return error_response(request, 401, "a valid 'Authorization: Bearer <token>' header is required")
    return error_response(request, exc.status_code, str(exc))


def _on_too_big(request: HttpRequest, exc: Exception) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return error_response(request, 413, f"the request body is larger than {limit} bytes")


def _status(code: int):
    def handler(request: HttpRequest, exc: Exception) -> HttpResponse:
        return error_response(request, code, str(exc) or exc.__class__.__name__)

    return handler


def _on_not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    return error_response(request, 404, str(exc) or "not found")


def _on_operational(request: HttpRequest, exc: OperationalError) -> HttpResponse:
    if "locked" in str(exc).lower() or "busy" in str(exc).lower():
        response = error_response(request, 503, "the database is busy; retry shortly")
        response["Retry-After"] = "1"
        return response
    return _on_unexpected(request, exc)


def _on_broker_down(request: HttpRequest, exc: Exception) -> HttpResponse:
    # The job (if any) is already marked failed with the reason; nothing is left running.
    response = error_response(request, 503, f"the task queue (Redis) is unavailable; nothing was started, retry later ({exc})")
    response["Retry-After"] = "5"
    return response


def _on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("api error on %s %s", request.method, request.path, exc_info=exc)
    return error_response(request, 500, "internal error; the request was not applied")


api.add_exception_handler(ValidationError, _on_validation_error)
api.add_exception_handler(HttpError, _on_http_error)
api.add_exception_handler(RequestDataTooBig, _on_too_big)
api.add_exception_handler(Http404, _on_not_found)
api.add_exception_handler(ObjectDoesNotExist, _on_not_found)
api.add_exception_handler(services.NotFound, _on_not_found)
api.add_exception_handler(services.MemoryInputError, _status(422))
api.add_exception_handler(recall.TurnNotFound, _on_not_found)
api.add_exception_handler(recall.TurnStateError, _status(409))
api.add_exception_handler(curation_services.FactNotFoundError, _on_not_found)
api.add_exception_handler(curation_services.FactStateError, _status(409))
api.add_exception_handler(curation_services.CurationInputError, _status(400))
api.add_exception_handler(pipeline.ImportLimitError, _status(422))
api.add_exception_handler(pipeline.ImportBusyError, _status(409))
api.add_exception_handler(pipeline.ImportBatchNotFoundError, _on_not_found)
api.add_exception_handler(broker.BrokerUnavailable, _on_broker_down)
api.add_exception_handler(forget.ForgetTargetNotFound, _on_not_found)
api.add_exception_handler(forget.ForgetPlanChanged, _status(409))
api.add_exception_handler(forget.ForgetRefused, _status(409))
api.add_exception_handler(ValueError, _status(400))
# a pydantic error escaping a view is a server bug (e.g. a response not matching its schema)
api.add_exception_handler(pydantic.ValidationError, _on_unexpected)
api.add_exception_handler(OperationalError, _on_operational)
api.add_exception_handler(DatabaseError, _on_unexpected)
api.add_exception_handler(Exception, _on_unexpected)


# --- helpers ----------------------------------------------------------------------


def _at(value: int | None) -> int:
    return services.now_ms() if value is None else int(value)


def _stream(ref: StreamRef) -> Stream:
    return services.resolve_stream(platform=ref.platform, kind=ref.kind, external_id=ref.external_id, name=ref.name)


def _person(ref: PersonRef, at: int) -> Person:
    return services.resolve_person(platform=ref.platform, external_id=ref.external_id, name=ref.name, at=at)


def _check_content(content: str, field: str = "content") -> None:
    limit = settings.MESSAGE_MAX_CHARS
    if len(content) > limit:
        raise ValidationError(
            [{"loc": ("body", field), "msg": f"is {len(content)} characters long; the limit is {limit}",
              "type": "string_too_long"}]
        )


def _require_message_in(ref: StreamRef, message_id: int) -> None:
    """404 unless the message exists in the (existing) stream of ``ref``; creates nothing."""
    found = Message.objects.filter(
        pk=message_id, stream__platform=ref.platform, stream__kind=ref.kind, stream__external_id=ref.external_id
    ).exists()
    if not found:
        raise Http404(f"message {message_id} does not exist in this stream")


def _require(model: type, pk: int, what: str, **filters: Any) -> None:
    if not model.objects.filter(pk=pk, **filters).exists():
        raise Http404(f"{what} {pk} does not exist")


# --- v1 routes ----------------------------------------------------------------------

router = Router(tags=["memory"])


@router.post("/messages", response={201: MessageOut, 200: MessageOut, **ERRORS}, summary="Store a message")
def post_message(request: HttpRequest, payload: MessageIn):
    """Store one inbound (`user`, needs `sender`) or outbound (`assistant`) message.

    Idempotent on `(stream, external_message_id)`: a repeat returns 200 and the same id.
    After commit the stream's summarisation and extraction checks are enqueued.
    """
    _check_content(payload.content)
    if payload.role == "user" and payload.sender is None:
        raise ValidationError([{"loc": ("body", "sender"), "msg": "is required when role is 'user'", "type": "missing"}])
    at = _at(payload.at)
    with transaction.atomic():
        stream = _stream(payload.stream)
        person = _person(payload.sender, at) if payload.sender is not None else None
        message, created = services.append_message(
            stream_id=stream.pk,
            role=payload.role,
            content=payload.content,
            sender_person_id=person.pk if person else None,
            external_message_id=payload.external_message_id,
            at=at,
        )
    out = {"id": message.pk, "stream_id": message.stream_id, "person_id": message.sender_person_id}
    return Status(201 if created else 200, out)


@router.patch("/messages/{message_id}", response={200: MessageOut, **ERRORS}, summary="Fill a message body")
def patch_message(request: HttpRequest, message_id: Id, payload: MessagePatch):
    """Replace the content of a stored message (fills a placeholder body; the timestamp stays)."""
    _check_content(payload.content)
    with transaction.atomic():
        _require(Message, message_id, "message")
        message = services.update_message_content(message_id=message_id, content=payload.content)
    return {"id": message.pk, "stream_id": message.stream_id, "person_id": message.sender_person_id}


@router.post("/turns", response={200: TurnOut, **ERRORS}, summary="Prepare a turn (read-only for facts)")
def post_turn(request: HttpRequest, payload: TurnIn):
    """Working memory, the scoped fact pool and episodes for the reply being composed.

    Runs the fact sweep, builds the pool (current text and impression, present
    persons, visibility before scoring, conflict groups completed), never reinforces,
    and records the turn's retrieval trace. Confirm with `POST /turns/{turn_id}/confirm`.
    """
    at = _at(payload.at)
    if payload.watermark_message_id is not None:
        _require_message_in(payload.stream, payload.watermark_message_id)
    # Reads are not wrapped in a write transaction (that would block ingest for the
    # whole turn); prepare_turn writes its sweep and its turn row in short ones.
    stream = _stream(payload.stream)
    speaker = _person(payload.speaker, at)
    ctx = recall.prepare_turn(
        stream_id=stream.pk,
        speaker_id=speaker.pk,
        text=payload.text,
        impression=payload.impression,
        watermark_message_id=payload.watermark_message_id,
        at=at,
    )
    return {
        "turn_id": ctx.turn_id,
        "stream_id": stream.pk,
        "speaker_id": speaker.pk,
        "working_memory": [working_message_out(m) for m in ctx.working_memory],
        "facts": [fact_out(f) for f in ctx.facts],
        "episodes": [episode_out(e) for e in ctx.episodes],
    }


@router.post("/turns/{turn_id}/confirm", response={200: ConfirmOut, **ERRORS}, summary="Confirm a turn's reply")
def confirm_turn(request: HttpRequest, turn_id: Id, payload: ConfirmIn | None = None):
    """The reply is going out: dense channel, fused re-rank, reinforce exactly the facts returned.

    Without `query_embedding` the configured embedding provider is used; without one the
    lexical order stands. Confirming the same turn twice is a 409.
    """
    payload = payload or ConfirmIn()
    # confirm_turn claims the turn (confirmed_at) and reinforces in one transaction of its own
    result = recall.confirm_turn(turn_id=turn_id, query_embedding=payload.query_embedding, at=_at(payload.at))
    return {
        "turn_id": turn_id,
        "facts": [fact_out(f) for f in result.facts],
        "conflict_members": [fact_out(f) for f in result.conflict_members],
        "reinforced": list(result.reinforced),
        "used_vector": bool(result.used_vector),
    }


@router.post("/actions/recall", response={200: RecallOut, **ERRORS}, summary="Active recall")
def action_recall(request: HttpRequest, payload: RecallIn):
    """Facts and episodes for a query, then association spreading (seeds and spread kept apart).

    No reinforcement; adopted items are linked in the association graph.
    """
    at = _at(payload.at)
    stream = _stream(payload.stream)
    speaker = _person(payload.speaker, at)
    result = recall.cognitive_recall(
        stream_id=stream.pk,
        speaker_id=speaker.pk,
        query=payload.query,
        cross_person=payload.cross_person,
        hops=payload.hops,
        at=at,
        query_embedding=payload.query_embedding,
    )
    return {
        "stream_id": stream.pk,
        "speaker_id": speaker.pk,
        "facts": [fact_out(f) for f in result.facts],
        "episodes": [episode_out(e) for e in result.episodes],
        "spread": [spread_hit_out(h) for h in result.spread],
        "observation": result.observation or "",
        "fact_terms": [rank_terms_out(f) for f in result.facts],
        "held_back": [rank_terms_out(f) for f in result.held_back],
        "used_vector": result.used_vector,
    }


@router.post("/actions/inspect", response={200: InspectOut, **ERRORS}, summary="Search a stream's messages")
def action_inspect(request: HttpRequest, payload: InspectIn):
    if payload.before_message_id is not None:
        _require_message_in(payload.stream, payload.before_message_id)
    stream = _stream(payload.stream)
    hits = recall.inspect_messages(
        stream_id=stream.pk, query=payload.query, before_message_id=payload.before_message_id, limit=payload.limit
    )
    return {"stream_id": stream.pk, "messages": [inspect_message_out(m) for m in hits]}


@router.post("/actions/consult", response={200: ConsultOut, **ERRORS}, summary="Search the knowledge base")
def action_consult(request: HttpRequest, payload: ConsultIn):
    hits = recall.consult_knowledge(query=payload.query, limit=payload.limit, at=_at(payload.at))
    return {"knowledge": [knowledge_hit_out(h) for h in hits]}


@router.post("/facts", response={201: FactWriteOut, 200: FactWriteOut, **ERRORS}, summary="Remember a fact")
def post_fact(request: HttpRequest, payload: FactIn):
    """The write path of `add_fact`: a similar fact is reinforced (200) instead of duplicated (201)."""
    content = payload.content.strip()
    if not content or not exact_key(content):
        raise ValidationError(
            [{"loc": ("body", "content"), "msg": "must contain at least one letter or digit", "type": "value_error"}]
        )
    at = _at(payload.at)
    origin = origin_kind_for_stream(payload.stream_kind) if payload.stream_kind else "legacy"
    with transaction.atomic():
        if payload.supersedes is not None:
            _require(Fact, payload.supersedes, "fact")
        person = _person(payload.person, at)
        write = services.add_fact(
            person_id=person.pk,
            content=content,
            kind=payload.kind,
            slot=payload.slot,
            supersedes=payload.supersedes or 0,
            origin_kind=origin,
            actor="auto",
            source="api",
            user=api_user(request),
            at=at,
        )
    out = {
        "fact_id": write.fact_id,
        "person_id": person.pk,
        "created": bool(write.created),
        "conflict_with": list(write.conflict_with),
        "superseded": write.superseded or None,
        "origin_promoted": bool(write.origin_promoted),
    }
    return Status(201 if write.created else 200, out)


@router.get("/persons/{person_id}/facts", response={200: PersonFactsOut, **ERRORS}, summary="A person's facts")
def person_facts(
    request: HttpRequest,
    person_id: Id,
    include_invalid: bool = Query(False, description="also list invalidated and superseded facts"),
    at: int | None = Query(None, ge=0, le=MAX_EPOCH_MS, description=f"{EPOCH_MS_HELP} (default now)"),
):
    """Every fact of a person with its decay state at `at` (default now), ascending id."""
    _require(Person, person_id, "person")
    now = _at(at)
    rows = Fact.objects.filter(person_id=person_id).defer("embedding", "embedding_q8", "tokens_v2").order_by("id")
    if not include_invalid:
        rows = rows.valid()
    return {"person_id": person_id, "at": now, "facts": [fact_row(f, now) for f in rows]}


@router.post("/knowledge", response={201: KnowledgeOut, 200: KnowledgeOut, **ERRORS}, summary="Add knowledge")
def post_knowledge(request: HttpRequest, payload: KnowledgeIn):
    """Store one knowledge item (deduplicated by content; a repeat returns 200 and the same id)."""
    content = payload.content.strip()
    if not content or not exact_key(content):
        raise ValidationError(
            [{"loc": ("body", "content"), "msg": "must contain at least one letter or digit", "type": "value_error"}]
        )
    with transaction.atomic():
        existed = Knowledge.objects.filter(content_key=exact_key(content)).values_list("id", flat=True).first()
        knowledge_id = existed or services.add_knowledge(content=content, source=payload.source or "api", at=_at(payload.at))
    return Status(200 if existed else 201, {"id": knowledge_id, "created": not existed})


def _job_out(job: Job) -> dict[str, Any]:
    result = job.result if isinstance(job.result, dict) else {}
    batch_id = result.get("batch_id") or (job.params or {}).get("batch_id")
    return {
        "job_id": job.pk,
        "batch_id": batch_id,
        "status": job.status,
        "progress": job.progress,
        "total": job.total,
        "result": result,
        "error": job.error,
    }


@router.post("/knowledge/imports", response={202: ImportOut, **ERRORS}, summary="Import a text as knowledge")
def post_import(request: HttpRequest, payload: ImportIn):
    """Chunk a pasted text (≤ 1200 characters a chunk) into knowledge, as a background job.

    Poll `GET /knowledge/imports/{job_id}` for the batch id and counts.
    """
    if len(payload.text) > IMPORT_MAX_CHARS:
        raise ValidationError(
            [{"loc": ("body", "text"), "msg": f"is {len(payload.text)} characters long; the limit is {IMPORT_MAX_CHARS}",
              "type": "string_too_long"}]
        )
    if not payload.text.strip():
        raise ValidationError([{"loc": ("body", "text"), "msg": "must not be blank", "type": "value_error"}])
    job = pipeline.start_import(text=payload.text, origin_name=payload.origin_name, kind=payload.kind, user=api_user(request))
    return Status(202, _job_out(job))


@router.get("/knowledge/imports/{job_id}", response={200: ImportOut, **ERRORS}, summary="An import job's state")
def get_import(request: HttpRequest, job_id: Id):
    job = Job.objects.filter(pk=job_id, kind=Job.Kind.IMPORT).first()
    if job is None:
        raise Http404(f"import job {job_id} does not exist")
    return _job_out(job)


@router.get("/persons/{person_id}/export", response={200: dict[str, Any], **ERRORS}, summary="Export a person",
            auth=BearerTokenAuth(scope="admin"), tags=["forget"])
def person_export(request: HttpRequest, person_id: Id):
    """Everything stored about a person as one JSON document: identities, the messages they
    sent (every stream), facts with their decay state now, the episodes of those messages and
    the journal of operations on their facts.

    Needs the `admin` scope: the document crosses every stream (a `bot` token reads one
    person's facts through `GET /persons/{id}/facts`).
    """
    _require(Person, person_id, "person")
    return export.person_export(person_id=person_id, now=services.now_ms())


# --- forgetting on request (scope ``forget``) ---------------------------------------


class ForgetIn(In):
    target: Literal["message", "fact", "episode", "person", "stream"]
    id: Id


class ForgetConfirmIn(ForgetIn):
    digest: str | None = PydanticField(
        None, max_length=64, description="the preview's digest: refused with 409 if the cascade changed since"
    )
    at: EpochMs | None = None


class ForgetPlanOut(Schema):
    target: str
    id: int
    label: str
    digest: str
    undoable: bool = False
    counts: dict[str, int]
    ids: dict[str, list[int]]


class ForgetDoneOut(ForgetPlanOut):
    record_id: int


def _plan_out(plan: forget.ForgetPlan) -> dict[str, Any]:
    return {
        "target": plan.target, "id": plan.target_id, "label": plan.label, "digest": plan.digest(),
        "undoable": False, "counts": plan.counts(), "ids": {name: getattr(plan, name) for name in plan.id_fields},
    }


FORGET_AUTH = BearerTokenAuth(scope="forget")


@router.post("/forget/preview", response={200: ForgetPlanOut, **ERRORS}, summary="Preview a forgetting",
             auth=FORGET_AUTH, tags=["forget"])
def forget_preview(request: HttpRequest, payload: ForgetIn):
    """Everything that forgetting the target would delete and touch, by id, with counts (nothing is changed).

    Confirm with `POST /forget` and the same target, passing `digest` so a cascade that
    changed in between is refused (409).
    """
    return _plan_out(forget.plan_forget(target=payload.target, target_id=payload.id))


@router.post("/forget", response={200: ForgetDoneOut, **ERRORS}, summary="Forget (not undoable)", auth=FORGET_AUTH,
             tags=["forget"])
def forget_now(request: HttpRequest, payload: ForgetConfirmIn):
    """Delete or redact everything the preview lists, in one transaction. **Cannot be undone.**

    Journalled (who, when, counts — never the text) in `forget_log`.
    """
    plan, record = forget.forget(
        target=payload.target, target_id=payload.id, user=api_user(request), expected_digest=payload.digest,
        at=payload.at,
    )
    return {**_plan_out(plan), "record_id": record.pk}


router.add_router("", curation_router)
router.add_router("/tuning", tuning_router)
api.add_router("/v1", router)
