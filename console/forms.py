"""Forms of the console: every query parameter and posted field is validated here."""
from __future__ import annotations

from html import escape
from typing import Any

from django import forms
from django.forms.utils import flatatt
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from curation.models import FactOperation
from memory.models import Person, Stream


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

#: The largest row id SQLite can store (signed 64 bits); a larger number cannot even be bound to a query.
MAX_ID = 2**63 - 1


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


class ConflictFilterForm(forms.Form):
    person = PersonChoiceField(Person.objects.none(), required=False, empty_label=_("全部人物"))

    def __init__(self, *args: Any, persons: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if persons is not None:
            self.fields["person"].queryset = persons


FACT_STATES = [
    ("", _("全部状态")),
    ("active", _("活跃")),
    ("frozen", _("已冻结")),
    ("invalid", _("已失效")),
    ("superseded", _("已被取代")),
    ("pinned", _("永久保留")),
]
ORIGINS = [("", _("全部来源")), ("legacy", _("旧数据")), ("direct", _("私聊")), ("group", _("群聊"))]
NODE_KINDS = [("fact", _("事实")), ("episode", _("情节")), ("knowledge", _("知识"))]


class FactFilterForm(forms.Form):
    person = forms.ModelChoiceField(
        Person.objects.order_by("id"), required=False, empty_label=_("全部人物"), widget=FastSelect
    )
    kind = forms.CharField(required=False, max_length=32)
    slot = forms.CharField(required=False, max_length=32)
    state = forms.ChoiceField(choices=FACT_STATES, required=False)
    origin = forms.ChoiceField(choices=ORIGINS, required=False)
    q = forms.CharField(required=False, max_length=200, strip=True)


class SearchForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, strip=True)


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
    q = forms.CharField(required=False, max_length=200, strip=True)
    placeholders = forms.BooleanField(required=False)


class ReplaceForm(forms.Form):
    content = forms.CharField(max_length=2000, strip=True, widget=forms.Textarea(attrs={"rows": 3}))


class GraphForm(forms.Form):
    include_frozen = forms.BooleanField(required=False)
    max_nodes = forms.IntegerField(required=False, min_value=10, max_value=1000)
    node = forms.RegexField(regex=r"^(fact|episode|knowledge):\d+$", required=False)

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
    q = forms.CharField(required=False, max_length=200, strip=True)
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
    text = forms.CharField(max_length=2000, strip=True, widget=forms.Textarea(attrs={"rows": 3}), label=_("这句话"),
                           error_messages={"required": _("请输入一句话（只有空白不算）。")})
    impression = forms.CharField(required=False, max_length=2000, strip=True, widget=forms.Textarea(attrs={"rows": 2}))


class ImportForm(forms.Form):
    MAX_CHARS = 200_000
    MAX_UPLOAD_BYTES = 2_000 * 1024

    origin_name = forms.CharField(required=False, max_length=255, strip=True)
    text = forms.CharField(required=False, max_length=MAX_CHARS, widget=forms.Textarea(attrs={"rows": 8}))
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
            data["kind"] = "upload"
            data["origin_name"] = data.get("origin_name") or upload.name
        else:
            data["kind"] = "paste"
        if not (data.get("text") or "").strip():
            raise forms.ValidationError(_("请粘贴文本或上传一个文本文件。"))
        return data


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
