"""The live retrieval overrides every process reads (ranking, recall, the console).

The active profile is a name in the ``meta`` table (``retrieval_tuning_active_profile``,
a JSON string); ``retrieval_tuning_revision`` (a JSON int) is bumped by every apply,
rollback and deletion of the active profile. Each process caches
``(revision, overrides)`` and re-reads the revision from the database at most once
per second (monotonic clock), so a profile applied in the web process reaches every
Celery worker within a second, without restart, and survives restarts (the state
lives in the database, not in process memory).

:func:`active_overrides` is cheap: between refreshes it is a dict lookup; a refresh is
one primary-key SELECT of a tiny row, followed by more only when the revision changed.
It is safe outside a request (Celery tasks, management commands) and never raises: a
database that is not migrated yet reads as "no overrides".

The built-in profiles (``default`` = no overrides, ``reference``) are known here; stored
profiles belong to the tuning app, which registers how to read one
(:func:`register_profile_loader`, from its ``AppConfig.ready``) and writes the meta
keys when it applies a profile (:func:`set_active`). Without it only the built-ins exist.

Evaluations never touch the live state: they pass their parameter set explicitly to
the replay, and additionally run inside :func:`overrides_scope` so any code that
reads :func:`tuned` during the replay sees the evaluated set (a context variable, so
concurrent threads of the same process are unaffected).
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from memory.engine.tuning import BUILTIN_PROFILES, RENAMED_PROFILES, validate_overrides
from memory.meta import meta_get, meta_set
from memory.models import Meta

logger = logging.getLogger(__name__)

__all__ = [
    "ACTIVE_PROFILE_META_KEY",
    "DEFAULT_PROFILE_NAME",
    "REVISION_META_KEY",
    "REFERENCE_PROFILE_NAME",
    "active_overrides",
    "active_profile_setting",
    "builtin_params",
    "canonical_profile_name",
    "cached_active_profile",
    "in_force",
    "overrides_scope",
    "prime_cache",
    "read_revision",
    "register_profile_loader",
    "reset_cache",
    "set_active",
    "tuned",
    "validate",
]

DEFAULT_PROFILE_NAME = "default"
#: Built-in profiles besides ``default``: "reference" ranks with the reference ranking's
#: ``blend_score`` (docs/REFERENCE.md), so a deployment can compare both rankings on its own turns
#: (trace replay, what-if).
REFERENCE_PROFILE_NAME = "reference"
#: The name :func:`in_force` gives the parameter set of an :func:`overrides_scope` (an evaluation's).
SCOPED_PROFILE_NAME = "(evaluated)"
ACTIVE_PROFILE_META_KEY = "retrieval_tuning_active_profile"
REVISION_META_KEY = "retrieval_tuning_revision"
REFRESH_INTERVAL_S = 1.0

#: Reads a stored profile's validated params by name (None: no such profile; ValueError: no longer valid).
ProfileLoader = Callable[[str], "dict[str, Any] | None"]


def _no_stored_profiles(name: str) -> dict[str, Any] | None:
    return None


_load_stored: ProfileLoader = _no_stored_profiles


def register_profile_loader(loader: ProfileLoader) -> None:
    """Where stored profiles come from (the tuning app registers its model's reader)."""
    global _load_stored
    _load_stored = loader


def validate(params: Mapping[str, Any]) -> dict[str, Any]:
    """Validated overrides (:func:`memory.engine.tuning.validate_overrides`); raises ``TuningError``."""
    return dict(validate_overrides(dict(params)))


def canonical_profile_name(name: str) -> str:
    """``name``, or the name a built-in profile took when it was renamed (``seed`` → ``reference``)."""
    return RENAMED_PROFILES.get(name, name)


def builtin_params(name: str) -> dict[str, Any] | None:
    """``default`` → ``{}``, ``reference`` (or its old name) → its validated params, anything else → None."""
    name = canonical_profile_name(name)
    if name == DEFAULT_PROFILE_NAME:
        return {}
    values = BUILTIN_PROFILES.get(name)
    return None if values is None else validate(values)


def active_profile_setting() -> str:
    """The active profile's name as stored (not cached, not checked against the stored profiles)."""
    name = meta_get(ACTIVE_PROFILE_META_KEY, DEFAULT_PROFILE_NAME)
    return canonical_profile_name(name) if isinstance(name, str) and name else DEFAULT_PROFILE_NAME


def read_revision() -> int:
    value = meta_get(REVISION_META_KEY, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def set_active(name: str) -> int:
    """Store ``name`` as the active profile and bump the revision (inside the caller's transaction).

    Returns the new revision; every process sees the change within :data:`REFRESH_INTERVAL_S`.
    """
    meta_set(ACTIVE_PROFILE_META_KEY, name)
    return _bump_revision()


def _bump_revision() -> int:
    """Add one to the revision under a row lock and return it.

    PostgreSQL: two concurrent applies would otherwise both read N and both write N + 1,
    and a process that cached N + 1 would never see the second (SQLite's IMMEDIATE
    transactions serialise writers anyway). The row exists before it is locked, so two
    first bumps do not both start from 0.
    """
    with transaction.atomic():
        Meta.objects.bulk_create([Meta(key=REVISION_META_KEY, value="0")], ignore_conflicts=True)
        Meta.objects.select_for_update().filter(key=REVISION_META_KEY).values_list("value", flat=True).first()
        revision = read_revision() + 1
        meta_set(REVISION_META_KEY, revision)
    return revision


# --------------------------------------------------------------------------- #
# The per-process cache, refreshed from the database once a second
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


def _load_active() -> tuple[str, dict[str, Any]]:
    """The active profile's name and validated params, read from the database."""
    name = active_profile_setting()
    builtin = builtin_params(name)
    if builtin is not None:
        return name, builtin
    try:
        params = _load_stored(name)
    except ValueError:
        logger.warning("stored retrieval profile %r no longer validates; using default", name)
        return DEFAULT_PROFILE_NAME, {}
    if params is None:  # the row vanished: default
        return DEFAULT_PROFILE_NAME, {}
    return name, params


def _refresh(now: float) -> None:
    """Re-read the revision (one query); reload the profile only when it changed."""
    try:
        revision = read_revision()
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


def in_force() -> tuple[str, dict[str, Any]]:
    """``(profile name, overrides)`` as this process ranks now, read together (a turn records both).

    Inside :func:`overrides_scope` the name is :data:`SCOPED_PROFILE_NAME`: the scoped set has none.
    """
    scoped = _scope.get()
    if scoped is not None:
        return SCOPED_PROFILE_NAME, dict(scoped)
    name, params = _current()
    return name, dict(params)


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
    """Forget the cached overrides (tests, start-up; the next read goes to the database)."""
    with _lock:
        _cache.revision, _cache.overrides, _cache.profile = None, None, DEFAULT_PROFILE_NAME
        _cache.checked_at = float("-inf")


def prime_cache(revision: int, profile: str, overrides: Mapping[str, Any]) -> None:
    """After a write in this process, see it immediately (others within a second)."""
    with _lock:
        _cache.revision, _cache.profile, _cache.overrides = revision, profile, dict(overrides)
        _cache.checked_at = time.monotonic()
