"""Forms of the curation pages: the conflict queue filter, the replace text, the operation log filter."""
from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from memory.api.schemas import FACT_MAX_CHARS
from memory.fields import IdField, PersonChoiceField, TextField
from memory.models import FactOperation, Person


class ConflictFilterForm(forms.Form):
    person = PersonChoiceField(Person.objects.none(), required=False, empty_label=_("全部人物"))

    def __init__(self, *args: Any, persons: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if persons is not None:
            self.fields["person"].queryset = persons


class ReplaceForm(forms.Form):
    content = TextField(max_length=FACT_MAX_CHARS, strip=True, widget=forms.Textarea(attrs={"rows": 3}))


class OperationFilterForm(forms.Form):
    actor = forms.ChoiceField(required=False, choices=[])
    op = forms.ChoiceField(required=False, choices=[])
    # The same person picker as the facts page (owner marked, ids beside names), not a raw id.
    person = PersonChoiceField(Person.objects.order_by("id"), required=False, empty_label=_("全部人物"),
                               error_messages={"invalid_choice": _("没有这个人物，或编号超出范围。")})
    fact = IdField(required=False)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["actor"].choices = [("", _("全部操作者")), *FactOperation.Actor.choices]
        self.fields["op"].choices = [("", _("全部操作")), *FactOperation.Op.choices]
