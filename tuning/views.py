"""Console pages of retrieval tuning (permission ``tuning.tune_retrieval``).

* index: the active profile, the whitelist table with a draft column (evaluate draft /
  evaluate active / save draft as profile / compare draft with …), stored profiles
  (apply, export, delete), a comparison picker and the recent evaluation jobs;
* job: progress (htmx polling) and, once done, the evaluation report or the comparison.

Every write goes through :mod:`tuning.services` / :mod:`tuning.evaluation`.
"""
from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from memory import recall
from memory.broker import BrokerUnavailable
from memory.models import Job, Turn
from tuning import evaluation, fit, relevance, services
from tuning.forms import (
    ACTIVE_CHOICE,
    CompareForm,
    DraftForm,
    FitForm,
    LabelImportForm,
    draft_initial,
    target_for_choice,
)
from tuning.labels import GROUP_LABELS
from tuning.models import TuningOperation
from tuning.services import ProfileError

PERM = "tuning.tune_retrieval"
LABEL = "tuning.label_relevance"
RECENT_JOBS = 10
JOB_KINDS = ("evaluate", "compare", "fit")
PROFILE_OPS = (TuningOperation.Op.SAVE, TuningOperation.Op.APPLY, TuningOperation.Op.ROLLBACK, TuningOperation.Op.DELETE)
LABEL_OPS = (TuningOperation.Op.LABEL, TuningOperation.Op.UNLABEL, TuningOperation.Op.IMPORT)


def tuner_required(view):
    return login_required(permission_required(PERM, raise_exception=True)(view))


def _user(request: HttpRequest) -> str:
    return request.user.get_username()


def _param_rows(overrides: dict[str, Any], form: DraftForm) -> list[dict[str, Any]]:
    rows = []
    configured_limits = recall.configured_limits()
    for row in form.draft_rows():
        param, spec = row["param"], row["spec"]
        default = configured_limits.get(param, spec.legacy)
        rows.append(
            {
                **row,
                "overridden": param in overrides,
                "current": overrides.get(param, default),
                "default": default,
                "from_config": param in configured_limits,
            }
        )
    return rows


def _index_context(request: HttpRequest, form: DraftForm | None = None) -> dict[str, Any]:
    active = services.active_profile_name()
    overrides = services.load_profile_params(active) or {}
    form = form or DraftForm(initial={**draft_initial(overrides), "max_turns": evaluation.DEFAULT_MAX_TURNS})
    profiles = services.list_profiles()
    return {
        "active": active,
        "overrides": overrides,
        "rows": _param_rows(overrides, form),
        "form": form,
        "profiles": profiles,
        "compare_form": CompareForm(initial={"a": ACTIVE_CHOICE, "b": "", "max_turns": evaluation.DEFAULT_MAX_TURNS}),
        "active_choice": ACTIVE_CHOICE,
        "jobs": Job.objects.filter(kind__in=JOB_KINDS).order_by("-id")[:RECENT_JOBS],
        "turn_count": Turn.objects.count(),
        "scorable_count": Turn.objects.filter(confirmed_at__isnull=False).exclude(prompt_fact_ids=[]).count(),
        "max_turns_limit": evaluation.MAX_TURNS_LIMIT,
        "labels": relevance.progress(),
        "journal": relevance.recent_operations(limit=20, ops=PROFILE_OPS),
        "fit_min_turns": fit.MIN_TURNS, "fit_min_dev": fit.MIN_DEV_TURNS, "fit_min_heldout": fit.MIN_HELDOUT_TURNS,
        "fit_budget": fit.DEFAULT_BUDGET, "fit_max_budget": fit.MAX_BUDGET,
    }


@tuner_required
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "tuning/index.html", _index_context(request))


def _refused(request: HttpRequest, form: DraftForm) -> HttpResponse:
    messages.error(request, _("草稿有误，未执行：") + "；".join(e for errs in form.errors.values() for e in errs))
    return render(request, "tuning/index.html", _index_context(request, form), status=400)


@tuner_required
@require_POST
def draft(request: HttpRequest) -> HttpResponse:
    """One form, four buttons: evaluate draft, evaluate active, save as profile, compare."""
    form = DraftForm(request.POST)
    action = request.POST.get("action", "evaluate_draft")
    if action == "evaluate_active":
        try:
            job = evaluation.submit_evaluation(
                evaluation.resolve_target(), max_turns=_max_turns(request), user=_user(request)
            )
        except BrokerUnavailable as exc:
            return _not_sent(request, exc)
        return redirect("tuning:job", job.pk)
    if not form.is_valid():
        return _refused(request, form)
    params = form.cleaned_data["params"]
    max_turns = form.cleaned_data["max_turns"]
    try:
        if action == "save":
            row = services.save_profile(form.cleaned_data["name"], params, user=_user(request))
            messages.success(request, _("已保存参数方案「%(name)s」（未应用）。") % {"name": row.name})
            return redirect("tuning:index")
        if action == "compare":
            base = target_for_choice(form.cleaned_data.get("compare_with") or ACTIVE_CHOICE)
            draft_target = evaluation.resolve_target(params=params)
            job = evaluation.submit_comparison(base, draft_target, max_turns=max_turns, user=_user(request))
            return redirect("tuning:job", job.pk)
        job = evaluation.submit_evaluation(
            evaluation.resolve_target(params=params), max_turns=max_turns, user=_user(request)
        )
    except ProfileError as exc:
        messages.error(request, str(exc))
        return render(request, "tuning/index.html", _index_context(request, form), status=exc.status)
    except BrokerUnavailable as exc:
        return _not_sent(request, exc)
    return redirect("tuning:job", job.pk)


def _max_turns(request: HttpRequest) -> int:
    return evaluation.clamp_max_turns(request.POST.get("max_turns") or evaluation.DEFAULT_MAX_TURNS)


@tuner_required
@require_POST
def apply(request: HttpRequest) -> HttpResponse:
    try:
        result = services.apply_profile(request.POST.get("name", ""), user=_user(request))
    except ProfileError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            _("已应用「%(name)s」：覆盖 %(n)d 项参数，所有进程一秒内生效。") % {"name": result["profile"], "n": len(result["params"])},
        )
    return redirect("tuning:index")


@tuner_required
@require_POST
def rollback(request: HttpRequest) -> HttpResponse:
    services.rollback_to_default(user=_user(request))
    messages.success(request, _("已回滚到 default（无覆盖）。"))
    return redirect("tuning:index")


@tuner_required
@require_POST
def delete(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("name", "")
    try:
        was_active = services.active_profile_name() == name.strip()
        deleted = services.delete_profile(name, user=_user(request))
    except ProfileError as exc:
        messages.error(request, str(exc))
    else:
        if not deleted:
            messages.warning(request, _("参数方案「%(name)s」不存在。") % {"name": name})
        elif was_active:
            messages.success(request, _("已删除生效中的「%(name)s」，已回落到 default。") % {"name": name})
        else:
            messages.success(request, _("已删除参数方案「%(name)s」。") % {"name": name})
    return redirect("tuning:index")


@tuner_required
@require_GET
def export(request: HttpRequest) -> HttpResponse:
    name = request.GET.get("name", "").strip() or services.active_profile_name()
    try:
        data = services.export_profile(name)
    except ProfileError as exc:
        raise Http404(str(exc)) from exc
    response = JsonResponse(data, json_dumps_params={"ensure_ascii": False, "indent": 2})
    response["Content-Disposition"] = f"attachment; filename=\"retrieval-profile-{_ascii(name)}.json\""
    return response


def _ascii(name: str) -> str:
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name)
    return safe or "profile"


@tuner_required
@require_POST
def compare(request: HttpRequest) -> HttpResponse:
    form = CompareForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("请选择要对比的两组参数。"))
        return redirect("tuning:index")
    try:
        a = target_for_choice(form.cleaned_data["a"])
        b = target_for_choice(form.cleaned_data["b"])
    except ProfileError as exc:
        messages.error(request, str(exc))
        return redirect("tuning:index")
    try:
        job = evaluation.submit_comparison(a, b, max_turns=form.cleaned_data["max_turns"], user=_user(request))
    except BrokerUnavailable as exc:
        return _not_sent(request, exc)
    return redirect("tuning:job", job.pk)


def _not_sent(request: HttpRequest, exc: BrokerUnavailable) -> HttpResponse:
    """The broker is down: the job was created and marked failed; say so and go back."""
    messages.error(request, _("无法提交后台任务（%(reason)s），请稍后重试。") % {"reason": exc})
    return redirect("tuning:index")


def _tuning_job(pk: int) -> Job:
    return get_object_or_404(Job, pk=pk, kind__in=JOB_KINDS)


def _report_context(job: Job, request: HttpRequest) -> dict[str, Any]:
    result = job.result or {}
    ctx: dict[str, Any] = {"job": job, "report": result, "group_labels": GROUP_LABELS}
    if job.status != Job.Status.DONE or not result:
        return ctx
    if result.get("kind") == "compare":
        only_changed = request.GET.get("changed") == "1"
        turns = result.get("per_turn", [])
        facts = result.get("facts", {})
        rows = []
        for t in turns:
            if only_changed and not (t["moved_in"] or t["moved_out"] or t["order_changed"]):
                continue
            positives, negatives = set(t["positives"]), set(t.get("irrelevant") or [])
            rows.append(
                {
                    **t,
                    "moved_in_facts": [(f, facts.get(str(f), ""), f in positives, f in negatives) for f in t["moved_in"]],
                    "moved_out_facts": [(f, facts.get(str(f), ""), f in positives, f in negatives) for f in t["moved_out"]],
                }
            )
        ctx.update(
            {
                "rows": rows,
                "only_changed": only_changed,
                "sides": [("a", result["a"]), ("b", result["b"])],
                "groups": [
                    (g, GROUP_LABELS[g], [
                        (pool, result["a"]["groups"].get(g, {}).get(pool, {}), result["b"]["groups"].get(g, {}).get(pool, {}),
                         result["difference"].get(g, {}).get(pool, {}))
                        for pool in evaluation.POOLS
                    ])
                    for g in evaluation.GROUPS
                    if g in result["a"]["groups"]  # a report from before the desktop row has no "desktop"
                ],
            }
        )
    else:
        ctx["groups"] = [(g, GROUP_LABELS[g], result["groups"][g]) for g in evaluation.GROUPS if g in result["groups"]]
        ctx["rows"] = result.get("per_turn", [])
    ctx["sample_all"] = ((result.get("a") or result).get("groups") or {}).get("all") or {}
    ctx["few_scorable"] = _few_scorable(result)
    return ctx


#: Below this many scored turns a report says its numbers are anecdotes (one turn moves nDCG by a few points).
FEW_SCORABLE = 30


def _few_scorable(result: dict[str, Any]) -> int | None:
    """How many turns could be scored, when that is too few to trust a difference (else None)."""
    overall = ((result.get("a") or result).get("groups") or {}).get("all") or {}
    if "human" not in overall:  # a report of an earlier version
        return None
    scorable = max(overall["human"]["turns"], overall["weak"]["turns"])
    return scorable if scorable < FEW_SCORABLE else None


@tuner_required
@require_GET
def job(request: HttpRequest, pk: int) -> HttpResponse:
    job = _tuning_job(pk)
    if job.kind == "fit":
        return render(request, "tuning/fit.html", _fit_context(job, request))
    template = "tuning/compare.html" if job.kind == "compare" else "tuning/report.html"
    return render(request, template, _report_context(job, request))


# --- fit -----------------------------------------------------------------------------


@tuner_required
@require_POST
def fit_start(request: HttpRequest) -> HttpResponse:
    """Start a fit; too few labelled turns is refused on the tuning page, saying how many are needed."""
    form = FitForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("拟合参数有误：") + "；".join(e for errs in form.errors.values() for e in errs))
        return redirect("tuning:index")
    try:
        job = fit.submit_fit(budget=form.cleaned_data["budget"], k=form.cleaned_data.get("k"), user=_user(request))
    except fit.FitRefused as exc:
        messages.error(request, _("不能拟合：%(why)s") % {"why": _fit_refusal(exc)})
        return redirect(reverse("tuning:index") + "#fit")
    except ProfileError as exc:
        messages.error(request, str(exc))
        return redirect("tuning:index")
    except BrokerUnavailable as exc:
        return _not_sent(request, exc)
    return redirect("tuning:job", job.pk)


def _fit_refusal(exc: fit.FitRefused) -> str:
    return _(
        "标注太少，拟合不出可信的结果：需要至少 %(need)s 个回合各有至少一条「相关」标注"
        "（%(dev)s 个用来挑选参数，%(held)s 个留作检验），现在只有 %(have)s 个。"
    ) % {"need": exc.needed, "dev": fit.MIN_DEV_TURNS, "held": fit.MIN_HELDOUT_TURNS, "have": exc.have}


def _fit_context(job: Job, request: HttpRequest) -> dict[str, Any]:
    result = job.result or {}
    ctx: dict[str, Any] = {"job": job, "report": result}
    if job.status != Job.Status.DONE or not result:
        return ctx
    facts = result.get("facts", {})
    only = request.GET.get("split") if request.GET.get("split") in ("heldout", "dev") else ""
    rows = []
    for t in result.get("per_turn", []):
        if only and t["split"] != only:
            continue
        relevant, irrelevant = set(t["relevant"]), set(t["irrelevant"])
        rows.append({
            **t,
            "changed": bool(t["moved_in"] or t["moved_out"]),
            "moved_in_facts": [(f, facts.get(str(f), ""), f in relevant, f in irrelevant) for f in t["moved_in"]],
            "moved_out_facts": [(f, facts.get(str(f), ""), f in relevant, f in irrelevant) for f in t["moved_out"]],
        })
    rows.sort(key=lambda r: (r["split"] != "heldout", not r["changed"], r["turn_id"]))  # held out, changed first
    ctx.update({
        "rows": rows, "only": only, "changed": result.get("chosen", {}).get("changed", {}),
        "name": f"fit-{job.pk}", "verdict": result.get("verdict"),
    })
    return ctx


@tuner_required
@require_POST
def fit_apply(request: HttpRequest, pk: int) -> HttpResponse:
    """Save the fit's profile and apply it (one click; journalled; rollback on the tuning page)."""
    job = get_object_or_404(Job, pk=pk, kind="fit")
    try:
        result = fit.apply_fit(job, name=request.POST.get("name", ""), user=_user(request))
    except ProfileError as exc:
        messages.error(request, str(exc))
        return redirect("tuning:job", job.pk)
    messages.success(
        request,
        _("已保存并应用「%(name)s」：覆盖 %(n)d 项参数，所有进程一秒内生效；可随时回滚。")
        % {"name": result["profile"], "n": len(result["params"])},
    )
    return redirect("tuning:index")


# --- labels ----------------------------------------------------------------------------


def labeller_required(view):
    return login_required(permission_required(LABEL, raise_exception=True)(view))


@labeller_required
@require_http_methods(["GET", "POST"])
def labels(request: HttpRequest) -> HttpResponse:
    """Labelling progress, the label journal, export and import (JSON)."""
    form = LabelImportForm(request.POST or None, request.FILES or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                counts = relevance.import_labels(form.cleaned_data["labels"], user=_user(request))
            except relevance.LabelInputError as exc:
                form.add_error(None, str(exc))
                for e in exc.errors[:20]:
                    form.add_error(None, e["message"])
            else:
                messages.success(request, _("已导入：新增 %(created)s，修改 %(updated)s，未变 %(unchanged)s。") % counts)
                return redirect("tuning:labels")
        status = 400
    context = {
        "form": form,
        "progress": relevance.progress(),
        "journal": relevance.recent_operations(limit=50, ops=LABEL_OPS),
        "fit_min_turns": fit.MIN_TURNS,
    }
    return render(request, "tuning/labels.html", context, status=status)


@labeller_required
@require_GET
def labels_export(request: HttpRequest) -> HttpResponse:
    response = JsonResponse(relevance.export_labels(), json_dumps_params={"ensure_ascii": False, "indent": 1})
    response["Content-Disposition"] = 'attachment; filename="relevance-labels.json"'
    return response


@tuner_required
@require_GET
def job_json(request: HttpRequest, pk: int) -> HttpResponse:
    """The raw report (for download / scripting)."""
    job = _tuning_job(pk)
    response = HttpResponse(
        json.dumps(job.result or {}, ensure_ascii=False, indent=2), content_type="application/json; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="tuning-{job.kind}-{job.pk}.json"'
    return response

