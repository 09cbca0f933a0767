"""Retrieval tuning over the JSON API: ``/api/v1/tuning/...`` (mounted by :mod:`config.api`).

Parameter values are taken **as JSON decoded them** (``dict[str, Any]``, never coerced):
``3`` is an integer and valid for ``ppr_hops``; ``3.0`` and ``1.5`` are floats and are
refused for integer parameters ("需要整数"), ``true`` is refused everywhere ("需要数值").
Integers are accepted for float parameters and stored as floats.

A refused parameter set is a 400 whose ``errors[0].field`` is ``body.params.<name>``;
an unknown profile is a 404. Evaluation and comparison run as background jobs: the
POST answers 202 with a job id, ``GET /tuning/jobs/{id}`` reports progress and, when
done, the report. Every route needs a token with the ``tuning`` scope (or ``admin``).
"""
from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest
from ninja import Field, Path, Router, Schema, Status
from pydantic import ConfigDict

from memory import recall
from memory.api.auth import BearerTokenAuth, api_user
from memory.api.schemas import MAX_ID, NOT_BLANK, WHITESPACE, JsonInt
from memory.engine.tuning import WHITELIST
from memory.models import Job
from tuning import evaluation, services
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


PARAMS_HELP = "whitelisted parameter → JSON number in its bounds; integer parameters need JSON integers (3, not 3.0)"
# A stored profile's name: not blank, and not the built-in "default" (after stripping).
PROFILE_NAME_RULES: dict[str, Any] = {
    "pattern": NOT_BLANK,
    "not": {"pattern": f"^[{WHITESPACE}]*default[{WHITESPACE}]*$"},
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


class EvaluateIn(TargetIn):
    max_turns: JsonInt = Field(evaluation.DEFAULT_MAX_TURNS, ge=1, le=evaluation.MAX_TURNS_LIMIT)


class CompareIn(_In):
    a: TargetIn
    b: TargetIn
    max_turns: JsonInt = Field(evaluation.DEFAULT_MAX_TURNS, ge=1, le=evaluation.MAX_TURNS_LIMIT)


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


# 401 without a valid token, 422 for a malformed request (config.api's handlers), 400 for a
# refused parameter set, 404 for an unknown profile or job.
ERRS = {400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 404: ErrorBody, 422: ErrorBody}


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
        row = services.save_profile(payload.name, payload.params)
    except ProfileError as exc:
        return _error(exc)
    return Status(201, _profile_out(row))


@router.delete("/profiles/{name}", response={200: DeletedOut, **ERRS}, summary="Delete a profile")
def delete_profile(request: HttpRequest, name: ProfileName):
    """Deleting the active profile falls back to `default`; an unknown name answers `deleted: false`."""
    try:
        deleted = services.delete_profile(name)
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
        return services.apply_profile(payload.name)
    except ProfileError as exc:
        return _error(exc)


@router.post("/rollback", response={200: AppliedOut, 401: ErrorBody, 403: ErrorBody}, summary="Roll back to the built-in default")
def post_rollback(request: HttpRequest):
    return services.rollback_to_default()


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


@router.post("/evaluate", response={202: JobOut, **ERRS}, summary="Evaluate a parameter set by trace replay")
def post_evaluate(request: HttpRequest, payload: EvaluateIn):
    """`profile` → its parameters; else `params`; neither → the active profile. Answers a job to poll."""
    try:
        target = _target(payload)
    except ProfileError as exc:
        return _error(exc)
    job = evaluation.submit_evaluation(target, max_turns=payload.max_turns, user=_user(request))
    job.refresh_from_db()
    return Status(202, job_out(job))


@router.post("/compare", response={202: JobOut, **ERRS}, summary="What-if: compare two parameter sets")
def post_compare(request: HttpRequest, payload: CompareIn):
    try:
        a, b = _target(payload.a), _target(payload.b)
    except ProfileError as exc:
        return _error(exc)
    job = evaluation.submit_comparison(a, b, max_turns=payload.max_turns, user=_user(request))
    job.refresh_from_db()
    return Status(202, job_out(job))


@router.get("/jobs/{job_id}", response={200: JobOut, **ERRS}, summary="An evaluation or comparison job")
def get_job(request: HttpRequest, job_id: int = Path(..., ge=1, le=MAX_ID)):
    job = Job.objects.filter(pk=job_id, kind__in=("evaluate", "compare")).first()
    if job is None:
        return Status(404, {"detail": f"tuning job {job_id} does not exist", "errors": []})
    return job_out(job)


# --- one real example of every body (demo memory), for /api/docs (config.api; tests/api/test_openapi.py) ---

_SPEC = {"kind": "int", "min": 1.0, "max": 20.0, "legacy": 6, "label": "进提示词的事实条数上限", "configured": 6}
_PROFILE = {"name": "少而准", "params": {"fact_recall_limit": 4, "dense_cosine_floor": 0.35},
            "created_at": 1796383932981, "last_applied_at": None, "active": False, "builtin": False}
_PARAMS = {"fact_recall_limit": 4, "dense_cosine_floor": 0.35}
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
    DeletedOut: {"deleted": True, "active": "default", "profiles": ["default", "seed"]},
    ExportOut: {"profile": "少而准", "params": _PARAMS, "exported_at": "2026-12-04T11:32:12Z"},
    TargetIn: {"profile": "少而准"},
    EvaluateIn: {"profile": "少而准", "max_turns": 200},
    CompareIn: {"a": {"profile": "default"}, "b": {"params": _PARAMS}, "max_turns": 200},
    JobOut: {"job_id": 9, "kind": "compare", "status": "done", "progress": 3, "total": 3, "percent": 100, "error": "",
             "params": {"max_turns": 200}, "result": {"sample_count": 3, "changed_turns": 1}},
}
