"""What every console page shares (console, curation, tuning, privacy): form fields and the page of a list.

Form fields: row ids, persons, text.

``MAX_ID`` (the largest row id SQLite can store, signed 64 bits) is the API's bound too:
a larger number cannot even be bound to a query. Text fields are :class:`TextField`: a
NUL character is refused with a clear error on every backend (PostgreSQL cannot store
one, SQLite could), as the API refuses it with a 422.
"""
from __future__ import annotations

from html import escape
from typing import Any

from django import forms
from django.core.paginator import Page, Paginator
from django.forms.utils import flatatt
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from memory.api.schemas import MAX_ID
from memory.models import Person

__all__ = ["MAX_ID", "NUL_MESSAGE", "PAGE_SIZE", "FastSelect", "IdField", "PersonChoiceField", "TextField", "page_of",
           "parse_id"]

#: Rows on a page of the console's lists.
PAGE_SIZE = 50


def page_of(request: HttpRequest, rows: Any, per_page: int = PAGE_SIZE, param: str = "page") -> Page:
    """The page of ``rows`` that the request's ``?<param>=`` asks for (the last page when out of range)."""
    return Paginator(rows, per_page).get_page(request.GET.get(param))


NUL_MESSAGE = _("不能含有 NUL 字符（\\x00）：数据库无法保存它。")


class TextField(forms.CharField):
    """A ``CharField`` whose NUL refusal (Django's own validator) says what is wrong in plain words."""

    default_error_messages = {"null_characters_not_allowed": NUL_MESSAGE}


class FastSelect(forms.Select):
    """A ``<select>`` built in Python.

    Django renders every option through a template (about 0.1 ms each): the
    2,000 persons of a large store cost 200 ms per page. Options here are
    escaped like the template would escape them.
    """

    def render(self, name: str, value: Any, attrs: dict | None = None, renderer: Any = None) -> SafeString:
        final = self.build_attrs(self.attrs, attrs)
        chosen = {str(v) for v in self.format_value(value)}
        parts = [format_html("<select name=\"{}\"{}>", name, flatatt(final))]
        for option_value, label in self.choices:
            v = "" if option_value is None else str(option_value)
            selected = " selected" if v in chosen else ""
            parts.append(f'<option value="{escape(v)}"{selected}>{escape(str(label))}</option>')
        parts.append("</select>")
        return mark_safe("".join(parts))


def parse_id(raw: object) -> int | None:
    """``raw`` as a row id (decimal digits, 1 … :data:`MAX_ID`), else ``None``.

    Every id the console reads from a query string or a posted field goes through
    here or :class:`IdField`, so an out-of-range number is a 400/404, never an
    ``OverflowError`` from SQLite.
    """
    text = str(raw).strip() if raw is not None else ""
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if 1 <= value <= MAX_ID else None


class IdField(forms.IntegerField):
    """A row id field: a positive integer no larger than :data:`MAX_ID`."""

    default_error_messages = {
        "invalid": _("编号必须是正整数。"),
        "min_value": _("编号必须是正整数。"),
        "max_value": _("编号超出范围（最大 %(limit_value)s）。"),
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(**kwargs)


class PersonChoiceField(forms.ModelChoiceField):
    """A person select that says who the owner is and shows everyone else's id."""

    widget = FastSelect

    def label_from_instance(self, obj: Person) -> str:
        if obj.kind == "owner":
            return str(_("%(name)s（主人）")) % {"name": obj}
        return str(_("%(name)s（#%(id)s）")) % {"name": obj, "id": obj.pk}
