"""Console pages of curation: fact actions, bulk actions, the conflict queue, the operation log.

Every action is a POST with CSRF. A POST without ``confirmed=1`` renders a
confirmation page (the no-JavaScript path); htmx sends ``confirmed=1`` after
its ``hx-confirm`` dialog. Without htmx a successful action redirects to ``next``
(POST/redirect/GET) and its message shows at the top of that page.

With htmx an action answers for the region it was taken in — a fact's row, a
conflict group, a journal row — fresh from the database, with the outcome beside
it: what was done (and that it can be undone), or the refusal of
``curation.services`` verbatim with its status (404/409/400). The region is named
by HX-Retarget / HX-Reselect / HX-Reswap; static/console.js swaps such a refusal
like a 200, so it never replaces the page (django-htmx's debug script would, under
DEBUG). ``factsChanged`` / ``factChanged`` events let other panels (the facts
count, a fact's summary) refresh themselves. The fact page's own buttons
navigate as before (its region is the whole page).
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
from django_htmx.http import reselect, reswap, retarget, trigger_client_event

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

    htmx: the region the action was taken in re-renders with the row's real state (another
    operator may have changed it) and the refusal beside it; else the confirmation page says it.
    """
    status = next((code for kind, code in ERROR_STATUS.items() if isinstance(exc, kind)), 400)
    text = _("操作被拒绝：%(reason)s") % {"reason": exc}
    if request.htmx:
        answer = _region_answer(request, context, refusal=text)
        if answer is not None:
            return _with_status(answer, status)
        messages.error(request, text)  # a region this view does not know: the message, nothing replaced
        return reswap(render(request, "console/_messages.html", {}, status=status), "none")
    return render(request, template, {**context, "refusal": text}, status=status)


def _with_status(response: HttpResponse, status: int) -> HttpResponse:
    response.status_code = status
    return response


def _answer(request: HttpRequest, template: str, selector: str, context: dict[str, Any]) -> HttpResponse:
    """``template`` swapped in place of ``selector`` (outerHTML), whatever the element that asked targets."""
    response = render(request, template, context)
    retarget(response, selector)
    reselect(response, selector)
    return reswap(response, "outerHTML")


def _region_answer(request: HttpRequest, context: dict[str, Any], *, refusal: str = "", notice: str = "",
                   new_fact_id: int | None = None) -> HttpResponse | None:
    """The htmx answer for the region the request came from (its target), or None for one it does not know."""
    target = request.htmx.target or ""
    if target.startswith("fact-row-") or target == "fact-page":
        pk = context["fact"].pk if context.get("fact") else context["fact_id"]
        return _fact_region(request, pk, refusal=refusal, notice=notice, new_fact_id=new_fact_id,
                            next_url=context.get("next", ""))
    if target.startswith("group-"):
        return _group_region(request, target, context["fact"], refusal=refusal, notice=notice)
    if target.startswith("op-") and context.get("operation") is not None:
        return _operation_region(request, context["operation"].pk, refusal=refusal, notice=notice,
                                 next_url=context.get("next", ""))
    return None


def _fact_region(request: HttpRequest, pk: int, *, refusal: str, notice: str, new_fact_id: int | None,
                 next_url: str) -> HttpResponse | None:
    """The fact's row (facts table; after a rewrite the new fact's row below it) or its summary card (fact
    page), fresh from the database, with the outcome beside its buttons; a fact gone meanwhile says so."""
    target = request.htmx.target or ""
    ids = [pk, new_fact_id] if new_fact_id else [pk]
    facts = Fact.objects.select_related("person").in_bulk(ids)
    if pk not in facts:
        gone = _("这条事实已不存在（可能刚被遗忘）。")
        if target == f"fact-row-{pk}":
            return _answer(request, "console/facts.html#fact-row-gone", f"#{target}",
                           {"gone_id": pk, "row_refusal": refusal or gone})
        return None
    decorate_facts(facts.values(), now=memory_services.now_ms())
    if target == f"fact-row-{pk}":
        rows = [(facts[pk], "" if new_fact_id in facts else notice)]
        if new_fact_id in facts:
            rows.append((facts[new_fact_id], notice))
        context = {"rows": rows, "row_refusal": refusal, "next_url": next_url}
        return _answer(request, "curation/_fact_rows.html", ", ".join(f"#fact-row-{f.pk}" for f, _n in rows), context)
    if target == "fact-page" and refusal:
        return _answer(request, "console/fact.html#fact-summary", "#fact-summary",
                       {"fact": facts[pk], "row_refusal": refusal, "next_url": next_url})
    return None


# --- single fact actions -----------------------------------------------------------


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def fact_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    if action not in ACTIONS:
        raise Http404(action)
    fact = Fact.objects.select_related("person").filter(pk=pk).first()
    if fact is None:  # forgotten or removed meanwhile: its row says so (htmx), else a 404 page
        if request.htmx:
            return _refused(request, services.FactNotFoundError(_("事实 #%(id)s 不存在") % {"id": pk}), "",
                            {"fact_id": pk, "next": _next_url(request, reverse("console:facts"))})
        raise Http404(f"fact {pk}")
    label, explanation = ACTIONS[action].label, ACTIONS[action].confirmation
    form = ReplaceForm(request.POST or None, initial={"content": fact.content}) if action == "replace" else None
    context = {"fact": fact, "action": action, "label": label, "explanation": explanation, "form": form,
               "next": _next_url(request, reverse("console:fact", args=[pk]))}
    if _confirmed(request) and request.htmx and form is not None and not form.is_valid():
        # a rewrite from a row or the fact page (e.g. only spaces): refused beside it, like the service's refusals
        reason = " ".join(str(e) for errors in form.errors.values() for e in errors)
        return _refused(request, services.CurationInputError(reason), "curation/confirm.html", context)
    if not _confirmed(request) or (form is not None and not form.is_valid()):
        return render(request, "curation/confirm.html", context, status=400 if form is not None and form.errors else 200)
    kwargs = {"content": form.cleaned_data["content"]} if form is not None else {}
    try:
        result = ACTIONS[action].service(fact_id=pk, user=request.user.get_username(), **kwargs)
    except REFUSALS as exc:
        return _refused(request, exc, "curation/confirm.html", context)
    text = _success_text(action, pk, result)
    if request.htmx and (request.htmx.target or "").startswith("fact-row-"):
        answer = _region_answer(request, context, notice=text,
                                new_fact_id=result.fact_id if action == "replace" else None)
        if answer is not None:
            return trigger_client_event(answer, "factsChanged", {"id": pk})
    messages.success(request, text)
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


def _group_region(request: HttpRequest, region_id: str, fact: Fact, *, refusal: str, notice: str) -> HttpResponse:
    """A conflict group's card: the group as it is now with the refusal beside it, or what became of it."""
    found = selectors.conflict_groups(keys=[(fact.person_id, fact.slot)], now=memory_services.now_ms())
    context = {"region_id": region_id, "region_refusal": refusal, "region_notice": notice,
               "next_url": _next_url(request, reverse("curation:conflicts"))}
    if found and not notice:
        return _answer(request, "curation/conflicts.html#conflict-group", f"#{region_id}", {**context, "group": found[0]})
    if not notice:
        context["region_notice"] = _("这个冲突组已经不在了（可能刚被别人裁决）。")
    context["kept"] = Fact.objects.filter(pk=fact.pk).first()
    return _answer(request, "curation/conflicts.html#group-outcome", f"#{region_id}", context)


def _group_context(request: HttpRequest, pk: int) -> dict[str, Any]:
    fact = get_object_or_404(Fact.objects.select_related("person"), pk=pk)
    found = selectors.conflict_groups(keys=[(fact.person_id, fact.slot)], now=memory_services.now_ms())
    group = found[0] if found else None
    others = [m for m in (group.members if group else []) if m["id"] != pk]
    return {"fact": fact, "group": group, "others": others, "next": _next_url(request, reverse("curation:conflicts"))}


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def keep(request: HttpRequest, pk: int) -> HttpResponse:
    """Keep fact ``pk`` and adjudicate every other member of its conflict group away, all or nothing
    (``drop``: the members the operator saw; a group that changed since is refused)."""
    context = _group_context(request, pk)
    if not context["others"]:
        return _refused(request, services.NotInConflictGroupError(pk), "curation/keep_confirm.html", context)
    if not _confirmed(request):
        return render(request, "curation/keep_confirm.html", context)
    seen = [parse_id(i) for i in request.POST.getlist("drop")] if "drop" in request.POST else None
    try:
        dropped = services.keep_only(keep_fact_id=pk, expected_drop_ids=seen, user=request.user.get_username())
    except REFUSALS as exc:
        return _refused(request, exc, "curation/keep_confirm.html", context)
    text = _("已保留 #%(keep)s，标失效 %(ids)s；可在操作流水里撤销。") % {
        "keep": pk, "ids": "、".join(f"#{op.fact_id}" for op in dropped)}
    return _done(request, context, text)


@login_required
@permission_required(CURATE, raise_exception=True)
@require_POST
def keep_all(request: HttpRequest, pk: int) -> HttpResponse:
    """"Both are true": every member of fact ``pk``'s conflict group stays valid and leaves the slot
    (``member``: the members the operator saw; a group that changed since is refused)."""
    context = _group_context(request, pk)
    if not context["others"]:
        return _refused(request, services.NotInConflictGroupError(pk), "curation/keep_confirm.html", context)
    context["keep_all"] = True
    if not _confirmed(request):
        return render(request, "curation/keep_confirm.html", context)
    seen = [parse_id(i) for i in request.POST.getlist("member")] if "member" in request.POST else None
    try:
        kept = services.keep_all(fact_id=pk, expected_member_ids=seen, user=request.user.get_username())
    except REFUSALS as exc:
        return _refused(request, exc, "curation/keep_confirm.html", context)
    text = _("%(ids)s 都保留：它们不再是冲突组（离开了槽位「%(slot)s」）；可在操作流水里撤销。") % {
        "ids": "、".join(f"#{op.fact_id}" for op in kept), "slot": context["fact"].slot}
    return _done(request, context, text)


def _done(request: HttpRequest, context: dict[str, Any], text: str) -> HttpResponse:
    """A conflict resolved: its card says how (htmx), or the next page does (POST/redirect/GET)."""
    if request.htmx and (request.htmx.target or "").startswith("group-"):
        return _group_region(request, request.htmx.target, context["fact"], refusal="", notice=text)
    messages.success(request, text)
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


def _operation_region(request: HttpRequest, pk: int, *, refusal: str, notice: str, next_url: str) -> HttpResponse:
    """A journal row as it is now, with the outcome of an undo beside it."""
    operation = FactOperation.objects.select_related("fact", "person").get(pk=pk)
    context = {"op": operation, "row_refusal": refusal, "row_notice": notice, "next_url": next_url,
               "compact": request.POST.get("compact") == "1"}
    return _answer(request, "curation/_operations_table.html#op-row", f"#op-{pk}", context)


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
    text = _("操作 #%(id)s 已撤销（撤销条目 #%(undo)s）。") % {"id": pk, "undo": undo_row.pk}
    if request.htmx and request.htmx.target == f"op-{pk}":
        answer = _operation_region(request, pk, refusal="", notice=text, next_url=context["next"])
        return trigger_client_event(answer, "factChanged", {"id": operation.fact_id})
    messages.success(request, text)
    return redirect(context["next"])
