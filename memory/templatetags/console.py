"""Small display filters of the console: epoch milliseconds, percentages, retention bars.

Every filter returns plain text or escapes its input through ``format_html``;
memory text is untrusted and is never marked safe here.
"""
from __future__ import annotations

import datetime as dt

from django import template
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()


def format_ms(value: object, pattern: str = "%Y-%m-%d %H:%M", *, local: bool = True) -> str:
    """Epoch milliseconds → ``pattern`` in local time (UTC with ``local=False``); never raises.

    A value no calendar date can hold (past year 9999 once shifted to local time,
    before year 1, not a number) is shown as its raw digits, or ``—`` when it is
    not an integer at all: one hostile timestamp must not break a page.
    """
    if value is None or value == "":
        return ""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return "—"
    try:
        moment = dt.datetime.fromtimestamp(number / 1000, tz=dt.UTC)
        return (timezone.localtime(moment) if local else moment).strftime(pattern)
    except (OverflowError, ValueError, OSError):
        return str(number)


@register.filter
def ms(value: int | None) -> str:
    """Epoch milliseconds → local ``YYYY-MM-DD HH:MM`` (empty for None, raw value when out of range)."""
    return format_ms(value)


@register.filter
def pct(value: float | None) -> str:
    """0.734 → ``73%``."""
    if value is None:
        return "—"
    return f"{round(float(value) * 100)}%"


@register.filter
def num(value: float | None, digits: int = 3) -> str:
    """Fixed-point number, ``—`` for None."""
    if value is None:
        return "—"
    return f"{float(value):.{int(digits)}f}"


@register.simple_tag
def retention_bar(value: float | None) -> str:
    """A retention bar (0..1) with its percentage as text for screen readers."""
    v = max(0.0, min(1.0, float(value or 0.0)))
    return format_html(
        '<span class="bar{}" title="{}" role="img" aria-label="{}"><span style="width:{}%"></span></span>',
        " low" if v < 0.15 else "",
        f"{v:.3f}",
        f"{round(v * 100)}%",
        f"{v * 100:.1f}",
    )


@register.simple_tag(takes_context=True)
def query_with(context: template.Context, **changes: object) -> str:
    """The current query string with some parameters replaced (``None`` removes one)."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = str(value)
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"
