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

A verified token is remembered by the process for ``CACHE_SECONDS`` (10 s), which saves
a query on every request of a busy bot; deleting a token therefore takes effect within
10 seconds in other processes (at once in the process that deleted it).
"""
from __future__ import annotations

import hashlib
import secrets
import threading
import time
from datetime import datetime, timedelta

from django.db.models.signals import post_delete, post_save
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import HttpBearer

from memory.models import ApiToken

TOKEN_PREFIX = "mc_"
LAST_USED_RESOLUTION = timedelta(minutes=1)
CACHE_SECONDS = 10.0

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


def issue_token(name: str) -> tuple[ApiToken, str]:
    """Create a token row and return it with the plain token (shown once, never stored)."""
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(name=name, token_hash=hash_token(plain))
    return row, plain


class BearerTokenAuth(HttpBearer):
    """Resolves the bearer token to its :class:`ApiToken`; ``None`` means 401."""

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
            row = ApiToken.objects.filter(token_hash=digest).only("id", "name", "last_used_at").first()
            if row is None:
                return None
            with _cache_lock:
                if len(_cache) > 1000:
                    _cache.clear()
                _cache[digest] = (row, clock + CACHE_SECONDS)
        self._touch(row)
        request.api_token = row  # type: ignore[attr-defined]
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
