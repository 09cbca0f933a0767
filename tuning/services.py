"""Retrieval profiles: stored parameter sets, applied to every process through :mod:`memory.overrides`.

This module keeps the profiles (the ``tuning_profiles`` table: save, list, apply,
roll back, delete, export) and validation with messages that name the parameter.
The live state — which profile is active, the per-process cache of its overrides,
:func:`memory.overrides.tuned` and :func:`memory.overrides.overrides_scope` — lives
in :mod:`memory.overrides`, which ranking and recall read; applying a profile here
writes it there (:func:`memory.overrides.set_active`) and primes this process's cache.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from memory import overrides
from memory.engine.tuning import WHITELIST, TuningError
from memory.overrides import (
    DEFAULT_PROFILE_NAME,
    REFERENCE_PROFILE_NAME,
    builtin_params,
)
from memory.services import emit_event
from tuning.models import RetrievalProfile, TuningOperation

logger = logging.getLogger(__name__)

PROFILE_NAME_MAX = 100


class ProfileError(ValueError):
    """A profile operation was refused (bad name, unknown profile, invalid params).

    ``param`` names the offending parameter when the refusal comes from validation.
    ``status`` is the HTTP status the API maps it to.
    """

    def __init__(self, message: str, *, param: str | None = None, status: int = 422):
        super().__init__(message)
        self.param = param
        self.status = status


def stored_profile_params(name: str) -> dict[str, Any] | None:
    """A stored profile's validated params (None: no such row; ``ValueError``: no longer valid).

    Registered with :func:`memory.overrides.register_profile_loader` by the app config.
    """
    params = RetrievalProfile.objects.filter(name=name).values_list("params", flat=True).first()
    return None if params is None else overrides.validate(params or {})


# --------------------------------------------------------------------------- #
# Profiles
# --------------------------------------------------------------------------- #


def _now_ms() -> int:
    return int(time.time() * 1000)


def _emit(kind: str, payload: dict[str, Any], at: int) -> None:
    emit_event(kind, payload, at=at, stage="tuning")


def _journal(op: str, *, profile: str, user: str, at: int, **detail: Any) -> None:
    """One row of the tuning journal (inside the caller's transaction)."""
    TuningOperation.objects.create(at=at, user=(user or "")[:150], op=op, profile=profile[:100], detail=detail)


def param_refusal(param: str, value: Any) -> str:
    """Why ``value`` is refused for ``param``, in the interface language (the engine says it in Chinese only)."""
    spec = WHITELIST.get(param)
    if spec is None:
        return _("参数 %(name)s 不在调优白名单") % {"name": param}
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _("参数 %(name)s 需要数值") % {"name": param}
    if spec.kind == "int" and not isinstance(value, int):
        return _("参数 %(name)s 需要整数（3 或 3.0 可以，3.5 不行）") % {"name": param}
    return _("参数 %(name)s 越界：取值范围 [%(min)s, %(max)s]") % {"name": param, "min": spec.min, "max": spec.max}


def _whole_number(param: str, value: Any) -> Any:
    """``27.0`` for an integer parameter is the integer 27: JSON has one number type, JSON Schema's ``integer``
    admits ``27.0`` and the API's other integer fields take it. ``27.5`` stays a float and is refused."""
    spec = WHITELIST.get(param)
    if spec is not None and spec.kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def validate_params(params: Any) -> dict[str, Any]:
    """Validate raw (JSON-decoded) parameter values; :class:`ProfileError` names the parameter.

    JSON has one number type: ``3`` and ``3.0`` are valid for integer parameters (stored as
    the integer 3), ``1.5`` is refused for them ("需要整数"); the engine's validator, given the
    normalised values, stays the reference's exact one. Booleans are refused.
    """
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ProfileError(_("params 需要是对象（参数名 → 数值）"))
    params = {name: _whole_number(name, value) for name, value in params.items()}
    try:
        return overrides.validate(params)
    except TuningError as exc:
        param = getattr(exc, "param", None)
        raise ProfileError(param_refusal(param, params.get(param)) if param else str(exc), param=param) from exc
    except ValueError as exc:
        raise ProfileError(str(exc)) from exc


def _given_name(name: Any, empty: str) -> str:
    """A profile name as given, stripped; :class:`ProfileError` (``empty``) when blank, or when it
    holds a NUL character (PostgreSQL cannot store or even look one up; the console posts raw text)."""
    if not isinstance(name, str) or not name.strip():
        raise ProfileError(empty, param="name")
    if "\x00" in name:
        raise ProfileError(_("参数方案名称不能含有 NUL 字符（\\x00）"), param="name")
    return name.strip()


def clean_profile_name(name: Any) -> str:
    cleaned = _given_name(name, _("参数方案名称为空，不可保存"))
    if builtin_params(cleaned) is not None:
        raise ProfileError(_("%(name)s 是内置参数方案，不可保存") % {"name": cleaned}, param="name")
    if len(cleaned) > PROFILE_NAME_MAX:
        raise ProfileError(_("参数方案名称超过 %(n)s 个字符") % {"n": PROFILE_NAME_MAX}, param="name")
    return cleaned


@dataclass(frozen=True)
class ProfileRow:
    name: str
    params: dict[str, Any]
    created_at: int | None
    last_applied_at: int | None
    active: bool = False
    builtin: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": dict(self.params),
            "createdAt": self.created_at,
            "lastAppliedAt": self.last_applied_at,
            "active": self.active,
            "builtin": self.builtin,
        }


def active_profile_name() -> str:
    """The active profile read from the database now (not cached); a vanished row → default."""
    name = overrides.active_profile_setting()
    if builtin_params(name) is not None:
        return name
    if not RetrievalProfile.objects.filter(name=name).exists():
        return DEFAULT_PROFILE_NAME
    return name


def list_profiles() -> list[ProfileRow]:
    """Stored profiles ordered by name, with the built-in ``default`` first."""
    active = active_profile_name()
    rows = [
        ProfileRow(
            name=DEFAULT_PROFILE_NAME,
            params={},
            created_at=None,
            last_applied_at=None,
            active=active == DEFAULT_PROFILE_NAME,
            builtin=True,
        ),
        ProfileRow(
            name=REFERENCE_PROFILE_NAME,
            params=builtin_params(REFERENCE_PROFILE_NAME) or {},
            created_at=None,
            last_applied_at=None,
            active=active == REFERENCE_PROFILE_NAME,
            builtin=True,
        ),
    ]
    for p in RetrievalProfile.objects.exclude(name=REFERENCE_PROFILE_NAME).order_by("name"):
        rows.append(
            ProfileRow(
                name=p.name,
                params=dict(p.params or {}),
                created_at=p.created_at,
                last_applied_at=p.last_applied_at,
                active=p.name == active,
            )
        )
    return rows


def load_profile_params(name: str) -> dict[str, Any] | None:
    """``default`` → ``{}``; ``reference`` → its built-in params; unknown → None; stored params re-validated."""
    builtin = builtin_params(name)
    if builtin is not None:
        return builtin
    params = RetrievalProfile.objects.filter(name=name).values_list("params", flat=True).first()
    if params is None:
        return None
    return validate_params(params)


def save_profile(name: Any, params: Any, *, at: int | None = None, user: str = "", source: str = "") -> ProfileRow:
    """Create or update a profile (UPSERT: an existing row keeps created_at and last_applied_at).

    Saving does not change the live overrides, even when the saved profile is the active
    one: the new values take effect on the next apply (as in the reference).
    """
    cleaned = clean_profile_name(name)
    values = validate_params(params)
    at = _now_ms() if at is None else at
    with transaction.atomic():
        before = RetrievalProfile.objects.filter(name=cleaned).values_list("params", flat=True).first()
        updated = RetrievalProfile.objects.filter(name=cleaned).update(params=values)
        if not updated:
            RetrievalProfile.objects.create(name=cleaned, params=values, created_at=at, last_applied_at=None)
        row = RetrievalProfile.objects.get(name=cleaned)
        _journal(TuningOperation.Op.SAVE, profile=cleaned, user=user, at=at, params=values, prev=before,
                 **({"source": source} if source else {}))
    return ProfileRow(
        name=row.name,
        params=dict(row.params),
        created_at=row.created_at,
        last_applied_at=row.last_applied_at,
        active=active_profile_name() == row.name,
    )


def apply_profile(name: Any, *, at: int | None = None, user: str = "", op: str = TuningOperation.Op.APPLY,
                  source: str = "") -> dict[str, Any]:
    """Make ``name`` the active profile in every process; returns ``{profile, params, revision}``.

    Journalled (``op``: apply, or rollback) with the profile it replaced. A built-in profile's old
    name (``seed``) applies it under its name now (``reference``)."""
    name = overrides.canonical_profile_name(_given_name(name, _("参数方案名称为空")))
    at = _now_ms() if at is None else at
    with transaction.atomic():
        replaced = active_profile_name()
        builtin = builtin_params(name)
        if builtin is not None:
            params: dict[str, Any] = builtin
        else:
            row = RetrievalProfile.objects.select_for_update().filter(name=name).first()
            if row is None:
                raise ProfileError(_("参数方案「%(name)s」不存在") % {"name": name}, param="name", status=404)
            params = validate_params(row.params or {})
            RetrievalProfile.objects.filter(name=name).update(last_applied_at=at)
        revision = overrides.set_active(name)
        _emit("retrieval_profile_applied", {"profile": name, "params": len(params)}, at)
        _journal(op, profile=name, user=user, at=at, params=params, prev=replaced,
                 **({"source": source} if source else {}))
    overrides.prime_cache(revision, name, params)
    return {"profile": name, "params": dict(params), "revision": revision}


def rollback_to_default(*, at: int | None = None, user: str = "") -> dict[str, Any]:
    return apply_profile(DEFAULT_PROFILE_NAME, at=at, user=user, op=TuningOperation.Op.ROLLBACK)


def delete_profile(name: Any, *, at: int | None = None, user: str = "") -> bool:
    """Delete a stored profile; deleting the active one falls back to ``default``.

    Unknown names are silent (returns False); ``default`` is refused.
    """
    name = _given_name(name, _("参数方案名称为空"))
    if builtin_params(name) is not None:
        raise ProfileError(_("%(name)s 是内置参数方案，不可删除") % {"name": name}, param="name")
    at = _now_ms() if at is None else at
    fell_back = False
    with transaction.atomic():
        was_active = active_profile_name() == name  # checked before deleting
        before = RetrievalProfile.objects.filter(name=name).values_list("params", flat=True).first()
        deleted, _by_model = RetrievalProfile.objects.filter(name=name).delete()
        if deleted:
            _journal(TuningOperation.Op.DELETE, profile=name, user=user, at=at, prev=before, was_active=was_active)
        if was_active:
            revision = overrides.set_active(DEFAULT_PROFILE_NAME)
            _emit("retrieval_profile_applied", {"profile": DEFAULT_PROFILE_NAME, "params": 0, "reason": "deleted"}, at)
            fell_back = True
    if fell_back:
        overrides.prime_cache(revision, DEFAULT_PROFILE_NAME, {})
    return bool(deleted)


def export_profile(name: str) -> dict[str, Any]:
    """``{profile, params, exported_at}`` (ISO-8601 UTC); unknown → :class:`ProfileError` (404)."""
    params = load_profile_params(name)
    if params is None:
        raise ProfileError(_("参数方案「%(name)s」不存在") % {"name": name}, param="name", status=404)
    name = overrides.canonical_profile_name(name)
    return {
        "profile": name,
        "params": params,
        "exported_at": datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    }


def bootstrap_active() -> str:
    """Load the active profile now (startup banner); returns its name."""
    overrides.reset_cache()
    return overrides.cached_active_profile()
