"""``{% broad_tokens as n %}``: live API tokens with every scope (the dashboard asks to narrow them)."""
from __future__ import annotations

from django import template

from memory import selectors
from memory.meta import meta_get
from memory.privacy.forget import RETENTION_META_KEY, message_retention_days

register = template.Library()


@register.simple_tag
def broad_tokens() -> int:
    return selectors.broad_token_count()


@register.simple_tag
def message_retention() -> dict:
    """The ``MESSAGE_RETENTION_DAYS`` setting and the last run of its sweep."""
    days = message_retention_days()
    return {"days": days, "state": meta_get(RETENTION_META_KEY, {}) if days > 0 else {}}
