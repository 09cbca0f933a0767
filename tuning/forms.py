"""Forms of the tuning console: the draft parameter table and the comparison picker.

Draft values arrive as text. They are parsed by the parameter's kind **before** the
whitelist validation, so the console refuses exactly what the API refuses: an integer
parameter needs a whole number (``3`` or ``3.0``; ``1.5`` is refused with "需要整数").
"""
from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from memory.engine.tuning import WHITELIST
from memory.fields import TextField
from tuning import services
from tuning.evaluation import DEFAULT_MAX_TURNS, MAX_TURNS_LIMIT, resolve_target
from tuning.fit import DEFAULT_BUDGET, MAX_BUDGET

INT_RE = re.compile(r"^[+-]?\d+$")
FLOAT_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")

DRAFT_ACTIONS = ("evaluate_draft", "evaluate_active", "save", "compare")


def field_name(param: str) -> str:
    return f"p_{param}"


def parse_value(param: str, raw: str) -> int | float:
    """Text → number of the parameter's kind; :class:`services.ProfileError` naming ``param``."""
    spec = WHITELIST[param]
    text = raw.strip()
    if spec.kind == "int":
        if INT_RE.match(text):
            return int(text)
        if FLOAT_RE.match(text) and float(text).is_integer():
            return int(float(text))
        if FLOAT_RE.match(text):
            raise services.ProfileError(services.param_refusal(param, 0.5), param=param)
    elif FLOAT_RE.match(text):
        return float(text)
    raise services.ProfileError(services.param_refusal(param, None), param=param)


class DraftForm(forms.Form):
    """One optional text field per whitelisted parameter (blank = not overridden)."""

    action = forms.ChoiceField(choices=[(a, a) for a in DRAFT_ACTIONS], required=False)
    name = TextField(max_length=services.PROFILE_NAME_MAX, required=False, label=_("参数方案名称"))
    compare_with = TextField(max_length=200, required=False)
    max_turns = forms.IntegerField(min_value=1, max_value=MAX_TURNS_LIMIT, initial=DEFAULT_MAX_TURNS, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param, spec in WHITELIST.items():
            step = "1" if spec.kind == "int" else "0.05"
            self.fields[field_name(param)] = TextField(
                required=False,
                label=param,
                widget=forms.NumberInput(
                    attrs={"step": step, "min": spec.min, "max": spec.max, "placeholder": _("不改"), "class": "draft", "size": 10}
                ),
            )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        raw: dict[str, Any] = {}
        for param in WHITELIST:
            text = (data.get(field_name(param)) or "").strip()
            if not text:
                continue
            try:
                raw[param] = parse_value(param, text)
            except services.ProfileError as exc:
                self.add_error(field_name(param), str(exc))
        if not self.errors:
            try:
                data["params"] = services.validate_params(raw)
            except services.ProfileError as exc:
                self.add_error(field_name(exc.param) if exc.param in WHITELIST else None, str(exc))
        if data.get("action") == "save" and not self.errors:
            try:
                data["name"] = services.clean_profile_name(data.get("name"))
            except services.ProfileError as exc:
                self.add_error("name", str(exc))
        data["max_turns"] = data.get("max_turns") or DEFAULT_MAX_TURNS
        return data

    def draft_rows(self) -> list[dict[str, Any]]:
        """``[{param, spec, field}]`` in whitelist order, for the parameter table."""
        return [{"param": p, "spec": s, "field": self[field_name(p)]} for p, s in WHITELIST.items()]


def draft_initial(overrides: dict[str, Any]) -> dict[str, Any]:
    """Draft fields prefilled with the active overrides."""
    return {field_name(k): v for k, v in overrides.items() if k in WHITELIST}


class CompareForm(forms.Form):
    """Two targets: ``@active``, or a profile name (``default`` included)."""

    a = TextField(max_length=200)
    b = TextField(max_length=200)
    max_turns = forms.IntegerField(min_value=1, max_value=MAX_TURNS_LIMIT, initial=DEFAULT_MAX_TURNS, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        data["max_turns"] = data.get("max_turns") or DEFAULT_MAX_TURNS
        return data


ACTIVE_CHOICE = "@active"


def target_for_choice(choice: str) -> dict[str, Any]:
    """``@active`` → the active profile; anything else → that stored profile (or default)."""
    if choice == ACTIVE_CHOICE:
        return resolve_target()
    return resolve_target(profile=choice)


class FitForm(forms.Form):
    """A fit's options: its budget in evaluations and the metrics' cut-off (blank: the prompt size)."""

    budget = forms.IntegerField(min_value=1, max_value=MAX_BUDGET, initial=DEFAULT_BUDGET)
    k = forms.IntegerField(min_value=1, max_value=50, required=False)


class LabelImportForm(forms.Form):
    """Labels as JSON — an exported file, or pasted text: ``{"labels": [{turn, fact, relevant}, …]}`` or the list."""

    file = forms.FileField(required=False, label=_("JSON 文件"))
    text = TextField(required=False, widget=forms.Textarea(attrs={"rows": 4}), label=_("或粘贴 JSON"))

    MAX_BYTES = 5 * 1024 * 1024

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        upload = data.get("file")
        if upload is not None:
            if upload.size > self.MAX_BYTES:
                raise forms.ValidationError(_("文件太大（上限 5 MB）"))
            raw = upload.read()
            try:
                raw = raw.decode("utf-8-sig")
            except UnicodeDecodeError:
                raise forms.ValidationError(_("文件不是 UTF-8 文本")) from None
        else:
            raw = data.get("text") or ""
        if not raw.strip():
            raise forms.ValidationError(_("请选择一个 JSON 文件，或粘贴 JSON"))
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise forms.ValidationError(_("不是合法的 JSON：%(why)s") % {"why": exc}) from None
        entries = parsed.get("labels") if isinstance(parsed, dict) else parsed
        if not isinstance(entries, list):
            raise forms.ValidationError(_("JSON 需要是 {\"labels\": [...]} 或一个列表"))
        data["labels"] = entries
        return data
