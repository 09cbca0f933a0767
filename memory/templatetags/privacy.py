"""``{% broad_tokens as n %}``: live API tokens with every scope (the dashboard asks to narrow them)."""
from __future__ import annotations

from django import template

register = template.Library()


@register.simple_tag
def broad_tokens() -> int:
    from memory.privacy_views import broad_token_count

    return broad_token_count()
