"""Console pages of privacy and access: persons, export, forgetting with a preview, API tokens.

Forgetting: ``GET`` shows the cascade preview (what goes, what is touched, "cannot be
undone"); the form POSTs it back with the preview's digest, so a cascade that changed
in between is refused and previewed again. htmx enhances the form with a confirmation
dialog; after forgetting it navigates (``HttpResponseClientRedirect``) — without htmx, POST/redirect/GET. Operators (``memory.forget_memory``)
forget; the token page is for superusers and holders of ``memory.manage_api_tokens``.
"""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from memory import selectors, services
from memory.api.auth import SCOPES, TokenScopeError, issue_token, revoke_tokens
from memory.fields import NUL_MESSAGE, page_of
from memory.models import ApiToken, Person
from memory.privacy import export, forget

VIEW = "memory.view_person"
FORGET = "memory.forget_memory"
TOKENS = "memory.manage_api_tokens"
#: where to go after forgetting a target (its own page no longer exists)
AFTER = {"message": "console:streams", "fact": "console:facts", "episode": "console:episodes",
         "person": "console:persons", "stream": "console:streams"}
SAMPLE = 8  # rows of each kind shown with their text in the preview, so the operator sees what goes


@login_required
@permission_required(VIEW, raise_exception=True)
@require_GET
def persons(request: HttpRequest) -> HttpResponse:
    q = (request.GET.get("q") or "").strip()[:200]
    page = page_of(request, selectors.search_persons(q))
    counts = export.person_counts([p.pk for p in page])
    streams = export.person_streams([p.pk for p in page])
    for p in page:
        p.counts = counts[p.pk]
        p.idents = list(p.identities.all())
        p.stream_list = streams.get(p.pk, [])
    return render(request, "privacy/persons.html", {"page": page, "q": q})


@login_required
@permission_required(VIEW, raise_exception=True)
@require_GET
def person_export(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        doc = export.person_export(person_id=pk, now=services.now_ms())
    except Person.DoesNotExist as exc:
        raise Http404("no such person") from exc
    if request.GET.get("format") == "json":
        response = JsonResponse(doc, json_dumps_params={"ensure_ascii": False, "indent": 2})
        response["Content-Disposition"] = f'attachment; filename="person-{pk}.json"'
        return response
    streams = selectors.streams_by_id({m["stream"]["id"] for m in doc["messages"]})
    return render(request, "privacy/person_export.html", {"doc": doc, "streams": streams, "pk": pk})


def _next(request: HttpRequest, default: str) -> str:
    url = request.POST.get("next") or request.GET.get("next") or ""
    if url and url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return url
    return default


@login_required
@permission_required(FORGET, raise_exception=True)
@require_http_methods(["GET", "POST"])
def forget_target(request: HttpRequest, target: str, pk: int) -> HttpResponse:
    if target not in forget.TARGETS:
        raise Http404("unknown target")
    status = 200
    if request.method == "POST":
        try:
            plan, record = forget.forget(target=target, target_id=pk, user=request.user.get_username(),
                                         expected_digest=request.POST.get("digest") or "-")
        except forget.ForgetTargetNotFound as exc:
            raise Http404(str(exc)) from exc
        except forget.ForgetRefused as exc:
            messages.error(request, str(exc))
            return render(request, "console/_messages.html", status=409)
        except forget.ForgetPlanChanged:
            messages.error(request, _("预览之后记忆有了变化，请核对新的预览后再确认。"))
            status = 409
        else:
            messages.success(request, _("已遗忘 %(label)s（记录 #%(id)s）：删除 %(n)s 条消息、%(f)s 条事实。") % {
                "label": plan.label, "id": record.pk, "n": len(plan.messages), "f": len(plan.facts)})
            url = _next(request, reverse(AFTER[target]))
            if request.htmx:  # the target's page is gone: a full navigation shows the next page and the message
                return HttpResponseClientRedirect(url, status=204)
            return redirect(url)
    try:
        plan = forget.plan_forget(target=target, target_id=pk)
    except forget.ForgetTargetNotFound as exc:
        raise Http404(str(exc)) from exc
    except forget.ForgetRefused as exc:  # the bot's owner person
        messages.error(request, str(exc))
        return render(request, "console/_messages.html", status=409)
    context = {"plan": plan, "counts": plan.counts(), "samples": selectors.forget_samples(plan, limit=SAMPLE),
               "next": _next(request, "")}
    return render(request, "privacy/forget.html", context, status=status)


def _can_manage_tokens(user) -> bool:
    return user.is_superuser or user.has_perm(TOKENS)


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    if not _can_manage_tokens(request.user):
        return render(request, "403.html", status=403)
    created = None
    status = 200
    if request.method == "POST":
        name = (request.POST.get("name") or "").strip()
        try:
            if not name or len(name) > 100:
                raise TokenScopeError(_("名称必填，最多 100 个字符。"))
            if "\x00" in name:
                raise TokenScopeError(NUL_MESSAGE)
            row, plain = issue_token(name, request.POST.getlist("scopes"))
        except TokenScopeError as exc:
            messages.error(request, str(exc))
            status = 400
        else:
            created = {"row": row, "plain": plain}  # shown once, in this response only
    context = {"tokens": selectors.api_tokens(), "scopes": SCOPES, "created": created,
               "everything": selectors.broad_token_count()}
    response = render(request, "privacy/tokens.html", context, status=status)
    response["Cache-Control"] = "no-store"  # a new secret is on this page
    return response


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    if not _can_manage_tokens(request.user):
        return render(request, "403.html", status=403)
    token = get_object_or_404(ApiToken, pk=pk)
    if revoke_tokens(token_id=token.pk, user=request.user.get_username()):
        messages.success(request, _("已吊销令牌 %(name)s；所有进程在 1 秒内拒绝它。") % {"name": token.name})
    return redirect("console:tokens")


