"""What a serving process checks before it starts: the web server (config/wsgi.py), the worker and the beat.

With DEBUG off (a deployment) and no ``DJANGO_SECRET_KEY``, the settings fall back to the public development
key, with which anyone could forge sessions, CSRF tokens and password-reset links: these processes refuse to
start with a sentence saying what to set. Management commands (migrate, create_api_token …) still run.
"""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def missing_secret_key(process: str) -> str | None:
    """Why ``process`` must not start on these settings, or None."""
    if settings.DEBUG or getattr(settings, "SECRET_KEY_SET", True):
        return None
    return (
        f"refusing to start the {process}: DJANGO_DEBUG is off and DJANGO_SECRET_KEY is not set, so it would run on "
        "the public development key (anyone could forge sessions, CSRF tokens and password-reset links). Set "
        "DJANGO_SECRET_KEY to 50+ random characters (python -c \"import secrets; print(secrets.token_urlsafe(50))\"),"
        " the same on every host, or DJANGO_DEBUG=1 for local use (docs/CONFIGURATION.md)."
    )


def require_secret_key(process: str) -> None:
    """:class:`ImproperlyConfigured` with :func:`missing_secret_key`'s sentence."""
    why = missing_secret_key(process)
    if why:
        raise ImproperlyConfigured(why)
