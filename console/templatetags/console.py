"""Small display filters of the console: epoch milliseconds, percentages, retention bars.

Every filter returns plain text or escapes its input through ``format_html``;
memory text is untrusted and is never marked safe here.
"""
from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe
from django.utils.translation import get_language, gettext_lazy, pgettext_lazy
from django.utils.translation import gettext as _

from memory.models import Fact, FactOperation, Job, MemoryNode, Message, StreamKind
from tuning import labels as tuning_labels

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
def ms_date(value: int | None) -> str:
    """Epoch milliseconds → the local date ``YYYY-MM-DD`` (for date filters in links)."""
    return format_ms(value, "%Y-%m-%d")


@register.filter
def iso_time(value: object) -> str:
    """An ISO 8601 instant (reports store UTC ``…Z``) → local ``YYYY-MM-DD HH:MM``, like every other time."""
    try:
        moment = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value or "")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M")


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


@register.filter
def signed(value: float | None, digits: int = 3) -> str:
    """A difference with its sign: ``+0.012``, ``−0.004`` (true minus sign), ``—`` for None."""
    if value is None:
        return "—"
    v = float(value)
    text = f"{abs(v):.{int(digits)}f}"
    return f"+{text}" if v > 0 else f"−{text}" if v < 0 else text


@register.filter
def interval(value: object, digits: int = 3) -> str:
    """A bootstrap interval ``{mean, low, high}`` as ``+0.012 [−0.004, +0.030]``; ``—`` for None."""
    if not isinstance(value, dict) or value.get("mean") is None:
        return "—"
    return f"{signed(value['mean'], digits)} [{signed(value.get('low'), digits)}, {signed(value.get('high'), digits)}]"


@register.simple_tag
def verdict_label(code: str) -> str:
    """A candidate's verdict in the interface language (prompt, forgetting, gate, limit)."""
    return str(tuning_labels.VERDICT_LABELS.get(code, code))


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


@register.simple_tag(takes_context=True)
def page_query(context: template.Context, number: int, param: str = "page") -> str:
    """The current query string pointing at page ``number`` of the list paged by ``?<param>=``."""
    return query_with(context, **{param: number})


class NavLink(NamedTuple):
    perm: str  # the permission of the view it leads to: no link to a 403
    url_name: str
    label: str
    current: frozenset[str] = frozenset()  # url names (without namespace) of the pages it is "current" on
    optional: bool = False  # left out when the URL is not mounted


#: The main navigation, in order.
NAV = [
    NavLink("memory.view_fact", "console:dashboard", gettext_lazy("总览"), frozenset({"dashboard"})),
    NavLink("memory.view_message", "console:streams", gettext_lazy("会话流"), frozenset({"streams", "stream"})),
    NavLink("memory.view_episode", "console:episodes", gettext_lazy("情节"), frozenset({"episodes"})),
    NavLink("memory.view_fact", "console:facts", gettext_lazy("事实"), frozenset({"facts", "fact"})),
    NavLink("memory.view_fact", "curation:conflicts", gettext_lazy("冲突组"), frozenset({"conflicts"})),
    NavLink("memory.view_fact", "console:persons", pgettext_lazy("nav", "人物"), frozenset({"persons", "person_export"})),
    NavLink("curation.view_factoperation", "curation:operations", gettext_lazy("操作流水"), frozenset({"operations"})),
    NavLink("memory.view_knowledge", "console:knowledge", gettext_lazy("知识"), frozenset({"knowledge"})),
    NavLink("memory.import_knowledge", "console:imports", gettext_lazy("导入中心"), frozenset({"imports"})),
    NavLink("memory.preview_association", "console:graph", gettext_lazy("联想网络"), frozenset({"graph"})),
    NavLink("memory.view_turn", "console:turns", gettext_lazy("回合"), frozenset({"turns", "turn"})),
    NavLink("memory.preview_recall", "console:playground", gettext_lazy("召回演练"), frozenset({"playground"})),
    NavLink("tuning.tune_retrieval", "tuning:index", gettext_lazy("检索调优"), optional=True),
    NavLink("memory.view_job", "console:jobs", gettext_lazy("后台任务"), frozenset({"jobs"})),
]


@register.simple_tag(takes_context=True)
def nav_links(context: template.Context) -> list[dict[str, object]]:
    """The links of :data:`NAV` the user may follow: ``url``, ``label`` and ``current`` (the page shown)."""
    perms = context.get("perms") or ()
    match = getattr(context.get("request"), "resolver_match", None)
    here = match.url_name if match else None
    links = []
    for link in NAV:
        if link.perm not in perms:
            continue
        try:
            url = reverse(link.url_name)
        except NoReverseMatch:
            if link.optional:
                continue
            raise
        links.append({"url": url, "label": link.label, "current": here in link.current})
    return links


#: What a job kind does, in an operator's words.
JOB_KINDS = dict(Job.Kind.choices)


@register.filter
def job_kind(job: object) -> str:
    kind = getattr(job, "kind", "")
    return str(JOB_KINDS.get(kind, kind))


STREAM_KINDS = dict(StreamKind.choices)


@register.filter
def stream_kind(kind: object) -> str:
    return str(STREAM_KINDS.get(str(kind), kind))


def _ndcg(value: object) -> str:
    return "—" if value is None else f"{float(value):.4f}"


@register.filter
def job_subject(job: object) -> str:
    """What a job ran on: the import's source, the evaluated profile, the compared pair."""
    params = getattr(job, "params", None) or {}
    kind = getattr(job, "kind", "")
    if kind == "import":
        name = params.get("origin_name") or _("未命名来源")
        return _("来源「%(name)s」") % {"name": name}
    if kind == "evaluate":
        target = params.get("target") or {}
        return _("参数组「%(label)s」") % {"label": target_label(target.get("label") or target.get("profile"))}
    if kind == "compare":
        a, b = params.get("a") or {}, params.get("b") or {}
        return _("「%(a)s」对比「%(b)s」") % {
            "a": target_label(a.get("label") or a.get("profile") or "A"), "b": target_label(b.get("label") or b.get("profile") or "B"),
        }
    if kind == "fit":
        base = params.get("base") or {}
        return _("从「%(label)s」出发，预算 %(budget)s 次评估，%(turns)s 个标注回合") % {
            "label": target_label(base.get("label") or base.get("profile")), "budget": params.get("budget", ""),
            "turns": params.get("turns", ""),
        }
    return ""


@register.filter
def job_headline(job: object) -> str:
    """The headline result of a finished job in one line (empty while it runs or when it failed)."""
    result = getattr(job, "result", None) or {}
    if not result or getattr(job, "status", "") != "done":
        return ""
    kind = getattr(job, "kind", "")
    try:
        if kind == "import":
            return _("提交 %(submitted)s 条：新增 %(added)s，重复 %(duplicated)s，已向量化 %(embedded)s") % {
                key: result.get(key, 0) for key in ("submitted", "added", "duplicated", "embedded")
            }
        if kind == "evaluate":
            overall = (result.get("groups") or {}).get("all") or {}
            return _("%(n)s 个回合：人工标注 %(h)s 个，R@%(k)s %(hr)s；弱标注 %(w)s 个，R@%(k)s %(wr)s；回放不一致 %(mismatched)s 个") % {
                "n": result.get("sample_count", 0), "k": result.get("k", ""),
                "h": (overall.get("human") or {}).get("turns", 0), "hr": _ndcg((overall.get("human") or {}).get("recall")),
                "w": (overall.get("weak") or {}).get("turns", 0), "wr": _ndcg((overall.get("weak") or {}).get("recall")),
                "mismatched": (result.get("reconcile") or {}).get("mismatched", 0),
            }
        if kind == "compare":
            diff = ((result.get("difference") or {}).get("all") or {})
            return _("%(n)s 个回合：R@k 变化 人工标注 %(h)s，弱标注 %(w)s；%(changed)s 个回合的结果变了") % {
                "n": result.get("sample_count", 0), "h": interval((diff.get("human") or {}).get("recall")),
                "w": interval((diff.get("weak") or {}).get("recall")), "changed": result.get("changed_turns", 0),
            }
        if kind == "fit":
            held = result.get("heldout") or {}
            return _("留出 %(n)s 个回合：R@%(k)s %(a)s → %(b)s，提升 %(gain)s") % {
                "n": (held.get("base") or {}).get("turns", 0), "k": result.get("k", ""),
                "a": _ndcg((held.get("base") or {}).get("recall")), "b": _ndcg((held.get("chosen") or {}).get("recall")),
                "gain": interval((held.get("gain") or {}).get("recall")),
            }
        if kind == "backfill":
            return _("补全了 %(facts)s 条事实、%(knowledge)s 条知识、%(messages)s 条消息的向量") % {
                key: result.get(key, 0) for key in ("facts", "knowledge", "messages")
            }
        if kind == "decay":
            return _("冻结了 %(n)s 条联想边") % {"n": result.get("frozen", 0)}
        if kind == "tuning_probe":
            return _("工作进程 %(pid)s 用的参数方案：%(profile)s") % {
                "pid": result.get("pid", "?"), "profile": profile_name(result.get("profile"))}
    except (TypeError, ValueError, AttributeError):
        return ""
    return ""  # a kind without a sentence of its own: its status says enough (never raw result keys)


@register.filter
def param_label(name: object) -> str:
    """A tuning parameter's meaning in the interface language (its code name when unknown)."""
    return str(tuning_labels.PARAM_LABELS.get(str(name), name))


@register.filter
def param_help(name: object) -> str:
    return str(tuning_labels.PARAM_HELP.get(str(name), ""))


@register.filter
def param_kind(kind: object) -> str:
    return str(tuning_labels.PARAM_KINDS.get(str(kind), kind))


@register.filter
def target_label(label: object) -> str:
    return tuning_labels.target_label(str(label or ""))


@register.filter
def profile_name(name: object) -> str:
    return tuning_labels.profile_name(str(name or ""))


#: Codes shown to operators, by filter: each filter gives a code's label in the interface
#: language (an unknown code is shown as it is).
CODE_LABELS = {
    # where a fact was learnt
    "origin_label": dict(Fact.Origin.choices),
    # who wrote a message
    "role_label": dict(Message.Role.choices),
    # which channel found a recall candidate
    "channel_label": {"lexical": gettext_lazy("词面"), "dense": gettext_lazy("向量"), "context": gettext_lazy("对话上下文")},
    # where knowledge came from
    "source_label": {
        "import_center": gettext_lazy("导入中心"), "import": gettext_lazy("导入"), "seed": gettext_lazy("初始数据"),
    },
}


#: The kinds a fact can have (memory.engine.decay.HALF_LIFE_HOURS, plus the default of a fact without one):
#: stored as these words, shown in the interface language. A kind outside the list is an extractor's own word.
FACT_KINDS = {
    "身份": pgettext_lazy("fact kind", "身份"), "日期": pgettext_lazy("fact kind", "日期"),
    "偏好": pgettext_lazy("fact kind", "偏好"), "关系": pgettext_lazy("fact kind", "关系"),
    "习惯": pgettext_lazy("fact kind", "习惯"), "事件": pgettext_lazy("fact kind", "事件"),
    "状态": pgettext_lazy("fact kind", "状态"), "未分类": pgettext_lazy("fact kind", "未分类"),
}
CODE_LABELS["fact_kind"] = FACT_KINDS
#: A journal entry's operation as a noun phrase (the model's labels double as the button labels: 标失效 → Invalidate).
CODE_LABELS["op_label"] = {
    FactOperation.Op.INVALIDATE: pgettext_lazy("operation", "标失效"), FactOperation.Op.RESTORE: pgettext_lazy("operation", "恢复"),
    FactOperation.Op.PIN: pgettext_lazy("operation", "永久保留"), FactOperation.Op.UNPIN: pgettext_lazy("operation", "取消永久保留"),
    FactOperation.Op.SUPERSEDE: pgettext_lazy("operation", "标记取代"), FactOperation.Op.REPLACE: pgettext_lazy("operation", "人工取代"),
    FactOperation.Op.ADJUDICATE: pgettext_lazy("operation", "冲突裁决"), FactOperation.Op.UNDO: pgettext_lazy("operation", "撤销"),
}
#: Chat platforms by their code (a stream's and an identity's ``platform``); others are shown as stored.
CODE_LABELS["platform_label"] = {"qq": "QQ", "desktop": gettext_lazy("桌面"), "wechat": gettext_lazy("微信"),
                                 "telegram": "Telegram", "discord": "Discord"}


def _code_filter(name: str, labels: dict) -> None:
    register.filter(name, lambda code: str(labels.get(str(code), code)))


for _name, _labels in CODE_LABELS.items():
    _code_filter(_name, _labels)


EVENTS = {
    "memory_fact_scope_blocked": gettext_lazy("一条私聊里学到的事实没有在群聊里说出（可见性规则）"),
    "memory_ppr_timeout": gettext_lazy("联想扩散超时，已改用固定跳数"),
    "memory_extract_failed": gettext_lazy("事实抽取失败，稍后重试"),
    "summary_batch_skipped": gettext_lazy("一批消息三次总结失败，已跳过（留了占位情节）"),
    "fact_extract_batch_skipped": gettext_lazy("一批消息的事实抽取多次失败，已跳过"),
}


@register.filter
def event_label(kind: object) -> str:
    """A pipeline event in an operator's words (the code name only for kinds not listed)."""
    return str(EVENTS.get(str(kind), kind))


#: One memory node's layer (the model's labels are plural: 事实 → Facts).
NODE_KINDS = {MemoryNode.RefKind.FACT: pgettext_lazy("one", "事实"), MemoryNode.RefKind.EPISODE: pgettext_lazy("one", "情节"),
              MemoryNode.RefKind.KNOWLEDGE: pgettext_lazy("one", "知识")}


@register.filter
def node_kind(kind: object) -> str:
    """A graph node kind (fact / episode / knowledge) in the interface language."""
    return str(NODE_KINDS.get(str(kind), kind))


@register.filter
def fact_source(source: object) -> str:
    """Where a fact was heard, in an operator's words (``extract:stream4``, ``api``, ``manual``, ``seed_demo``)."""
    code = str(source or "")
    if code.startswith("extract:stream") and code[len("extract:stream"):].isdigit():
        return _("从会话流 #%(id)s 的消息抽取") % {"id": code[len("extract:stream"):]}
    return str(FACT_SOURCES.get(code, code))


FACT_SOURCES = {
    "api": gettext_lazy("机器人通过 API 写入"),
    "manual": gettext_lazy("操作员在控制台改写"),
    "seed_demo": gettext_lazy("演示数据"),
    "": "—",
}


@register.filter
def source_stream(source: object) -> int | None:
    """The stream id of an extraction source (``extract:stream4`` → 4), else None."""
    code = str(source or "")
    rest = code[len("extract:stream"):] if code.startswith("extract:stream") else ""
    return int(rest) if rest.isdigit() else None


# --- the turn inspector's rows (a hundred candidates a page: built in Python, not by a template each) ----------

def _field(obj: object, name: str) -> object:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


#: (label, attribute, digits) of a candidate's score terms, in the order the inspector lists them
SCORE_TERMS = (
    ("BM25", "bm25", 3),
    (gettext_lazy("词面相关度"), "lexical_relevance", 3),
    (gettext_lazy("词面覆盖"), "coverage", 3),
    (gettext_lazy("余弦"), "cosine", 3),
    (gettext_lazy("融合相关度"), "relevance", 3),
    (gettext_lazy("校准相关度"), "calibrated", 3),
    (gettext_lazy("留存度"), "retention", 3),
    (gettext_lazy("留存项"), "prior", 3),
    (gettext_lazy("出处对话相符"), "told", 3),
    (gettext_lazy("得分"), "score", 4),
)


_TERM_TEXT: dict[str, tuple[list[tuple[str, str, int]], str, str, str]] = {}


def _term_text() -> tuple[list[tuple[str, str, int]], str, str, str]:
    """The score terms' labels and the block's words, translated and escaped once per language."""
    language = get_language() or ""
    if language not in _TERM_TEXT:
        _TERM_TEXT[language] = ([(str(escape(label)), name, digits) for label, name, digits in SCORE_TERMS],
                                str(escape(_("含最特别的词"))), str(escape(_("记录时的词面得分"))), str(escape(_("每一项得分"))))
    return _TERM_TEXT[language]


@register.simple_tag
def score_terms(c: object) -> str:
    """A candidate's every score term as the inspector's ``<details>`` (``c``: a :class:`tuning.inspection.Candidate`).
    The values are :func:`num`'s digits (nothing to escape); the words are escaped once per language."""
    terms, rarest, recorded_label, summary = _term_text()
    fact = _field(c, "fact")
    rows = []
    for label, name, digits in terms:
        value = num(_field(fact, name), digits)
        if name == "coverage" and _field(fact, "rarest"):
            value += " · " + rarest
        rows.append(f"<dt>{label}</dt><dd>{value}</dd>")
    recorded = _field(c, "recorded")
    if recorded:
        rows.append(f"<dt>{recorded_label}</dt><dd>{num(_field(recorded, 'score'), 4)}</dd>")
    return mark_safe(  # noqa: S308 — escaped words, numbers
        f'<details class="numbers"><summary>{summary}</summary>\n<dl class="kv">{"".join(rows)}</dl>\n</details>')


@register.simple_tag(takes_context=True)
def label_buttons(context: template.Context, c: object, added: bool = False) -> str:
    """The relevant / not relevant / clear form of one candidate (or of a fact added by search), and who labelled it.

    ``can_label`` and ``turn`` come from the page; the form posts to the turn's label view (htmx swaps the row, or
    the list of added facts), and works without JavaScript."""
    fact_id = _field(_field(c, "fact"), "id")
    label = _field(c, "label")
    relevant = bool(label) and bool(_field(label, "relevant"))
    parts = []
    if context.get("can_label"):
        turn = context["turn"]
        key = ("turn_label_url", turn.pk)
        url = context.render_context.get(key) or reverse("console:turn_label", args=[turn.pk])
        context.render_context[key] = url
        token = context.get("csrf_token")
        csrf = format_html('<input type="hidden" name="csrfmiddlewaretoken" value="{}">', token) if token and str(
            token) != "NOTPROVIDED" else ""
        target = "#added-labels" if added else f"#fact-{fact_id}"
        clear = format_html(' <button type="submit" name="relevant" value="clear" class="link">{}</button>',
                            _("清除")) if label else ""
        parts.append(format_html(
            '<form class="inline label-form" method="post" action="{url}" hx-post="{url}" hx-target="{target}" '
            'hx-swap="outerHTML">{csrf}<input type="hidden" name="fact" value="{fact}">'
            ' <button type="submit" name="relevant" value="yes" class="{yes_class}" aria-pressed="{yes}">{yes_text}</button>'
            ' <button type="submit" name="relevant" value="no" class="{no_class}" aria-pressed="{no}">{no_text}</button>'
            '{clear}</form>',
            url=url, target=target, csrf=csrf, fact=fact_id, clear=clear,
            yes_class="primary" if relevant else "", yes="true" if relevant else "false", yes_text=_("相关"),
            no_class="danger" if label and not relevant else "", no="true" if label and not relevant else "false",
            no_text=_("不相关"),
        ))
    if label:
        parts.append(format_html('<div class="small muted label-who">{} · {}</div>', _field(label, "user"),
                                 ms(_field(label, "at"))))
    elif not context.get("can_label"):
        parts.append(format_html('<span class="muted small">{}</span>', _("未标注")))
    return mark_safe("\n".join(parts))  # noqa: S308 — every part went through format_html
