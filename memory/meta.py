"""The ``meta`` table: small JSON values under a key (cursors, revisions, the active profile).

Below the services and selectors on purpose — :mod:`memory.dispatch.triggers`,
:mod:`memory.overrides` and the services all read it, and it imports nothing
of the project but the model.
"""
from __future__ import annotations

import json
from typing import Any

from django.db import connection

from memory.models import Meta

__all__ = ["meta_get", "meta_set", "meta_text"]


def meta_text(key: str) -> str | None:
    """The stored text of a meta key, unparsed (``None`` when missing)."""
    with connection.cursor() as cur:  # a plain read: triggers ask once per stored message
        cur.execute("SELECT value FROM meta WHERE key = %s", [key])
        row = cur.fetchone()
    return None if row is None else row[0]


def meta_get(key: str, default: Any = None) -> Any:
    """JSON value of a meta key; ``default`` when missing or not valid JSON."""
    text = meta_text(key)
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def meta_set(key: str, value: Any) -> None:
    Meta.objects.update_or_create(key=key, defaults={"value": json.dumps(value, ensure_ascii=False)})
