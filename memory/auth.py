"""Bearer-token authentication of the bot API.

A bot sends ``Authorization: Bearer <token>``. Only the SHA-256 of a token is stored
(:class:`memory.models.ApiToken`); ``python manage.py create_api_token NAME`` prints a
new token once. ``last_used_at`` is written at most once a minute per token so a busy
bot does not turn every read into a write.
"""
from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.http import HttpRequest
from django.utils import timezone
from ninja.security import HttpBearer

from memory.models import ApiToken

TOKEN_PREFIX = "mc_"
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def issue_token(name: str) -> tuple[ApiToken, str]:
    """Create a token row and return it with the plain token (shown once, never stored)."""
    plain = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(name=name, token_hash=hash_token(plain))
    return row, plain


class BearerTokenAuth(HttpBearer):
    """Resolves the bearer token to its :class:`ApiToken`; ``None`` means 401."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        token = token.strip()
        if not token or len(token) > 200:
            return None
        row = ApiToken.objects.filter(token_hash=hash_token(token)).only("id", "name", "last_used_at").first()
        if row is None:
            return None
        now = timezone.now()
        if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
            row.last_used_at = now
        request.api_token = row  # type: ignore[attr-defined]
        return row


def api_user(request: HttpRequest) -> str:
    """The name recorded as ``user`` in journals for writes made through the API."""
    row = getattr(request, "api_token", None) or getattr(request, "auth", None)
    return f"api:{row.name}" if isinstance(row, ApiToken) else "api"
