"""Console pages of curation: fact actions, bulk actions, the conflict queue, the operation log.

Every action is a POST with CSRF. A POST without ``confirmed=1`` renders a
confirmation page (the no-JavaScript path); htmx sends ``confirmed=1`` after
its ``hx-confirm`` dialog. A successful action redirects to ``next``
(POST/redirect/GET); htmx follows the redirect and picks its region out of the
page with ``hx-select``. Refusals of ``curation.services`` (404/409/400) are
shown verbatim with that status: on the confirmation page, or for htmx as an
out-of-band message with the main swap suppressed.
"""
from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import reselect, reswap, retarget

from curation import selectors as journal
from curation import services
from curation.actions import ACTIONS, BULK_ACTIONS
from curation.forms import ConflictFilterForm, OperationFilterForm, ReplaceForm
from curation.presenters import decorate_facts
from memory import selectors
from memory import services as memory_services
from memory.fields import MAX_ID, page_of, parse_id
from memory.models import Fact, FactOperation, Person

CURATE = "curation.curate_fact"

ERROR_STATUS: dict[type[Exception], int] = {
    services.FactNotFoundError: 404,
    services.FactStateError: 409,
    services.CurationInputError: 400,
}
REFUSALS = tuple(ERROR_STATUS)


def _next_url(request: HttpRequest, default: str) -> str:
    url = request.POST.get("next") or request.GET.get("next") or ""
    if url and url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return url
    return default


def _confirmed(request: HttpRequest) -> bool:
    return request.POST.get("confirmed") == "1"


def _refused(request: HttpRequest, exc: Exception, template: str, context: dict[str, Any]) -> HttpResponse:
    """Show a refusal verbatim with its status (409 state, 400 input, 404 missing).

    htmx from a fact row or a fact page: that region re-renders with the fact's real
    state (another operator may have changed it) and the refusal beside its buttons.
    """
    status = next((code for kind, code in ERROR_STATUS.items() if isinstance(exc, kind)), 400)
    text = _("操作被拒绝：%(reason)s") % {"reason": exc}
    fact = context.get("fact")
    if request.htmx and fact is not None and status != 404:
        region = _fact_region(request, fact.pk, text, context.get("next", ""))
        if region is not None:
            return _with_status(region, status)
    if request.htmx:
        messages.error(request, text)
        return reswap(render(request, "console/_messages.html", {}, status=status), "none")
    return render(request, template, {**context, "refusal": text}, status=status)


def _with_status(response: HttpResponse, status: int) -> HttpResponse:
    response.status_code = status
    return response


def _fact_region(request: HttpRequest, pk: int, text: str, next_url: str) -> HttpResponse | None:
    """The fact's row (facts table) or summary card (fact page), fresh from the database, with ``text``."""
    target = request.htmx.target or ""
    fact = Fact.objects.select_related("person").filter(pk=pk).first()
    if fact is None:
        return None
    decorate_facts([fact], now=memory_services.now_ms())
    context = {"fact": fact, "row_refusal": text, "next_url": next_url}
    if target == f"fact-row-{pk}":
        response = render(request, "console/facts.html#fact-row", context)
        selector = f"#fact-row-{pk}"
    elif target == "fact-page":
        response = render(request, "console/fact.html#fact-summary", context)
        selector = "#fact-summary"
    else:
        return None
    retarget(response, selector)
    reselect(response, selector)
    return reswap(response, "outerHTML")


# --- single fact actions -----------------------------------------------------------


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    if action not in ACTIONS:
        raise Http404(action)
    fact = get_object_or_404(Fact.objects.select_related("person"), pk=pk)
    label, explanation = ACTIONS[action].label, ACTIONS[action].confirmation
    form = ReplaceForm(request.POST or None, initial={"content": fact.content}) if action == "replace" else None
    context = {"fact": fact, "action": action, "label": label, "explanation": explanation, "form": form,
               "next": _next_url(request, reverse("console:fact", args=[pk]))}
    if not _confirmed(request) or (form is not None and not form.is_valid()):
        return render(request, "curation/confirm.html", context, status=400 if form is not None and form.errors else 200)
    kwargs = {"content": form.cleaned_data["content"]} if form is not None else {}
    try:
        result = ACTIONS[action].service(fact_id=pk, user=request.user.get_username(), **kwargs)
    except REFUSALS as exc:
        return _refused(request, exc, "curation/confirm.html", context)
    messages.success(request, _success_text(action, pk, result))
    return redirect(context["next"])


def _success_text(action: str, pk: int, result: Any) -> str:
    if action == "replace":
        text = _("事实 #%(old)s 已取代为 #%(new)s。") % {"old": pk, "new": result.fact_id}
        if result.conflict_with:
            text += " " + _("新事实与 %(ids)s 处于同一槽位，请到冲突组裁决。") % {
                "ids": "、".join(f"#{i}" for i in result.conflict_with)
            }
        return text
    return _("事实 #%(id)s：%(label)s 已完成（操作 #%(op)s，可撤销）。") % {
        "id": pk, "label": ACTIONS[action].label, "op": result.pk,
    }


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def bulk_action(request: HttpRequest) -> HttpResponse:
    action = request.POST.get("action", "")
    raw_ids = request.POST.getlist("ids")
    ids = sorted({i for i in map(parse_id, raw_ids) if i is not None})
    next_url = _next_url(request, reverse("console:facts"))
    if any(parse_id(i) is None for i in raw_ids):
        return HttpResponseBadRequest(_("事实编号无效：必须是 1 到 %(max)s 之间的整数。") % {"max": MAX_ID},
                                      content_type="text/plain; charset=utf-8")
    if action not in BULK_ACTIONS or not ids:
        messages.error(request, _("请先勾选事实，再选择批量操作。"))
        return redirect(next_url)
    facts = list(Fact.objects.filter(pk__in=ids).select_related("person").order_by("id"))
    if not _confirmed(request):
        context = {"facts": facts, "action": action, "label": ACTIONS[action].label,
                   "explanation": ACTIONS[action].confirmation, "next": next_url}
        return render(request, "curation/bulk_confirm.html", context)
    done, refused = [], []
    for fact in facts:
        try:
            ACTIONS[action].service(fact_id=fact.pk, user=request.user.get_username())
            done.append(fact.pk)
        except REFUSALS as exc:
            refused.append(f"#{fact.pk}：{exc}")
    if done:
        messages.success(request, _("%(label)s：%(n)s 条已完成。") % {"label": ACTIONS[action].label, "n": len(done)})
    for text in refused:
        messages.error(request, _("操作被拒绝：%(reason)s") % {"reason": text})
    return redirect(next_url)


# --- conflicts ---------------------------------------------------------------------


@login_required
@permission_required("memory.view_fact", raise_exception=True)
@require_GET
def conflicts(request: HttpRequest) -> HttpResponse:
    person_id = request.GET.get("person")
    person_id = parse_id(person_id) if person_id else None
    all_keys = selectors.conflict_group_keys()
    keys = [k for k in all_keys if person_id is None or k[0] == person_id]
    page = page_of(request, keys, 10)
    groups = selectors.conflict_groups(keys=page.object_list, now=memory_services.now_ms())
    context = {
        "groups": groups,
        "page": page,
        # only persons who have something to review (a large store has thousands of persons)
        "filter_form": ConflictFilterForm(
            request.GET, persons=Person.objects.filter(pk__in={pid for pid, _slot in all_keys}).order_by("id")
        ),
        "person_id": person_id,
        "next_url": request.get_full_path(),
    }
    template = "curation/conflicts.html#conflict-groups" if request.htmx else "curation/conflicts.html"
    return render(request, template, context)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def keep(request: HttpRequest, pk: int) -> HttpResponse:
    """Keep fact ``pk`` and adjudicate every other member of its conflict group away, all or nothing
    (``drop``: the members the operator saw; a group that changed since is refused)."""
    fact = get_object_or_404(Fact.objects.select_related("person"), pk=pk)
    found = selectors.conflict_groups(keys=[(fact.person_id, fact.slot)], now=memory_services.now_ms())
    group = found[0] if found else None
    others = [m for m in (group.members if group else []) if m["id"] != pk]
    context = {"fact": fact, "group": group, "others": others, "next": _next_url(request, reverse("curation:conflicts"))}
    if not others:
        return _refused(request, services.NotInConflictGroupError(pk), "curation/keep_confirm.html", context)
    if not _confirmed(request):
        return render(request, "curation/keep_confirm.html", context)
    seen = [parse_id(i) for i in request.POST.getlist("drop")] if "drop" in request.POST else None
    try:
        dropped = services.keep_only(keep_fact_id=pk, expected_drop_ids=seen,
                                     user=request.user.get_username())
    except REFUSALS as exc:
        return _refused(request, exc, "curation/keep_confirm.html", context)
    messages.success(request, _("已保留 #%(keep)s，标失效 %(ids)s；可在操作流水里撤销。") % {
        "keep": pk, "ids": "、".join(f"#{op.fact_id}" for op in dropped)})
    return redirect(context["next"])


# --- operations log ----------------------------------------------------------------


@login_required
@permission_required("curation.view_factoperation", raise_exception=True)
@require_GET
def operations(request: HttpRequest) -> HttpResponse:
    form = OperationFilterForm(request.GET)
    data = form.cleaned_data if form.is_valid() else {}
    rows = journal.operations(
        actor=data.get("actor"), op=data.get("op"), person_id=data["person"].pk if data.get("person") else None,
        fact_id=data.get("fact"),
    )
    page = page_of(request, rows)
    context = {"form": form, "page": page, "next_url": request.get_full_path()}
    template = "curation/operations.html#operations-table" if request.htmx else "curation/operations.html"
    return render(request, template, context, status=400 if {"person", "fact"} & set(form.errors) else 200)


@login_required
@permission_required("curation.undo_operation", raise_exception=True)
@require_POST
def undo(request: HttpRequest, pk: int) -> HttpResponse:
    operation = get_object_or_404(FactOperation.objects.select_related("fact"), pk=pk)
    context = {"operation": operation, "next": _next_url(request, reverse("curation:operations"))}
    if not _confirmed(request):
        return render(request, "curation/undo_confirm.html", context)
    try:
        undo_row = services.undo_operation(operation_id=pk, user=request.user.get_username())
    except REFUSALS as exc:
        return _refused(request, exc, "curation/undo_confirm.html", context)
    messages.success(request, _("操作 #%(id)s 已撤销（撤销条目 #%(undo)s）。") % {"id": pk, "undo": undo_row.pk})
    return redirect(context["next"])
