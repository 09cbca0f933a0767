"""Curation buttons and confirmation texts, from :mod:`curation.actions` (their one home)."""
from __future__ import annotations

from typing import Any

from django import template

from curation.actions import ACTIONS, keep_confirmation

register = template.Library()


@register.inclusion_tag("curation/_action_form.html")
def fact_action(fact: Any, action: str, next_url: str) -> dict[str, Any]:
    """One confirmable action button of a fact (POST + CSRF; htmx asks with ``hx-confirm``)."""
    entry = ACTIONS[action]
    return {"fact": fact, "action": action, "label": entry.label, "confirm": entry.confirmation,
            "danger": entry.danger, "next_url": next_url}


@register.simple_tag
def keep_confirm_text(others: int) -> str:
    return keep_confirmation(int(others))
