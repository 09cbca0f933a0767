"""Forms of the console: every query parameter and posted field is validated here."""
from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from memory.fields import NUL_MESSAGE, FastSelect, IdField, TextField, parse_id
from memory.models import PINNED, Fact, FactState, MemoryNode, Person, Stream

FACT_STATES = [("", _("全部状态")), *FactState.choices, (PINNED, _("永久保留"))]
ORIGINS = [("", _("全部来源")), *Fact.Origin.choices]
NODE_KINDS = MemoryNode.RefKind.choices


class FactFilterForm(forms.Form):
    person = forms.ModelChoiceField(
        Person.objects.order_by("id"), required=False, empty_label=_("全部人物"), widget=FastSelect
    )
    kind = TextField(required=False, max_length=32)
    slot = TextField(required=False, max_length=32)
    state = forms.ChoiceField(choices=FACT_STATES, required=False)
    origin = forms.ChoiceField(choices=ORIGINS, required=False)
    # learnt on or after / on or before (local dates), and from which stream's messages (extraction)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    stream = forms.ModelChoiceField(
        Stream.objects.order_by("id"), required=False, empty_label=_("全部会话流"), widget=FastSelect
    )
    q = TextField(required=False, max_length=200, strip=True)


class SearchForm(forms.Form):
    q = TextField(required=False, max_length=200, strip=True)


class MessageFilterForm(forms.Form):
    """Browse one stream's messages: who wrote them, when, summarised into an episode or not."""

    ARCHIVED = [("", _("全部消息")), ("yes", _("已总结进情节")), ("no", _("未总结"))]

    speaker = forms.ChoiceField(required=False)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    archived = forms.ChoiceField(choices=ARCHIVED, required=False)

    def __init__(self, *args: Any, speakers: Any = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["speaker"].choices = [("", _("全部发言者")), ("assistant", _("机器人")),
                                          *((str(p.pk), str(p)) for p in speakers)]


class EpisodeSearchForm(forms.Form):
    stream = forms.ModelChoiceField(
        Stream.objects.order_by("id"), required=False, empty_label=_("全部会话流"), widget=FastSelect
    )
    q = TextField(required=False, max_length=200, strip=True)
    placeholders = forms.BooleanField(required=False)


class GraphForm(forms.Form):
    include_frozen = forms.BooleanField(required=False)
    max_nodes = forms.IntegerField(required=False, min_value=10, max_value=1000)
    node = forms.RegexField(regex=r"^(fact|episode|knowledge):\d+$", required=False,
                            error_messages={"null_characters_not_allowed": NUL_MESSAGE})

    def clean_node(self) -> tuple[str, int] | None:
        """``kind:id`` → ``(kind, id)``; an id SQLite cannot hold is an error."""
        value = self.cleaned_data.get("node")
        if not value:
            return None
        kind, raw = value.split(":")
        ref = parse_id(raw)
        if ref is None:
            raise forms.ValidationError(_("节点编号超出范围。"))
        return kind, ref


class SpreadForm(forms.Form):
    kind = forms.ChoiceField(choices=NODE_KINDS, required=False)
    ref = IdField(required=False)
    q = TextField(required=False, max_length=200, strip=True)
    hops = forms.IntegerField(required=False, min_value=1, max_value=4, initial=2)  # as tuning (ppr_hops ≤ 4)
    alpha = forms.FloatField(required=False, min_value=0.05, max_value=0.95)
    limit = forms.IntegerField(required=False, min_value=1, max_value=20, initial=8)

    def clean(self) -> dict:
        data = super().clean()
        if not data.get("q") and not (data.get("kind") and data.get("ref")):
            raise forms.ValidationError(_("请选择一个节点，或输入一段文字作为起点。"))
        return data


class PlaygroundForm(forms.Form):
    stream = forms.ModelChoiceField(Stream.objects.order_by("id"), empty_label=None, widget=FastSelect,
                                    label=_("会话流"))
    speaker = forms.ModelChoiceField(Person.objects.order_by("id"), empty_label=None, widget=FastSelect,
                                     label=_("说话人"))
    text = TextField(max_length=2000, strip=True, widget=forms.Textarea(attrs={"rows": 3}), label=_("这句话"),
                     error_messages={"required": _("请输入一句话（只有空白不算）。")})
    impression = TextField(required=False, max_length=2000, strip=True, widget=forms.Textarea(attrs={"rows": 2}))


class ImportForm(forms.Form):
    MAX_CHARS = 200_000
    MAX_UPLOAD_BYTES = 2_000 * 1024

    origin_name = TextField(required=False, max_length=255, strip=True)
    text = TextField(required=False, max_length=MAX_CHARS, widget=forms.Textarea(attrs={"rows": 8}))
    upload = forms.FileField(required=False)

    def clean(self) -> dict:
        data = super().clean()
        upload = data.get("upload")
        if upload:
            if upload.size > self.MAX_UPLOAD_BYTES:
                raise forms.ValidationError(_("文件超过 2000 KB。"))
            try:
                data["text"] = upload.read().decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise forms.ValidationError(_("文件不是 UTF-8 文本。")) from exc
            if len(data["text"]) > self.MAX_CHARS:
                raise forms.ValidationError(_("文本超过 200000 字。"))
            if "\x00" in data["text"] or "\x00" in upload.name:
                raise forms.ValidationError(NUL_MESSAGE)
            data["kind"] = "upload"
            data["origin_name"] = data.get("origin_name") or upload.name
        else:
            data["kind"] = "paste"
        if not (data.get("text") or "").strip():
            raise forms.ValidationError(_("请粘贴文本或上传一个文本文件。"))
        return data


class TurnFilterForm(forms.Form):
    """Browse recorded turns: of a stream, with a person present, between two dates, labelled or not, using a fact."""

    LABELLED = [("", _("标注与否")), ("yes", _("已标注")), ("no", _("未标注"))]

    stream = forms.ModelChoiceField(
        Stream.objects.order_by("id"), required=False, empty_label=_("全部会话流"), widget=FastSelect
    )
    person = forms.ModelChoiceField(
        Person.objects.order_by("id"), required=False, empty_label=_("全部人物"), widget=FastSelect
    )
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    labelled = forms.ChoiceField(choices=LABELLED, required=False)
    fact = forms.ModelChoiceField(Fact.objects.only("id", "content"), required=False, widget=forms.HiddenInput)


class LabelForm(forms.Form):
    """One label of one fact of a turn: relevant, not relevant, or cleared."""

    CHOICES = [("yes", _("相关")), ("no", _("不相关")), ("clear", _("清除"))]

    fact = IdField()
    relevant = forms.ChoiceField(choices=CHOICES)

    def value(self) -> bool | None:
        return {"yes": True, "no": False, "clear": None}[self.cleaned_data["relevant"]]


class ReplayForm(forms.Form):
    """Which saved profile to replay a turn under, beside the active one."""

    profile = TextField(required=False, max_length=200)
