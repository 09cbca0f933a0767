"""Retrieval tuning over the JSON API: ``/api/v1/tuning/...`` (mounted by :mod:`config.api`).

Parameter values are taken **as JSON decoded them** (``dict[str, Any]``, never coerced):
``3`` and ``3.0`` are the integer 3 and valid for ``ppr_hops`` (JSON Schema's ``integer``);
``1.5`` is refused for integer parameters ("需要整数"), ``true`` everywhere ("需要数值").
Integers are accepted for float parameters and stored as floats.

A refused parameter set is a 422 whose ``errors[0].field`` is ``body.params.<name>``;
an unknown profile is a 404; the built-in profiles (``default``, ``reference``, once ``seed``)
cannot be saved over or deleted (422, stated in the schema). Evaluation and comparison run as background jobs: the
POST answers 202 with a job id, ``GET /tuning/jobs/{id}`` reports progress and, when
done, the report. Every route needs a token with the ``tuning`` scope (or ``admin``).
"""
from __future__ import annotations

import re
from typing import Annotated, Any

from django.http import HttpRequest
from ninja import Field, Path, Query, Router, Schema, Status
from pydantic import ConfigDict

from memory import recall
from memory.api.auth import BearerTokenAuth, api_user
from memory.api.schemas import MAX_ID, NOT_BLANK, WHITESPACE, Id, JsonInt
from memory.engine.tuning import BUILTIN_PROFILES, RENAMED_PROFILES, WHITELIST
from memory.models import Job, Turn
from memory.overrides import DEFAULT_PROFILE_NAME
from tuning import evaluation, fit, inspection, relevance, services
from tuning.services import PROFILE_NAME_MAX, ProfileError

router = Router(tags=["tuning"], auth=BearerTokenAuth(scope="tuning"))


class _In(Schema):
    """Request bodies: unknown fields refused, no coercion (``true`` and ``"5"`` are no integers)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorBody(Schema):
    detail: str
    errors: list[dict[str, Any]] = Field(default_factory=list)


class ParamSpecOut(Schema):
    kind: str
    min: float
    max: float
    legacy: float | int
    label: str
    configured: int | None = Field(None, description="the configured value (limits only)")


class ProfileOut(Schema):
    name: str
    params: dict[str, Any]
    created_at: int | None
    last_applied_at: int | None
    active: bool
    builtin: bool


class ActiveOut(Schema):
    profile: str
    overrides: dict[str, Any]


class StateOut(Schema):
    whitelist: dict[str, ParamSpecOut]
    active: ActiveOut
    profiles: list[ProfileOut]


def _params_schema(schema: dict[str, Any]) -> None:
    """The whitelist as JSON Schema: each parameter with its type and inclusive bounds, nothing else."""
    schema.pop("additionalProperties", None)
    schema["properties"] = {
        name: {"type": "integer" if spec.kind == "int" else "number", "minimum": spec.min, "maximum": spec.max,
               "description": spec.label}
        for name, spec in WHITELIST.items()
    }
    schema["additionalProperties"] = False


PARAMS_HELP = "whitelisted parameter → JSON number in its bounds; integer parameters need whole numbers (3 or 3.0)"
# A stored profile's name: not blank, and not a built-in profile's, nor the old name of one (after stripping).
BUILTIN_NAMES = "|".join(re.escape(n) for n in sorted({DEFAULT_PROFILE_NAME, *BUILTIN_PROFILES, *RENAMED_PROFILES}))
PROFILE_NAME_RULES: dict[str, Any] = {
    "pattern": NOT_BLANK,
    "not": {"pattern": f"^[{WHITESPACE}]*({BUILTIN_NAMES})[{WHITESPACE}]*$"},
}
# An existing profile's name (apply): "default" is one.
NAME_RULES: dict[str, Any] = {"pattern": NOT_BLANK}
ProfileName = Annotated[str, Field(max_length=PROFILE_NAME_MAX, json_schema_extra=PROFILE_NAME_RULES)]


class ProfileIn(_In):
    name: ProfileName
    params: dict[str, Any] = Field(description=PARAMS_HELP, json_schema_extra=_params_schema)


class ApplyIn(_In):
    name: str = Field(max_length=200, json_schema_extra=NAME_RULES)


class AppliedOut(Schema):
    profile: str
    params: dict[str, Any]
    revision: int


class DeletedOut(Schema):
    deleted: bool
    active: str
    profiles: list[str]


class ExportOut(Schema):
    profile: str
    params: dict[str, Any]
    exported_at: str


class TargetIn(_In):
    profile: str | None = Field(None, max_length=200, description="a stored profile (or 'default')")
    params: dict[str, Any] | None = Field(
        None, description=f"explicit parameters (used when no profile is given): {PARAMS_HELP}",
        json_schema_extra=_params_schema,
    )


# bounds first, then JsonInt's validator (as memory.api.schemas.Id): the schema then states the bounds
Cutoff = Annotated[int, Field(ge=1, le=50), *JsonInt.__metadata__]


class SelectionIn(_In):
    """Which recorded turns a job replays, and the metrics' cut-off."""

    max_turns: JsonInt = Field(evaluation.DEFAULT_MAX_TURNS, ge=1, le=evaluation.MAX_LABELLED_TURNS,
                               description=f"the newest turns replayed: at most {evaluation.MAX_TURNS_LIMIT}, or "
                                           f"{evaluation.MAX_LABELLED_TURNS} when `labelled` (more is replayed as the most)")
    streams: list[Id] | None = Field(None, max_length=1000, description="only turns of these streams")
    labelled: bool = Field(False, description="only turns with relevance labels")
    k: Cutoff | None = Field(None, description="R@k and nDCG@k cut-off; default: the evaluated fact_recall_limit "
                                               "(the prompt size)")


class EvaluateIn(TargetIn, SelectionIn):
    pass


class CompareIn(SelectionIn):
    a: TargetIn
    b: TargetIn


class FitIn(_In):
    budget: JsonInt = Field(fit.DEFAULT_BUDGET, ge=1, le=fit.MAX_BUDGET,
                            description="evaluations the search may spend (each over every dev turn)")
    streams: list[Id] | None = Field(None, max_length=1000, description="learn only from turns of these streams")
    k: Cutoff | None = Field(None, description="the metrics' cut-off; default: the prompt size")
    profile: str | None = Field(None, max_length=200, description="the profile to start from (default: the active one)")


class FitRefusedOut(Schema):
    detail: str
    errors: list[dict[str, Any]] = Field(default_factory=list)
    needed: int
    have: int


class ApplyFitIn(_In):
    name: ProfileName | None = Field(None, description="the new profile's name (default fit-<job id>)")


class LabelEntryIn(_In):
    """One label; the other fields of an export (``added``, ``user``, ``at``) are accepted and ignored: an
    import is the importing token's judgement, as of now."""

    turn: Id
    fact: Id
    relevant: bool
    added: bool | None = Field(None, description="ignored (recomputed from the turn's pool)")
    user: str | None = Field(None, max_length=150, description="ignored (the importing token is recorded)")
    at: JsonInt | None = Field(None, description="ignored (stored as of the import)")


class LabelsIn(_In):
    labels: list[LabelEntryIn] = Field(max_length=relevance.MAX_IMPORT, description=(
        "[{turn, fact, relevant}] — every entry is checked before any is stored (all or nothing)"))


class OneLabelIn(_In):
    fact: Id
    relevant: bool | None = Field(description="true: relevant; false: not relevant; null: remove the label")


class LabelOut(Schema):
    turn: int
    fact: int
    relevant: bool
    added: bool = False
    user: str = ""
    at: int = 0


class LabelsOut(Schema):
    labels: list[LabelOut]
    exported_at: str


class ImportedOut(Schema):
    created: int
    updated: int
    unchanged: int
    turns_labelled: int


class TurnRowOut(Schema):
    id: int
    stream: int
    stream_kind: str
    speaker: int
    at: int
    text: str
    confirmed: bool
    prompt_fact_ids: list[int]
    held_back_fact_ids: list[int]
    labels: int


class TurnListOut(Schema):
    count: int
    turns: list[TurnRowOut]
    turns_labelled: int


class TurnInspectionOut(Schema):
    turn: dict[str, Any]
    conversation: list[dict[str, Any]]
    candidates: list[dict[str, Any]]
    prompt: list[int]
    held_back: dict[str, Any]
    added: list[dict[str, Any]]
    episodes: list[dict[str, Any]]
    profile: dict[str, Any]
    drift: list[int]


class JobOut(Schema):
    job_id: int
    kind: str
    status: str
    progress: int
    total: int
    percent: int
    error: str = ""
    params: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] = Field(default_factory=dict)


# 401 without a valid token, 422 for a malformed request (config.api's handlers) or a refused parameter set,
# 404 for an unknown profile or job.
ERRS = {401: ErrorBody, 403: ErrorBody, 404: ErrorBody, 422: ErrorBody}


def _error(exc: ProfileError, prefix: str = "body") -> Status:
    if exc.param in ("name", "profile"):
        field = f"{prefix}.{exc.param}"
    else:
        field = f"{prefix}.params.{exc.param}" if exc.param else f"{prefix}.params"
    return Status(exc.status, {"detail": str(exc), "errors": [{"field": field, "message": str(exc), "type": "tuning"}]})


def whitelist_out() -> dict[str, dict[str, Any]]:
    configured = recall.configured_limits()
    return {
        name: {
            "kind": spec.kind,
            "min": spec.min,
            "max": spec.max,
            "legacy": spec.legacy,
            "label": spec.label,
            "configured": configured.get(name),
        }
        for name, spec in WHITELIST.items()
    }


def _profile_out(row: services.ProfileRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "params": row.params,
        "created_at": row.created_at,
        "last_applied_at": row.last_applied_at,
        "active": row.active,
        "builtin": row.builtin,
    }


def job_out(job: Job, *, with_result: bool = True) -> dict[str, Any]:
    return {
        "job_id": job.pk,
        "kind": job.kind,
        "status": job.status,
        "progress": job.progress,
        "total": job.total,
        "percent": job.percent,
        "error": job.error,
        "params": job.params or {},
        "result": (job.result or {}) if with_result else {},
    }


def _user(request: HttpRequest) -> str:
    return api_user(request)


@router.get("", response={200: StateOut, 401: ErrorBody, 403: ErrorBody}, summary="Whitelist, active profile and stored profiles")
def get_state(request: HttpRequest):
    active = services.active_profile_name()
    return {
        "whitelist": whitelist_out(),
        "active": {"profile": active, "overrides": services.load_profile_params(active) or {}},
        "profiles": [_profile_out(p) for p in services.list_profiles()],
    }


@router.post("/profiles", response={201: ProfileOut, **ERRS}, summary="Save (create or update) a profile")
def post_profile(request: HttpRequest, payload: ProfileIn):
    """Validates every parameter; an existing profile keeps `created_at` (UPSERT). Saving never applies."""
    try:
        row = services.save_profile(payload.name, payload.params, user=_user(request))
    except ProfileError as exc:
        return _error(exc)
    return Status(201, _profile_out(row))


@router.delete("/profiles/{name}", response={200: DeletedOut, **ERRS}, summary="Delete a profile")
def delete_profile(request: HttpRequest, name: ProfileName):
    """Deleting the active profile falls back to `default`; an unknown name answers `deleted: false`."""
    try:
        deleted = services.delete_profile(name, user=_user(request))
    except ProfileError as exc:
        return _error(exc, prefix="path")
    return {
        "deleted": deleted,
        "active": services.active_profile_name(),
        "profiles": [p.name for p in services.list_profiles()],
    }


@router.post("/apply", response={200: AppliedOut, **ERRS}, summary="Apply a profile in every process")
def post_apply(request: HttpRequest, payload: ApplyIn):
    """Takes effect in the web and worker processes within a second; survives restarts."""
    try:
        return services.apply_profile(payload.name, user=_user(request))
    except ProfileError as exc:
        return _error(exc)


@router.post("/rollback", response={200: AppliedOut, 401: ErrorBody, 403: ErrorBody}, summary="Roll back to the built-in default")
def post_rollback(request: HttpRequest):
    return services.rollback_to_default(user=_user(request))


@router.get("/export", response={200: ExportOut, **ERRS}, summary="Export a profile as JSON")
def get_export(request: HttpRequest, name: str = ""):
    """`name` blank = the active profile."""
    try:
        return services.export_profile(name.strip() or services.active_profile_name())
    except ProfileError as exc:
        return _error(exc, prefix="query")


def _target(t: TargetIn | EvaluateIn) -> dict[str, Any]:
    """The evaluated target. ``params`` are checked against the whitelist even beside a ``profile`` (which wins):
    the schema states their bounds, so values outside them are refused whatever else the body holds."""
    if t.profile and t.params is not None:
        services.validate_params(t.params)
    return evaluation.resolve_target(profile=t.profile, params=t.params)


def _selection(payload: SelectionIn) -> evaluation.Selection:
    return evaluation.Selection.of(max_turns=payload.max_turns, streams=payload.streams, labelled=payload.labelled,
                                   k=payload.k)


@router.post("/evaluate", response={202: JobOut, **ERRS}, summary="Evaluate a parameter set by trace replay")
def post_evaluate(request: HttpRequest, payload: EvaluateIn):
    """`profile` → its parameters; else `params`; neither → the active profile. Answers a job to poll."""
    try:
        target = _target(payload)
        selection = _selection(payload)
    except ProfileError as exc:
        return _error(exc)
    job = evaluation.submit_evaluation(target, user=_user(request), selection=selection)
    job.refresh_from_db()
    return Status(202, job_out(job))


@router.post("/compare", response={202: JobOut, **ERRS}, summary="What-if: compare two parameter sets")
def post_compare(request: HttpRequest, payload: CompareIn):
    try:
        a, b = _target(payload.a), _target(payload.b)
        selection = _selection(payload)
    except ProfileError as exc:
        return _error(exc)
    job = evaluation.submit_comparison(a, b, user=_user(request), selection=selection)
    job.refresh_from_db()
    return Status(202, job_out(job))


JOB_KINDS = ("evaluate", "compare", "fit")


@router.get("/jobs/{job_id}", response={200: JobOut, **ERRS}, summary="An evaluation, comparison or fit job")
def get_job(request: HttpRequest, job_id: int = Path(..., ge=1, le=MAX_ID)):
    job = Job.objects.filter(pk=job_id, kind__in=JOB_KINDS).first()
    if job is None:
        return Status(404, {"detail": f"tuning job {job_id} does not exist", "errors": []})
    return job_out(job)


# --- fit -------------------------------------------------------------------------------------


@router.post("/fit", response={202: JobOut, 409: FitRefusedOut, **{c: e for c, e in ERRS.items() if c != 409}},
             summary="Fit a profile to the relevance labels")
def post_fit(request: HttpRequest, payload: FitIn):
    """Searches the whitelisted ranking knobs on the labelled turns, chooses on dev turns and reports on
    held-out ones (`GET /tuning/jobs/{id}`: `result.heldout.gain` with a 95 % bootstrap interval). Fewer
    labelled turns than a trustworthy answer needs: 409 with `needed` and `have`, no job."""
    try:
        job = fit.submit_fit(budget=payload.budget, streams=payload.streams, k=payload.k, profile=payload.profile,
                             user=_user(request))
    except fit.FitRefused as exc:
        return Status(409, {"detail": str(exc), "needed": exc.needed, "have": exc.have,
                            "errors": [{"field": "labels", "message": str(exc), "type": "too_few_labels"}]})
    except ProfileError as exc:
        return _error(exc)
    job.refresh_from_db()
    return Status(202, job_out(job))


@router.post("/jobs/{job_id}/apply", response={200: AppliedOut, 409: ErrorBody, **ERRS},
             summary="Save a fit's profile and apply it")
def post_apply_fit(request: HttpRequest, payload: ApplyFitIn, job_id: int = Path(..., ge=1, le=MAX_ID)):
    """One step: the finished fit's parameters saved as a profile (`name`, default `fit-<job id>`) and applied
    in every process; journalled. `POST /tuning/rollback` undoes it as any apply."""
    job = Job.objects.filter(pk=job_id, kind="fit").first()
    if job is None:
        return Status(404, {"detail": f"fit job {job_id} does not exist", "errors": []})
    try:
        return fit.apply_fit(job, name=payload.name or "", user=_user(request))
    except ProfileError as exc:
        return _error(exc)


# --- labels ----------------------------------------------------------------------------------


def _label_error(exc: relevance.LabelError) -> Status:
    if isinstance(exc, relevance.LabelInputError):
        errors = [{"field": f"body.labels.{e['index']}.{e['field']}".rstrip("."), "message": e["message"],
                   "type": "label"} for e in exc.errors]
        return Status(exc.status, {"detail": str(exc), "errors": errors})
    return Status(exc.status, {"detail": str(exc), "errors": [{"field": f"body.{exc.field}" if exc.field else "body",
                                                               "message": str(exc), "type": "label"}]})


@router.get("/labels", response={200: LabelsOut, **ERRS}, summary="Export relevance labels")
def get_labels(request: HttpRequest, turn: int | None = Query(None, ge=1, le=MAX_ID)):
    """Every label (or one turn's) in the shape `POST /tuning/labels` imports."""
    return relevance.export_labels(turn_ids=None if turn is None else [turn])


@router.post("/labels", response={200: ImportedOut, 409: ErrorBody, **ERRS}, summary="Import relevance labels")
def post_labels(request: HttpRequest, payload: LabelsIn):
    """All or nothing: an unknown turn or fact (404), a fact of a person who was not present at the turn, a
    private fact for a group turn or a repeated entry (409) refuses the import — each entry named in
    `errors` — and stores nothing. Stored as the token's labels, journalled."""
    try:
        entries = [{"turn": e.turn, "fact": e.fact, "relevant": e.relevant} for e in payload.labels]
        counts = relevance.import_labels(entries, user=_user(request))
    except relevance.LabelError as exc:
        return _label_error(exc)
    return {**counts, "turns_labelled": relevance.progress().turns}


@router.post("/turns/{turn_id}/labels", response={200: ImportedOut, 409: ErrorBody, **ERRS},
             summary="Label one fact of a turn")
def post_turn_label(request: HttpRequest, payload: OneLabelIn, turn_id: int = Path(..., ge=1, le=MAX_ID)):
    """`relevant`: true / false, or null to remove the label. 404 for an unknown turn or fact, 409 for a fact
    of a person who was not present (or that the stream may not show); nothing stored then."""
    before = relevance.turn_labels(turn_id).get(payload.fact)
    try:
        after = relevance.set_label(turn_id=turn_id, fact_id=payload.fact, relevant=payload.relevant,
                                    user=_user(request))
    except relevance.LabelError as exc:
        return _label_error(exc)
    changed = (before is None) != (after is None) or (before is not None and after is not None
                                                       and before.relevant != after.relevant)
    created = before is None and after is not None
    return {"created": int(created), "updated": int(changed and not created), "unchanged": int(not changed),
            "turns_labelled": relevance.progress().turns}


# --- turns -----------------------------------------------------------------------------------


@router.get("/turns", response={200: TurnListOut, **ERRS}, summary="Recorded turns")
def get_turns(
    request: HttpRequest,
    stream: int | None = Query(None, ge=1, le=MAX_ID),
    person: int | None = Query(None, ge=1, le=MAX_ID, description="present at the turn"),
    fact: int | None = Query(None, ge=1, le=MAX_ID, description="turns whose prompt held this fact"),
    since: int | None = Query(None, ge=0, le=MAX_ID, description="epoch ms, inclusive"),
    until: int | None = Query(None, ge=0, le=MAX_ID, description="epoch ms, exclusive"),
    labelled: bool | None = Query(None),
    limit: int = Query(50, ge=1, le=500),
    offset: int = Query(0, ge=0, le=10**9),
):
    """Newest first; `labels` = how many relevance labels each turn has."""
    rows = inspection.turn_rows(stream=stream, person=person, fact=fact, since=since, until=until, labelled=labelled)
    count = rows.count()
    page = list(rows[offset:offset + limit])
    inspection.decorate_turns(page)
    return {
        "count": count,
        "turns": [
            {"id": t.pk, "stream": t.stream_id, "stream_kind": t.stream_kind, "speaker": t.speaker_id, "at": t.at,
             "text": t.text, "confirmed": t.confirmed_at is not None, "prompt_fact_ids": t.prompt_fact_ids or [],
             "held_back_fact_ids": t.held_back_fact_ids or [], "labels": t.label_count}
            for t in page
        ],
        "turns_labelled": relevance.progress().turns,
    }


@router.get("/turns/{turn_id}", response={200: TurnInspectionOut, **ERRS}, summary="One turn with its inspector data")
def get_turn(request: HttpRequest, turn_id: int = Path(..., ge=1, le=MAX_ID)):
    """The conversation the turn read (each message's weight as a query), every candidate with its score terms,
    verdict and label, the prompt, what forgetting, the gate and visibility held back, the episodes and the
    profile in force — as the console's turn inspector shows them."""
    turn = Turn.objects.filter(pk=turn_id).first()
    if turn is None:
        return Status(404, {"detail": f"turn {turn_id} does not exist", "errors": []})
    return inspection.as_json(inspection.inspect_turn(turn))


# --- one real example of every body (demo memory), for /api/docs (config.api; tests/api/test_openapi.py) ---

_SPEC = {"kind": "int", "min": 1.0, "max": 20.0, "legacy": 6, "label": "进提示词的事实条数上限", "configured": 6}
_PROFILE = {"name": "少而准", "params": {"fact_recall_limit": 4, "dense_cosine_floor": 0.35},
            "created_at": 1796383932981, "last_applied_at": None, "active": False, "builtin": False}
_PARAMS = {"fact_recall_limit": 4, "dense_cosine_floor": 0.35}
_TURN_ROW = {"id": 12, "stream": 2, "stream_kind": "direct", "speaker": 3, "at": 1796383932981,
             "text": "我生日快到了，你还记得是哪天吗？", "confirmed": True, "prompt_fact_ids": [34, 35],
             "held_back_fact_ids": [], "labels": 1}
EXAMPLES: dict[type, Any] = {
    ErrorBody: {"detail": "参数 dense_cosine_floor 越界：应在 [-1.0, 1.0] 之间",
                "errors": [{"field": "body.params.dense_cosine_floor", "message": "应在 [-1.0, 1.0] 之间"}]},
    ParamSpecOut: _SPEC,
    ProfileOut: _PROFILE,
    ActiveOut: {"profile": "default", "overrides": {}},
    StateOut: {"whitelist": {"fact_recall_limit": _SPEC}, "active": {"profile": "default", "overrides": {}},
               "profiles": [_PROFILE]},
    ProfileIn: {"name": "少而准", "params": _PARAMS},
    ApplyIn: {"name": "少而准"},
    AppliedOut: {"profile": "少而准", "params": _PARAMS, "revision": 1},
    DeletedOut: {"deleted": True, "active": "default", "profiles": ["default", "reference"]},
    ExportOut: {"profile": "少而准", "params": _PARAMS, "exported_at": "2026-12-04T11:32:12Z"},
    TargetIn: {"profile": "少而准"},
    EvaluateIn: {"profile": "少而准", "max_turns": 200},
    CompareIn: {"a": {"profile": "default"}, "b": {"params": _PARAMS}, "max_turns": 200},
    JobOut: {"job_id": 9, "kind": "compare", "status": "done", "progress": 3, "total": 3, "percent": 100, "error": "",
             "params": {"max_turns": 200}, "result": {"sample_count": 3, "changed_turns": 1}},
    FitIn: {"budget": 40, "k": 5},
    FitRefusedOut: {"detail": "标注太少，拟合不出可信的结果：需要至少 30 个回合各有至少一条「相关」标注（20 个用来挑选参数，"
                              "10 个留作检验），现在只有 3 个。", "needed": 30, "have": 3,
                    "errors": [{"field": "labels", "message": "标注太少", "type": "too_few_labels"}]},
    ApplyFitIn: {"name": "按标注拟合"},
    LabelEntryIn: {"turn": 12, "fact": 34, "relevant": True},
    LabelsIn: {"labels": [{"turn": 12, "fact": 34, "relevant": True}, {"turn": 12, "fact": 35, "relevant": False}]},
    OneLabelIn: {"fact": 34, "relevant": True},
    LabelOut: {"turn": 12, "fact": 34, "relevant": True, "added": False, "user": "reviewer", "at": 1796383932981},
    LabelsOut: {"labels": [{"turn": 12, "fact": 34, "relevant": True, "added": False, "user": "reviewer",
                            "at": 1796383932981}], "exported_at": "2026-12-04T11:32:12Z"},
    ImportedOut: {"created": 2, "updated": 0, "unchanged": 0, "turns_labelled": 37},
    TurnRowOut: _TURN_ROW,
    TurnListOut: {"count": 1, "turns": [_TURN_ROW], "turns_labelled": 37},
    TurnInspectionOut: {
        "turn": {"id": 12, "stream": 2, "stream_kind": "direct", "speaker": 3, "speaker_name": "小林", "at": 1796383932981,
                 "confirmed_at": 1796383934981, "text": "我生日快到了，你还记得是哪天吗？", "impression": "",
                 "present": [{"id": 3, "name": "小林"}], "labels": 1},
        "conversation": [{"message": 40, "role": "user", "sender": "小林", "at": 1796383900000, "content": "最近好忙",
                          "position": 1, "lexical_weight": 0.84, "dense_weight": 0.84}],
        "candidates": [{"fact": 34, "person": 3, "content": "小林的生日是3月14日", "rank": 1, "verdict": "prompt",
                        "reason": "第 1 名；提示词最多放 6 条事实。", "state": "active",
                        "terms": {"factId": 34, "bm25": 3.2, "lexical": 0.76, "coverage": 0.8, "rarest": True,
                                  "cosine": 0.61, "relevance": 0.82, "calibrated": 1.0, "retention": 0.92, "prior": 0.018,
                                  "score": 1.018, "eligible": True, "active": True, "source": "lexical", "margin": 0.35,
                                  "gate": "leads_dense"},
                        "label": {"relevant": True, "added": False, "user": "reviewer", "at": 1796383990000}}],
        "prompt": [34], "held_back": {"forgetting": [], "gate": [], "visibility": 0}, "added": [],
        "episodes": [{"id": 5, "summary": "小林聊到生日和搬家", "ended_at": 1796300000000}],
        "profile": {"name": "default", "params": {}, "limit": 6, "used_vector": True}, "drift": [],
    },
}
