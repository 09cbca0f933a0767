"""Console pages of the memory layers: dashboard, streams, episodes, facts, knowledge,
association graph, recall playground, imports and jobs.

Every view is a short function: check permissions, validate a form, call a selector
or service, render one template (or one of its partials for htmx). Nothing here
writes memory rows directly; writes go through ``memory.services`` / ``memory.pipeline``.
"""
from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import reswap, trigger_client_event

from console import presenters
from console.forms import (
    EpisodeSearchForm,
    FactFilterForm,
    GraphForm,
    ImportForm,
    LabelForm,
    MessageFilterForm,
    PlaygroundForm,
    ReplayForm,
    SearchForm,
    SpreadForm,
    TurnFilterForm,
)
from curation import selectors as journal
from curation.presenters import decorate_facts
from memory import broker, pipeline, recall, selectors, services
from memory.fields import page_of
from memory.management.commands.ensure_roles import ROLES
from memory.models import (
    Fact,
    ImportBatch,
    Job,
    Stream,
    Turn,
)
from tuning import evaluation, inspection, relevance
from tuning import services as tuning_services

log = logging.getLogger(__name__)

VIEW = "memory.view_fact"
#: Event kinds the dashboard lists under "recent events".
DASHBOARD_EVENTS = [
    "memory_fact_scope_blocked",
    "memory_ppr_timeout",
    "memory_extract_failed",
    "summary_batch_skipped",
    "fact_extract_batch_skipped",
]


def _partial(request: HttpRequest, template_name: str, partial: str) -> str:
    """The region an htmx request swaps, else the page (a history restore is no HX-Request: base.html)."""
    return f"{template_name}#{partial}" if request.htmx else template_name


# --- dashboard -------------------------------------------------------------------


@login_required
@permission_required(VIEW, raise_exception=True)
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    now = services.now_ms()
    queues = selectors.stream_queues()
    context = {
        "glance": selectors.at_a_glance(now=now, pending=sum(q["pending"] for q in queues)),
        "today": timezone.localtime(dt.datetime.fromtimestamp(now / 1000, tz=dt.UTC)).date(),
        "layers": selectors.layer_counts(),
        "queues": queues,
        "backlog": presenters.backlog(queues),
        "vectors": selectors.vector_coverage(),
        "edges": selectors.edge_stats(),
        "events": selectors.recent_events(kinds=DASHBOARD_EVENTS, limit=20),
        "now": now,
    }
    return render(request, "console/dashboard.html", context)


@login_required
@permission_required(VIEW, raise_exception=True)
@require_GET
def worker_health(request: HttpRequest) -> HttpResponse:
    health = cache.get("console:worker-health")
    if health is None:
        health = presenters.ping_workers()
        cache.set("console:worker-health", health, 15)
    if request.htmx:
        return render(request, "console/dashboard.html#worker-health", {"health": health})
    context = {"health": health, "waiting": presenters.broker_queue_length(), "jobs": selectors.recent_jobs(limit=5),
               "backlog": presenters.backlog(selectors.stream_queues())}
    return render(request, "console/worker_health.html", context)


# --- streams and episodes --------------------------------------------------------


@login_required
@permission_required("memory.view_message", raise_exception=True)
@require_GET
def streams(request: HttpRequest) -> HttpResponse:
    rows = selectors.stream_rows()
    return render(request, "console/streams.html", {"streams": rows})


@login_required
@permission_required("memory.view_message", raise_exception=True)
@require_GET
def stream(request: HttpRequest, pk: int) -> HttpResponse:
    obj = get_object_or_404(Stream, pk=pk)
    form = SearchForm(request.GET)
    hits = None
    if form.is_valid() and form.cleaned_data["q"]:
        # the bot's ``inspect`` action (message search) exactly as a turn would run it
        hits = presenters.attach_senders(recall.inspect_messages(stream_id=obj.pk, query=form.cleaned_data["q"], limit=20))
        if request.htmx:
            return render(request, "console/stream.html#message-hits", {"hits": hits, "form": form, "stream": obj})
    batches = page_of(request, selectors.episode_batches(stream_id=obj.pk), 20)
    message_form = MessageFilterForm(request.GET, speakers=selectors.stream_speakers(stream_id=obj.pk))
    message_form.is_valid()
    messages_page = page_of(
        request, selectors.filter_messages(obj, getattr(message_form, "cleaned_data", {})), param="mpage"
    )
    messages_page.object_list = presenters.attach_senders(messages_page.object_list)
    if request.htmx.target == "stream-messages":
        return render(request, "console/stream.html#stream-messages",
                      {"stream": obj, "message_form": message_form, "messages_page": messages_page})
    context = {
        "stream": obj,
        "message_form": message_form,
        "messages_page": messages_page,
        "working": presenters.attach_senders(selectors.working_memory(stream_id=obj.pk, limit=40)),
        "batches": batches,
        "form": form,
        "hits": hits,
    }
    return render(request, "console/stream.html", context)


@login_required
@permission_required("memory.view_episode", raise_exception=True)
@require_GET
def episodes(request: HttpRequest) -> HttpResponse:
    form = EpisodeSearchForm(request.GET)
    form.is_valid()
    data = getattr(form, "cleaned_data", {})
    hits = None
    if data.get("q"):
        hits = presenters.search_episodes(query=data["q"], stream_id=data["stream"].pk if data.get("stream") else None)
        page = None
    else:
        qs = selectors.episode_list(stream=data.get("stream"), placeholders=bool(data.get("placeholders")))
        page = page_of(request, qs)
        presenters.attach_cues(page.object_list)
        presenters.placeholder_reasons(page.object_list)
    template = _partial(request, "console/episodes.html", "episode-results")
    return render(request, template, {"form": form, "page": page, "hits": hits})


@login_required
@permission_required("memory.view_episode", raise_exception=True)
@require_GET
def episode(request: HttpRequest, pk: int) -> HttpResponse:
    """One episode: its summary and cues, and the messages it summarises."""
    obj = get_object_or_404(selectors.episodes_with_counts(), pk=pk)
    presenters.attach_cues([obj])
    presenters.placeholder_reasons([obj])
    page = page_of(request, obj.messages.order_by("id"))
    page.object_list = presenters.attach_senders(page.object_list)
    return render(request, "console/episode.html", {"ep": obj, "page": page})


# --- facts -----------------------------------------------------------------------


@login_required
@permission_required(VIEW, raise_exception=True)
@require_GET
def facts(request: HttpRequest) -> HttpResponse:
    now = services.now_ms()
    form = FactFilterForm(request.GET)
    form.is_valid()
    data = {k: v for k, v in getattr(form, "cleaned_data", {}).items() if v}
    qs = presenters.filter_facts(Fact.objects.select_related("person"), data)
    breakdown: dict[int, Any] = {}
    if data.get("q"):
        hits = presenters.search_facts(query=data["q"], now=now)
        # The ranked hits, then (the search honours the state filter) facts recall never sees, matched by text.
        rows = selectors.match_facts(qs, data["q"], ranked=[h.id for h in hits])
        breakdown = {h.id: h for h in hits}
        page = page_of(request, rows)
    else:
        page = page_of(request, qs.order_by("-updated_at", "-id"))
    decorate_facts(page.object_list, now=now, breakdown=breakdown)
    context = {
        "form": form,
        "page": page,
        "kinds": selectors.fact_kinds(),
        "searching": bool(data.get("q")),
        "next_url": request.get_full_path(),
    }
    return render(request, _partial(request, "console/facts.html", "fact-results"), context)


def _where_heard(request: HttpRequest, fact: Fact) -> dict[str, Any]:
    """The message the fact was heard in when it is recorded, else the likeliest ones of its stream (messages are
    shown to those who may read them)."""
    if not request.user.has_perm("memory.view_message"):
        return {"heard_in": None, "sources": []}
    message = presenters.heard_in(fact)
    return {"heard_in": message, "sources": [] if message is not None else presenters.likely_sources(fact)}


@login_required
@permission_required(VIEW, raise_exception=True)
@require_GET
def fact(request: HttpRequest, pk: int) -> HttpResponse:
    now = services.now_ms()
    obj = get_object_or_404(Fact.objects.select_related("person"), pk=pk)
    decorate_facts([obj], now=now)
    context = {
        "fact": obj,
        "curve": presenters.decay_curve_svg(obj, now=now),
        "chain": selectors.supersede_chain(obj),
        "operations": journal.operations(touching=obj.pk)[:50],
        "neighbours": presenters.neighbours("fact", obj.pk, now=now),
        **_where_heard(request, obj),
        "now": now,
        "next_url": request.get_full_path(),
    }
    return render(request, "console/fact.html", context)


# --- knowledge and imports -------------------------------------------------------


@login_required
@permission_required("memory.view_knowledge", raise_exception=True)
@require_GET
def knowledge(request: HttpRequest) -> HttpResponse:
    form = SearchForm(request.GET)
    hits = None
    page = None
    if form.is_valid() and form.cleaned_data["q"]:
        # the bot's ``consult`` path; touch=False: a console search is not a consultation (hit counts stay)
        hits = recall.consult_knowledge(query=form.cleaned_data["q"], limit=20, touch=False)
    else:
        page = page_of(request, selectors.knowledge_list())
    return render(request, _partial(request, "console/knowledge.html", "knowledge-results"),
                  {"form": form, "hits": hits, "page": page})


@login_required
@permission_required("memory.import_knowledge", raise_exception=True)
@require_http_methods(["GET", "POST"])
def imports(request: HttpRequest) -> HttpResponse:
    form = ImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            job = pipeline.start_import(text=data["text"], origin_name=data.get("origin_name") or "", kind=data["kind"],
                                        user=request.user.get_username())
        except (pipeline.ImportLimitError, pipeline.ImportBusyError) as exc:
            form.add_error(None, str(exc))
        except broker.BrokerUnavailable as exc:  # the job and batch are already marked failed
            form.add_error(None, pipeline.IMPORT_NOT_SENT.format(reason=exc))
        else:
            messages.success(request, _("导入任务 #%(id)s 已开始。") % {"id": job.pk})
            return redirect("console:imports")
    batches = selectors.import_batches(limit=50)
    jobs = selectors.recent_jobs(kind="import", limit=5)
    status = 400 if request.method == "POST" else 200
    return render(request, "console/imports.html", {"form": form, "batches": batches, "jobs": jobs}, status=status)


@login_required
@permission_required("memory.import_knowledge", raise_exception=True)
@require_http_methods(["GET", "POST"])
def import_delete(request: HttpRequest, pk: int) -> HttpResponse:
    batch = get_object_or_404(ImportBatch, pk=pk)
    if request.method == "POST":
        deleted = pipeline.delete_batch(batch.pk)
        messages.success(request, _("已删除导入批次 #%(id)s 的 %(n)s 条知识。") % {"id": batch.pk, "n": deleted})
        return redirect("console:imports")
    preview = pipeline.delete_batch_preview(batch.pk)
    more = preview["count"] - len(preview["samples"])  # the preview shows a few; the page says how many it does not
    return render(request, "console/import_delete.html", {"batch": batch, "preview": preview, "more": more})


# --- association -----------------------------------------------------------------


@login_required
@permission_required("memory.preview_association", raise_exception=True)
@require_GET
def graph(request: HttpRequest) -> HttpResponse:
    now = services.now_ms()
    form = GraphForm(request.GET)
    data = form.cleaned_data if form.is_valid() else {}
    view = presenters.memory_graph(
        now=now, include_frozen=bool(data.get("include_frozen")), limit=data.get("max_nodes") or 200,
    )
    selected = None
    if data.get("node"):
        kind, ref_id = data["node"]
        selected = presenters.node_panel(kind, ref_id, now=now)
    spread_form = SpreadForm(request.GET if ("q" in request.GET or "ref" in request.GET) else None)
    preview = presenters.spread_preview(spread_form.cleaned_data, now=now) if spread_form.is_valid() else None
    if preview:
        view.mark(preview)
    view.place_labels(selected=f"{data['node'][0]}:{data['node'][1]}" if data.get("node") else "")
    context = {"graph": view, "form": form, "selected": selected, "spread_form": spread_form, "preview": preview}
    # htmx picks #graph-area out of the page (hx-select): the rings of a preview are on the drawing.
    bad_id = "node" in form.errors or "ref" in spread_form.errors
    response = render(request, "console/graph.html", context, status=400 if bad_id else 200)
    # a refusal swaps #graph-area like any answer (static/console.js), also under DEBUG
    return reswap(response, "outerHTML") if bad_id and request.htmx else response


# --- recall playground -----------------------------------------------------------


@login_required
@permission_required("memory.preview_recall", raise_exception=True)
@require_GET
def playground(request: HttpRequest) -> HttpResponse:
    form = PlaygroundForm(request.GET if "text" in request.GET else None)
    result = None
    if form.is_valid():
        result = presenters.preview_turn(form.cleaned_data)
    return render(request, _partial(request, "console/playground.html", "playground-result"),
                  {"form": form, "result": result})


# --- turns -----------------------------------------------------------------------

TURNS = "memory.view_turn"
LABEL = "tuning.label_relevance"


@login_required
@permission_required(TURNS, raise_exception=True)
@require_GET
def turns(request: HttpRequest) -> HttpResponse:
    """Recorded turns, newest first, with filters; each row says whether a person labelled it."""
    form = TurnFilterForm(request.GET)
    form.is_valid()
    data = getattr(form, "cleaned_data", {})
    page = page_of(request, inspection.filter_turns(data))
    inspection.decorate_turns(page.object_list)
    context = {"form": form, "page": page, "progress": relevance.progress(), "fact": data.get("fact")}
    return render(request, _partial(request, "console/turns.html", "turn-results"), context)


def _turn_context(request: HttpRequest, turn: Turn) -> dict[str, Any]:
    view = inspection.inspect_turn(turn)
    view.previous, view.next = selectors.turn_neighbours(turn)
    search = SearchForm(request.GET)
    query = search.cleaned_data["q"] if search.is_valid() else ""
    return {
        "view": view, "turn": turn, "search": search, "query": query,
        "addable": relevance.addable_facts(turn, query) if query else [],
        "progress": relevance.progress(),
        "can_label": request.user.has_perm(LABEL),
        "profiles": tuning_services.list_profiles(),
        "replay_form": ReplayForm(request.GET),
    }


@login_required
@permission_required(TURNS, raise_exception=True)
@require_GET
def turn(request: HttpRequest, pk: int) -> HttpResponse:
    """One turn, as it happened: why each fact was or was not in the prompt; labels; replay under two profiles."""
    obj = get_object_or_404(Turn.objects.select_related("stream", "speaker"), pk=pk)
    if request.GET.get("part") == "counts":  # the label counts, refreshed after a label (labelsChanged)
        counts = {"label_count": len(relevance.turn_labels(obj.pk))}
        return render(request, "console/turn.html#counts", {"turn": obj, "view": counts, "progress": relevance.progress()})
    context = _turn_context(request, obj)
    if request.htmx.target == "add-results":
        return render(request, "console/turn.html#add-results", context)
    if "profile" in request.GET:
        context["replay"] = _replay(obj, request.GET.get("profile", ""))
    return render(request, "console/turn.html", context)


def _replay(obj: Turn, profile: str) -> dict[str, Any] | None:
    """Active profile (A) and ``profile`` (B), ranked afresh; None with a message when B is unknown."""
    try:
        a = evaluation.resolve_target()
        b = evaluation.resolve_target(profile=profile or tuning_services.active_profile_name())
    except tuning_services.ProfileError as exc:
        return {"error": str(exc)}
    return inspection.replay(obj, a, b)


@login_required
@permission_required(TURNS, raise_exception=True)
@require_GET
def turn_replay(request: HttpRequest, pk: int) -> HttpResponse:
    """The replay panel alone (htmx), or the inspector with it (no JavaScript)."""
    obj = get_object_or_404(Turn.objects.select_related("stream", "speaker"), pk=pk)
    if not request.htmx:
        return redirect(reverse("console:turn", args=[obj.pk]) + f"?profile={request.GET.get('profile', '')}#replay")
    return render(request, "console/turn.html#replay", {"turn": obj, "replay": _replay(obj, request.GET.get("profile", ""))})


@login_required
@permission_required(LABEL, raise_exception=True)
@require_POST
def turn_label(request: HttpRequest, pk: int) -> HttpResponse:
    """Label one fact of the turn; htmx swaps the fact's row (and the counts), otherwise back to the page."""
    obj = get_object_or_404(Turn, pk=pk)
    form = LabelForm(request.POST)
    if not form.is_valid():
        return _label_refused(request, obj, _("标注有误：") + "；".join(e for errs in form.errors.values() for e in errs))
    fact_id = form.cleaned_data["fact"]
    try:
        relevance.set_label(turn_id=obj.pk, fact_id=fact_id, relevant=form.value(), user=request.user.get_username())
    except relevance.LabelError as exc:
        return _label_refused(request, obj, str(exc), status=exc.status)
    if request.htmx:
        context = _turn_context(request, obj)
        row = next((c for c in context["view"].candidates if c.fact.id == fact_id), None)
        template = "console/turn.html#candidate-row" if row is not None else "console/turn.html#added"
        response = render(request, template, {**context, "c": row, "oob": True})
        return trigger_client_event(response, "labelsChanged", {"turn": obj.pk, "fact": fact_id})
    return redirect(reverse("console:turn", args=[obj.pk]) + f"#fact-{fact_id}")


def _label_refused(request: HttpRequest, obj: Turn, message: str, *, status: int = 400) -> HttpResponse:
    if request.htmx:
        return render(request, "console/turn.html#label-refused", {"message": message}, status=409 if status == 409 else 400)
    messages.error(request, message)
    return redirect("console:turn", obj.pk)


# --- help ------------------------------------------------------------------------

#: What each role can do: (what, the permission that allows it). README.md has a table like it.
CAPABILITIES = [
    (gettext_lazy("浏览记忆：总览、会话流、情节、事实、知识、后台任务"), VIEW),
    (gettext_lazy("整理事实：永久保留、标失效、恢复、改写；裁决冲突组"), "curation.curate_fact"),
    (gettext_lazy("查看操作流水"), "curation.view_factoperation"),
    (gettext_lazy("撤销操作"), "curation.undo_operation"),
    (gettext_lazy("遗忘消息、事实、情节、人物或会话流"), "memory.forget_memory"),
    (gettext_lazy("导出一个人物存下的全部数据"), "memory.export_person"),
    (gettext_lazy("导入知识、删除导入批次"), "memory.import_knowledge"),
    (gettext_lazy("联想网络与扩散预览"), "memory.preview_association"),
    (gettext_lazy("回合：看机器人每一轮想起了什么、为什么"), TURNS),
    (gettext_lazy("标注回合里哪些事实该进提示词"), LABEL),
    (gettext_lazy("召回演练"), "memory.preview_recall"),
    (gettext_lazy("检索调优：评估、对比、按标注拟合、应用参数方案"), "tuning.tune_retrieval"),
]


@login_required
@require_GET
def help_page(request: HttpRequest) -> HttpResponse:
    """Who can do what (from the role definitions themselves), and how the console is organised."""
    rows = [(label, [perm in ROLES[role] for role in ROLES] + [True]) for label, perm in CAPABILITIES]
    rows.append((gettext_lazy("管理后台"), [False for _role in ROLES] + [True]))
    return render(request, "console/help.html", {"roles": list(ROLES), "rows": rows})


# --- jobs ------------------------------------------------------------------------


@login_required
@permission_required("memory.view_job", raise_exception=True)
@require_GET
def jobs(request: HttpRequest) -> HttpResponse:
    rows = selectors.recent_jobs(limit=50)
    return render(request, "console/jobs.html", {"jobs": rows, "any_running": any(not j.finished for j in rows)})


@login_required
@permission_required("memory.view_job", raise_exception=True)
@require_GET
def job(request: HttpRequest, pk: int) -> HttpResponse:
    obj = get_object_or_404(Job, pk=pk)
    # A running card polls itself (hx-trigger "every 2s"); the finished card is
    # rendered without the trigger, so swapping it in stops the polling.
    if not request.htmx:
        return render(request, "console/job.html", {"job": obj})
    response = render(request, "console/jobs.html#job-card", {"job": obj})
    if obj.finished:
        # The last poll: panels that depend on the job (the import batches) refresh themselves.
        trigger_client_event(response, "jobFinished", {"id": obj.pk, "kind": obj.kind})
    return response
