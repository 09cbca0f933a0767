"""Retrieval profiles and the live overrides every process reads.

The active profile is a name in the ``meta`` table (``retrieval_tuning_active_profile``,
a JSON string); ``retrieval_tuning_revision`` (a JSON int) is bumped by every apply,
rollback and deletion of the active profile. Each process caches
``(revision, overrides)`` and re-reads the revision from the database at most once
per second (monotonic clock), so a profile applied in the web process reaches every
Celery worker within a second, without restart, and survives restarts (the state
lives in the database, not in process memory).

``active_overrides()`` is cheap: between refreshes it is a dict lookup; a refresh is
one primary-key SELECT of a tiny row, followed by two more only when the revision
changed. It is safe outside a request (Celery tasks, management commands) and
never raises: a database that is not migrated yet reads as "no overrides".

Evaluations never touch the live state: they pass their parameter set explicitly to
the replay, and additionally run inside :func:`overrides_scope` so any code that
reads :func:`tuned` during the replay sees the evaluated set (a context variable, so
concurrent threads of the same process are unaffected).
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)

DEFAULT_PROFILE_NAME = "default"
#: Built-in profiles besides ``default``: "seed" ranks with the seed's ``blend_score``, so a
#: deployment can compare both rankings on its own turns (trace replay, what-if).
SEED_PROFILE_NAME = "seed"


def _builtin_params(name: str) -> dict[str, Any] | None:
    from memory.engine.tuning import BUILTIN_PROFILES

    if name == DEFAULT_PROFILE_NAME:
        return {}
    values = BUILTIN_PROFILES.get(name)
    return None if values is None else _validate(values)
ACTIVE_PROFILE_META_KEY = "retrieval_tuning_active_profile"
REVISION_META_KEY = "retrieval_tuning_revision"
REFRESH_INTERVAL_S = 1.0
PROFILE_NAME_MAX = 100


class ProfileError(ValueError):
    """A profile operation was refused (bad name, unknown profile, invalid params).

    ``param`` names the offending parameter when the refusal comes from validation.
    ``status`` is the HTTP status the API maps it to.
    """

    def __init__(self, message: str, *, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.param = param
        self.status = status


# --------------------------------------------------------------------------- #
# Meta helpers (own, tiny: this module must not depend on memory.services import order)
# --------------------------------------------------------------------------- #


def _meta_read(key: str, default: Any = None) -> Any:
    from memory.models import Meta

    raw = Meta.objects.filter(key=key).values_list("value", flat=True).first()
    if raw is None:
        return default
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return default


def _meta_write(key: str, value: Any) -> None:
    from memory.models import Meta

    Meta.objects.update_or_create(key=key, defaults={"value": json.dumps(value, ensure_ascii=False)})


def _read_revision() -> int:
    value = _meta_read(REVISION_META_KEY, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _bump_revision() -> int:
    """Increment the revision inside the caller's transaction and return the new value.

    The row is read under a row lock (PostgreSQL: two concurrent applies would otherwise
    both read N and both write N + 1, and a process that cached N + 1 would never see the
    second; SQLite's IMMEDIATE transactions serialise writers anyway).
    """
    from django.db import transaction

    from memory.models import Meta

    with transaction.atomic():
        # the row exists before it is locked (two first bumps would otherwise both start from 0)
        Meta.objects.bulk_create([Meta(key=REVISION_META_KEY, value="0")], ignore_conflicts=True)
        raw = Meta.objects.select_for_update().filter(key=REVISION_META_KEY).values_list("value", flat=True).first()
        value = json.loads(raw) if raw is not None else 0
        revision = (value if isinstance(value, int) and not isinstance(value, bool) else 0) + 1
        Meta.objects.update_or_create(key=REVISION_META_KEY, defaults={"value": json.dumps(revision)})
    return revision


# --------------------------------------------------------------------------- #
# Live overrides: per-process cache refreshed from the database once a second
# --------------------------------------------------------------------------- #


@dataclass
class _Cache:
    revision: int | None = None  # None = never loaded
    overrides: dict[str, Any] | None = None
    profile: str = DEFAULT_PROFILE_NAME
    checked_at: float = float("-inf")


_cache = _Cache()
_lock = threading.Lock()
_scope: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("tuning_overrides_scope", default=None)


def _validate(params: Mapping[str, Any]) -> dict[str, Any]:
    from memory.engine.tuning import validate_overrides

    return dict(validate_overrides(dict(params)))


def _load_active() -> tuple[str, dict[str, Any]]:
    """The active profile's name and validated params, read from the database."""
    from tuning.models import RetrievalProfile

    name = _meta_read(ACTIVE_PROFILE_META_KEY, DEFAULT_PROFILE_NAME)
    if not isinstance(name, str) or not name or name == DEFAULT_PROFILE_NAME:
        return DEFAULT_PROFILE_NAME, {}
    builtin = _builtin_params(name)
    if builtin is not None:
        return name, builtin
    params = RetrievalProfile.objects.filter(name=name).values_list("params", flat=True).first()
    if params is None:  # the row vanished: default
        return DEFAULT_PROFILE_NAME, {}
    try:
        return name, _validate(params or {})
    except ValueError:
        logger.warning("stored retrieval profile %r no longer validates; using default", name)
        return DEFAULT_PROFILE_NAME, {}


def _refresh(now: float) -> None:
    """Re-read the revision (one query); reload the profile only when it changed."""
    try:
        revision = _read_revision()
        if revision != _cache.revision or _cache.overrides is None:
            profile, overrides = _load_active()
            _cache.revision, _cache.profile, _cache.overrides = revision, profile, overrides
    except Exception:  # noqa: BLE001 — the ranking hot path must never fail because of tuning
        # Not migrated yet, a transient lock, …: keep what we had (or nothing).
        logger.warning("retrieval overrides refresh failed", exc_info=True)
        if _cache.overrides is None:
            _cache.overrides = {}
    _cache.checked_at = now


def _current() -> tuple[str, dict[str, Any]]:
    now = time.monotonic()
    if now - _cache.checked_at >= REFRESH_INTERVAL_S or _cache.overrides is None:
        with _lock:
            if now - _cache.checked_at >= REFRESH_INTERVAL_S or _cache.overrides is None:
                _refresh(now)
    return _cache.profile, _cache.overrides or {}


def active_overrides() -> dict[str, Any]:
    """The overrides in force for this process (a copy; never raises).

    Inside :func:`overrides_scope` the scoped set is returned instead.
    """
    scoped = _scope.get()
    if scoped is not None:
        return dict(scoped)
    return dict(_current()[1])


def tuned(name: str, default: Any = None) -> Any:
    """The override of parameter ``name`` if one is in force, else ``default``."""
    scoped = _scope.get()
    if scoped is not None:
        return scoped.get(name, default)
    return _current()[1].get(name, default)


def cached_active_profile() -> str:
    """The active profile name as this process currently sees it (cached like the overrides)."""
    return _current()[0]


@contextlib.contextmanager
def overrides_scope(overrides: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Within the block, :func:`active_overrides` / :func:`tuned` of this context return ``overrides``."""
    value = dict(overrides)
    token = _scope.set(value)
    try:
        yield value
    finally:
        _scope.reset(token)


def reset_cache() -> None:
    """Forget the cached overrides (tests; the next read goes to the database)."""
    with _lock:
        _cache.revision, _cache.overrides, _cache.profile = None, None, DEFAULT_PROFILE_NAME
        _cache.checked_at = float("-inf")


def _prime_cache(revision: int, profile: str, overrides: dict[str, Any]) -> None:
    """After a write in this process, see it immediately (others within a second)."""
    with _lock:
        _cache.revision, _cache.profile, _cache.overrides = revision, profile, dict(overrides)
        _cache.checked_at = time.monotonic()


# --------------------------------------------------------------------------- #
# Profiles
# --------------------------------------------------------------------------- #


def _now_ms() -> int:
    return int(time.time() * 1000)


def _emit(kind: str, payload: dict[str, Any], at: int) -> None:
    from memory.services import emit_event

    emit_event(kind, payload, at=at, stage="tuning")


def validate_params(params: Any) -> dict[str, Any]:
    """Validate raw (JSON-decoded) parameter values; :class:`ProfileError` names the parameter.

    JSON has one number type, so the decoded Python type decides: ``3`` is an int and is
    valid for integer parameters; ``3.0`` and ``1.5`` are floats and are refused for
    them ("需要整数"), exactly like the reference validator. Booleans are refused.
    """
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ProfileError("params 需要是对象（参数名 → 数值）")
    from memory.engine.tuning import TuningError

    try:
        return _validate(params)
    except TuningError as exc:
        raise ProfileError(str(exc), param=getattr(exc, "param", None)) from exc
    except ValueError as exc:
        raise ProfileError(str(exc)) from exc


def clean_profile_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ProfileError("profile 名称为空，不可保存", param="name")
    cleaned = name.strip()
    if _builtin_params(cleaned) is not None:
        raise ProfileError(f"{cleaned} 是内置 profile，不可保存", param="name")
    if len(cleaned) > PROFILE_NAME_MAX:
        raise ProfileError(f"profile 名称超过 {PROFILE_NAME_MAX} 字符", param="name")
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
    from tuning.models import RetrievalProfile

    name = _meta_read(ACTIVE_PROFILE_META_KEY, DEFAULT_PROFILE_NAME)
    if not isinstance(name, str) or not name or name == DEFAULT_PROFILE_NAME:
        return DEFAULT_PROFILE_NAME
    if _builtin_params(name) is not None:
        return name
    if not RetrievalProfile.objects.filter(name=name).exists():
        return DEFAULT_PROFILE_NAME
    return name


def list_profiles() -> list[ProfileRow]:
    """Stored profiles ordered by name, with the built-in ``default`` first."""
    from tuning.models import RetrievalProfile

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
            name=SEED_PROFILE_NAME,
            params=_builtin_params(SEED_PROFILE_NAME) or {},
            created_at=None,
            last_applied_at=None,
            active=active == SEED_PROFILE_NAME,
            builtin=True,
        ),
    ]
    for p in RetrievalProfile.objects.exclude(name=SEED_PROFILE_NAME).order_by("name"):
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
    """``default`` → ``{}``; ``seed`` → its built-in params; unknown → None; stored params re-validated."""
    from tuning.models import RetrievalProfile

    builtin = _builtin_params(name)
    if builtin is not None:
        return builtin
    params = RetrievalProfile.objects.filter(name=name).values_list("params", flat=True).first()
    if params is None:
        return None
    return validate_params(params)


def save_profile(name: Any, params: Any, *, at: int | None = None) -> ProfileRow:
    """Create or update a profile (UPSERT: an existing row keeps created_at and last_applied_at).

    Saving does not change the live overrides, even when the saved profile is the active
    one: the new values take effect on the next apply (as in the reference).
    """
    from tuning.models import RetrievalProfile

    cleaned = clean_profile_name(name)
    values = validate_params(params)
    at = _now_ms() if at is None else at
    with transaction.atomic():
        updated = RetrievalProfile.objects.filter(name=cleaned).update(params=values)
        if not updated:
            RetrievalProfile.objects.create(name=cleaned, params=values, created_at=at, last_applied_at=None)
        row = RetrievalProfile.objects.get(name=cleaned)
    return ProfileRow(
        name=row.name,
        params=dict(row.params),
        created_at=row.created_at,
        last_applied_at=row.last_applied_at,
        active=active_profile_name() == row.name,
    )


def apply_profile(name: Any, *, at: int | None = None) -> dict[str, Any]:
    """Make ``name`` the active profile in every process; returns ``{profile, params, revision}``."""
    from tuning.models import RetrievalProfile

    if not isinstance(name, str) or not name.strip():
        raise ProfileError("profile 名称为空", param="name")
    name = name.strip()
    at = _now_ms() if at is None else at
    with transaction.atomic():
        builtin = _builtin_params(name)
        if builtin is not None:
            params: dict[str, Any] = builtin
        else:
            row = RetrievalProfile.objects.select_for_update().filter(name=name).first()
            if row is None:
                raise ProfileError(f"profile「{name}」不存在", param="name", status=404)
            params = validate_params(row.params or {})
            RetrievalProfile.objects.filter(name=name).update(last_applied_at=at)
        _meta_write(ACTIVE_PROFILE_META_KEY, name)
        revision = _bump_revision()
        _emit("retrieval_profile_applied", {"profile": name, "params": len(params)}, at)
    _prime_cache(revision, name, params)
    return {"profile": name, "params": dict(params), "revision": revision}


def rollback_to_default(*, at: int | None = None) -> dict[str, Any]:
    return apply_profile(DEFAULT_PROFILE_NAME, at=at)


def delete_profile(name: Any, *, at: int | None = None) -> bool:
    """Delete a stored profile; deleting the active one falls back to ``default``.

    Unknown names are silent (returns False); ``default`` is refused.
    """
    from tuning.models import RetrievalProfile

    if not isinstance(name, str) or not name.strip():
        raise ProfileError("profile 名称为空", param="name")
    name = name.strip()
    if _builtin_params(name) is not None:
        raise ProfileError(f"{name} 是内置 profile，不可删除", param="name")
    at = _now_ms() if at is None else at
    fell_back = False
    with transaction.atomic():
        was_active = active_profile_name() == name  # checked before deleting
        deleted, _ = RetrievalProfile.objects.filter(name=name).delete()
        if was_active:
            _meta_write(ACTIVE_PROFILE_META_KEY, DEFAULT_PROFILE_NAME)
            revision = _bump_revision()
            _emit("retrieval_profile_applied", {"profile": DEFAULT_PROFILE_NAME, "params": 0, "reason": "deleted"}, at)
            fell_back = True
    if fell_back:
        _prime_cache(revision, DEFAULT_PROFILE_NAME, {})
    return bool(deleted)


def export_profile(name: str) -> dict[str, Any]:
    """``{profile, params, exported_at}`` (ISO-8601 UTC); unknown → :class:`ProfileError` (404)."""
    params = load_profile_params(name)
    if params is None:
        raise ProfileError(f"profile「{name}」不存在", param="name", status=404)
    return {
        "profile": name,
        "params": params,
        "exported_at": datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    }


def bootstrap_active() -> str:
    """Load the active profile now (startup banner); returns its name."""
    reset_cache()
    return _current()[0]
