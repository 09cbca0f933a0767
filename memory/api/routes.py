"""Memory's routes of the JSON API: messages, turns, actions, facts, knowledge, imports, export, forgetting.

The API itself — the NinjaAPI at ``/api/``, its body parser, the error format and the
mapping of exceptions to statuses — is assembled in :mod:`config.api`, which mounts
this router at ``/v1`` beside the curation and tuning routers. ``ERROR_STATUSES``
lists the exceptions of the memory layer and the status each maps to.
"""
from __future__ import annotations

from typing import Any, Literal

from django.db import connection, transaction
from django.http import Http404, HttpRequest
from ninja import Query, Router, Schema, Status
from ninja.errors import ValidationError
from pydantic import Field as PydanticField

from memory import pipeline, recall, services
from memory.api import examples
from memory.api.auth import BearerTokenAuth, api_user
from memory.api.schemas import (
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
    message_max_chars,
    rank_terms_out,
    spread_hit_out,
    working_message_out,
)
from memory.engine.scope import origin_kind_for_stream
from memory.engine.similarity import exact_key
from memory.models import Fact, Job, Knowledge, Message, Person, Stream
from memory.privacy import export, forget

ERRORS: dict[int, Any] = {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}


#: Exceptions of the memory layer → HTTP status (:mod:`config.api` maps them; the body says why;
#: ``BrokerUnavailable`` is 503 with ``Retry-After`` there).
ERROR_STATUSES: dict[type[BaseException], int] = {
    services.NotFound: 404,
    services.MemoryInputError: 422,
    recall.TurnNotFound: 404,
    recall.TurnStateError: 409,
    pipeline.ImportLimitError: 422,
    pipeline.ImportBusyError: 409,
    pipeline.ImportBatchNotFoundError: 404,
    forget.ForgetTargetNotFound: 404,
    forget.ForgetPlanChanged: 409,
    forget.ForgetRefused: 409,
}


# --- helpers ----------------------------------------------------------------------


def _at(value: int | None) -> int:
    return services.now_ms() if value is None else int(value)


def _stream(ref: StreamRef) -> Stream:
    return services.resolve_stream(platform=ref.platform, kind=ref.kind, external_id=ref.external_id, name=ref.name)


def _person(ref: PersonRef, at: int) -> Person:
    return services.resolve_person(platform=ref.platform, external_id=ref.external_id, name=ref.name, at=at)


def _scope(payload: TurnIn | RecallIn) -> tuple[int, dict[str, int]]:
    """The request's time and its stream and speaker ids (both resolved, created on first use)."""
    at = _at(payload.at)
    return at, {"stream_id": _stream(payload.stream).pk, "speaker_id": _person(payload.speaker, at).pk}


def _check_content(content: str, field: str = "content") -> None:
    limit = message_max_chars()
    if len(content) > limit:
        raise ValidationError(
            [{"loc": ("body", field), "msg": f"is {len(content)} characters long; the limit is {limit}",
              "type": "string_too_long"}]
        )


def _require_message_in(ref: StreamRef, message_id: int) -> None:
    """404 unless the message exists in the (existing) stream of ``ref``; creates nothing."""
    with connection.cursor() as cur:  # every watermarked turn asks: plain SQL, no ORM compile per call
        cur.execute(
            "SELECT 1 FROM messages m JOIN streams s ON s.id = m.stream_id"
            " WHERE m.id = %s AND s.platform = %s AND s.kind = %s AND s.external_id = %s",
            [message_id, ref.platform, ref.kind, ref.external_id],
        )
        found = cur.fetchone() is not None
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
    sender = payload.sender
    message, created = services.store_message(
        stream={"platform": payload.stream.platform, "kind": payload.stream.kind,
                "external_id": payload.stream.external_id, "name": payload.stream.name},
        sender=None if sender is None else {"platform": sender.platform, "external_id": sender.external_id,
                                            "name": sender.name},
        role=payload.role,
        content=payload.content,
        external_message_id=payload.external_message_id,
        at=_at(payload.at),
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
    # One statement looks up the stream, the speaker and the watermark; a missing ref is created
    # (a watermark outside the stream is a 404 and creates nothing).
    at = _at(payload.at)
    stream, speaker = services.resolve_turn_refs(
        stream=payload.stream.model_dump(), speaker=payload.speaker.model_dump(),
        watermark_message_id=payload.watermark_message_id, at=at,
    )
    if stream is None:
        raise Http404(f"message {payload.watermark_message_id} does not exist in this stream")
    scope = {"stream_id": stream.pk, "speaker_id": speaker.pk}
    # Reads are not wrapped in a write transaction (that would block ingest for the
    # whole turn); prepare_turn writes its sweep and its turn row in short ones.
    ctx = recall.prepare_turn(
        **scope,
        stream=stream,
        text=payload.text,
        impression=payload.impression,
        watermark_message_id=payload.watermark_message_id,
        at=at,
    )
    return {
        "turn_id": ctx.turn_id,
        **scope,
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
    at, scope = _scope(payload)
    result = recall.cognitive_recall(
        **scope,
        query=payload.query,
        cross_person=payload.cross_person,
        hops=payload.hops,
        at=at,
        query_embedding=payload.query_embedding,
    )
    return {
        **scope,
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
        if payload.source_message_id is not None:
            _require(Message, payload.source_message_id, "message")
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
            source_message_id=payload.source_message_id,
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
    rows = Fact.objects.filter(person_id=person_id).defer("embedding", "embedding_q8", "tokens").order_by("id")
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
            auth=BearerTokenAuth(scope="export"), tags=["forget"])
def person_export(request: HttpRequest, person_id: Id):
    """Everything stored about a person as one JSON document: identities, the messages they
    sent (every stream), facts with their decay state now, the episodes of those messages and
    the journal of operations on their facts.

    Needs the `export` scope (or `admin`): the document crosses every stream (a `bot` token
    reads one person's facts through `GET /persons/{id}/facts`). The console's export page
    has the same rule: the `memory.export_person` permission.
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
        "undoable": False, "counts": plan.counts(),
        "ids": {**{name: getattr(plan, name) for name in plan.id_fields}, **plan.dependents},
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




#: One real example of every body of memory's routes (memory/api/examples.py), by model: /api/docs shows them.
EXAMPLES: dict[type, Any] = {
    **examples.EXAMPLES, ForgetIn: examples.FORGET["in"], ForgetConfirmIn: examples.FORGET["confirm"],
    ForgetPlanOut: examples.FORGET["plan"], ForgetDoneOut: examples.FORGET["done"],
}
