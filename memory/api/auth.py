"""Bearer-token authentication of the bot API.

A bot sends ``Authorization: Bearer <token>``. Only the SHA-256 of a token is stored
(:class:`memory.models.ApiToken`); ``python manage.py create_api_token NAME`` prints a
new token once. ``last_used_at`` is written at most once a minute per token so a busy
bot does not turn every read into a write.

No part of an ``Authorization`` header is ever logged: django-ninja's ``HttpBearer``
logs the raw value of a header that does not start with ``Bearer`` (``Unexpected auth -
'mc_…'``, or a ``Basic`` header's password), so :class:`BearerTokenAuth` reads the header
itself. gunicorn's access log is configured in ``config/gunicorn.py`` without the
``%(u)s`` atom, which would print the user part of a ``Basic`` header.

Scopes: every route names the one scope it needs (``BearerTokenAuth(scope=...)``); a token
without it gets 403 naming the scope. ``admin`` implies every scope. The OpenAPI document
states each route's scope (security requirement and description, see ``memory.api``).

A verified token is remembered by the process for ``CACHE_SECONDS`` (0.5 s), which saves
a query on most requests of a busy bot and still lets a revocation (``revoke_api_token``,
the console token page) reach every process within a second (at once in the process that
revoked it).
"""
from __future__ import annotations

import hashlib
import secrets
import threading
import time
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext as _
from ninja.errors import HttpError
from ninja.security import HttpBearer

from memory.models import ApiToken

TOKEN_PREFIX = "mc_"
LAST_USED_RESOLUTION = timedelta(minutes=1)
CACHE_SECONDS = 0.5

# What each scope allows (docs/OPERATIONS.md has the same table). ``admin`` implies every scope.
SCOPES: dict[str, str] = {
    "bot": "store messages, facts and knowledge; run turns and recall/inspect/consult actions",
    "curation": "pin, unpin, invalidate, restore, replace facts; resolve conflicts; read the journal",
    "undo": "undo fact operations",
    "forget": "preview and carry out forgetting (messages, facts, episodes, persons, streams)",
    "tuning": "save, delete, apply, roll back and evaluate retrieval profiles",
    "export": "export everything stored about a person (every stream at once)",
    "admin": "every scope",
}


class TokenScopeError(ValueError):
    """An unknown scope name."""


def normalize_scopes(scopes: list[str] | tuple[str, ...]) -> list[str]:
    """Sorted, deduplicated scope names; ``admin`` absorbs the others. Unknown names raise."""
    wanted = {s.strip() for s in scopes if s and s.strip()}
    unknown = sorted(wanted - set(SCOPES))
    if unknown:
        raise TokenScopeError(f"unknown scope(s): {', '.join(unknown)}; choose from {', '.join(SCOPES)}")
    if not wanted:
        raise TokenScopeError("a token needs at least one scope")
    return ["admin"] if "admin" in wanted else sorted(wanted, key=list(SCOPES).index)

# token hash → (row, monotonic expiry)
_cache: dict[str, tuple[ApiToken, float]] = {}
_cache_lock = threading.Lock()


def clear_token_cache(*args, **kwargs) -> None:
    with _cache_lock:
        _cache.clear()


post_delete.connect(clear_token_cache, sender=ApiToken, dispatch_uid="memory.auth.token_deleted")
post_save.connect(clear_token_cache, sender=ApiToken, dispatch_uid="memory.auth.token_saved")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenNameTaken(ValueError):
    """A live token already has this name (names tell tokens apart: the list, revoke_api_token NAME)."""


def issue_token(name: str, scopes: list[str] | tuple[str, ...] = ("bot",)) -> tuple[ApiToken, str]:
    """Create a token row and return it with the plain token (shown once, never stored).

    Raises :class:`TokenNameTaken` when a live (unrevoked) token has the name, :class:`TokenScopeError`
    for unknown scopes; a revoked token's name may be used again.
    """
    scopes = normalize_scopes(scopes)
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        if ApiToken.objects.filter(name=name, revoked_at__isnull=True).exists():
            raise TokenNameTaken(_("已有一个名为「%(name)s」的有效令牌：换一个名称，或先吊销它。") % {"name": name})
        row = ApiToken.objects.create(name=name, token_hash=hash_token(plain), scopes=scopes)
    return row, plain


def revoke_tokens(*, name: str = "", token_id: int | None = None, user: str = "") -> int:
    """Revoke the live token(s) called ``name`` (or the one with ``token_id``); returns how many.

    Refused by every process within ``CACHE_SECONDS`` (the row stays, for the record).
    """
    rows = ApiToken.objects.filter(revoked_at__isnull=True)
    rows = rows.filter(pk=token_id) if token_id is not None else rows.filter(name=name)
    count = rows.update(revoked_at=timezone.now(), revoked_by=user[:150])
    clear_token_cache()
    return count


class BearerTokenAuth(HttpBearer):
    """Resolves the bearer token to its :class:`ApiToken`; ``None`` means 401, a missing scope 403."""

    def __init__(self, scope: str = "bot") -> None:
        assert scope in SCOPES, scope
        self.scope = scope
        super().__init__()

    def __call__(self, request: HttpRequest) -> ApiToken | None:
        # Same parsing as HttpBearer.__call__, minus its log line quoting the header.
        scheme, _, token = (request.headers.get(self.header) or "").partition(" ")
        if scheme.lower() != self.openapi_scheme:
            return None
        return self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        token = token.strip()
        if not token or len(token) > 200:
            return None
        digest = hash_token(token)
        clock = time.monotonic()
        with _cache_lock:
            hit = _cache.get(digest)
        if hit is not None and hit[1] > clock:
            row = hit[0]
        else:
            row = (
                ApiToken.objects.filter(token_hash=digest, revoked_at__isnull=True)
                .only("id", "name", "scopes", "last_used_at")
                .first()
            )
            if row is None:
                return None
            with _cache_lock:
                if len(_cache) > 1000:
                    _cache.clear()
                _cache[digest] = (row, clock + CACHE_SECONDS)
        self._touch(row)
        request.api_token = row  # type: ignore[attr-defined]
        if not row.has_scope(self.scope):
            raise HttpError(403, f"this token lacks the '{self.scope}' scope needed by this route")
        return row

    @staticmethod
    def _touch(row: ApiToken) -> None:
        now = timezone.now()
        last: datetime | None = row.last_used_at
        if last is None or now - last >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
            row.last_used_at = now


def api_user(request: HttpRequest) -> str:
    """The name recorded as ``user`` in journals for writes made through the API."""
    row = getattr(request, "api_token", None) or getattr(request, "auth", None)
    return f"api:{row.name}" if isinstance(row, ApiToken) else "api"
