"""Console pages of privacy and access: persons, export, forgetting with a preview, API tokens.

Forgetting: ``GET`` shows the cascade preview (what goes, what is touched, "cannot be
undone"); the form POSTs it back with the preview's digest, so a cascade that changed
in between is refused and previewed again. htmx enhances the form with a confirmation
dialog; after forgetting it navigates (``HttpResponseClientRedirect``) — without htmx, POST/redirect/GET. Operators (``memory.forget_memory``)
forget and export a person (``memory.export_person``); the token page is for superusers and holders of ``memory.manage_api_tokens``.
"""
from __future__ import annotations

from django.apps import apps
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, reswap

from memory import selectors, services
from memory.api.auth import TokenNameTaken, TokenScopeError, issue_token, revoke_tokens
from memory.fields import NUL_MESSAGE, page_of
from memory.models import ApiToken, Person, Stream
from memory.privacy import export, forget

VIEW = "memory.view_person"
FORGET = "memory.forget_memory"
#: the export of a person crosses every stream: its own permission (superusers, operators), as the API's ``export`` scope
EXPORT = "memory.export_person"
TOKENS = "memory.manage_api_tokens"
#: where to go after forgetting a target (its own page no longer exists)
AFTER = {"message": "console:streams", "fact": "console:facts", "episode": "console:episodes",
         "person": "console:persons", "stream": "console:streams"}
SAMPLE = 10  # rows of each kind shown with their text in the preview ("and N more" counts the rest)


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
@permission_required(EXPORT, raise_exception=True)
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
    for m in doc["messages"]:
        m["stream_obj"] = streams.get(m["stream"]["id"])
    return render(request, "privacy/person_export.html", {"doc": doc, "pk": pk})


def _next(request: HttpRequest, default: str) -> str:
    url = request.POST.get("next") or request.GET.get("next") or ""
    if url and url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return url
    return default


#: What a forget target is called on the console (the nav's words: 会话流, 情节).
TARGET_NAMES = {"message": gettext_lazy("消息"), "fact": pgettext_lazy("one", "事实"), "episode": gettext_lazy("情节"),
                "person": gettext_lazy("人物"), "stream": gettext_lazy("会话流")}


def forget_subject(target: str, pk: int) -> str:
    """``事实 #47`` / ``人物 #5 米娅``: a forget target named in the interface language, at render time."""
    name = ""
    if target == "person":
        name = Person.objects.filter(pk=pk).values_list("display_name", flat=True).first() or ""
    elif target == "stream":
        stream = Stream.objects.filter(pk=pk).first()
        name = str(stream) if stream else ""
    return f"{TARGET_NAMES[target]} #{pk} {name}".strip()


@login_required
@permission_required(FORGET, raise_exception=True)
@require_http_methods(["GET", "POST"])
def forget_target(request: HttpRequest, target: str, pk: int) -> HttpResponse:
    if target not in forget.TARGETS:
        raise Http404("unknown target")
    subject = forget_subject(target, pk)
    context = {"subject": subject, "target": target, "next": _next(request, "")}
    status = 200
    if request.method == "POST":
        try:
            plan, record = forget.forget(target=target, target_id=pk, user=request.user.get_username(),
                                         expected_digest=request.POST.get("digest") or "-")
        except forget.ForgetTargetNotFound as exc:
            raise Http404(str(exc)) from exc
        except forget.ForgetRefused:
            return _refusal(request, render(request, "privacy/forget.html", {**context, "refusal": OWNER_REFUSAL}, status=409))
        except forget.ForgetPlanChanged:
            context["refusal"] = _("预览之后记忆有了变化，请核对新的预览后再确认。")
            status = 409
        else:
            messages.success(request, _("已遗忘 %(label)s（记录 #%(id)s）：删除 %(n)s 条消息、%(f)s 条事实。") % {
                "label": subject, "id": record.pk, "n": len(plan.messages), "f": len(plan.facts)})
            url = _next(request, reverse(AFTER[target]))
            if request.htmx:  # the target's page is gone: a full navigation shows the next page and the message
                return HttpResponseClientRedirect(url, status=204)
            return redirect(url)
    try:
        plan = forget.plan_forget(target=target, target_id=pk)
    except forget.ForgetTargetNotFound as exc:
        raise Http404(str(exc)) from exc
    except forget.ForgetRefused:  # the bot's owner person: the page says why, inside the console
        return render(request, "privacy/forget.html", {**context, "refusal": OWNER_REFUSAL}, status=409)
    counts = plan.counts()
    samples = {kind: {"rows": rows, "more": counts[kind] - len(rows)}
               for kind, rows in selectors.forget_samples(plan, limit=SAMPLE).items()}
    context.update(plan=plan, counts=counts, samples=samples, dependents=_dependent_rows(plan))
    return _refusal(request, render(request, "privacy/forget.html", context, status=status))


def _refusal(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """A refused htmx POST swaps its page's ``main`` like a 200 (static/console.js), never the whole document."""
    return reswap(response, "outerHTML") if request.htmx and response.status_code >= 400 else response


OWNER_REFUSAL = gettext_lazy("这是机器人的主人：主人不能被遗忘（可以遗忘主人的单条消息、事实或会话流）。")


def _dependent_rows(plan: forget.ForgetPlan) -> list[tuple[str, int]]:
    """``(the table's name for people, rows)`` of the other apps' rows that go with the forgotten facts and turns."""
    names = {model._meta.db_table: model._meta.verbose_name_plural for model in apps.get_models()}
    return [(str(names.get(table, table)), len(ids)) for table, ids in sorted(plan.dependents.items())]


def _can_manage_tokens(user) -> bool:
    return user.is_superuser or user.has_perm(TOKENS)


#: What each API scope allows, in the interface language (memory.api.auth.SCOPES says it in English for the API docs).
SCOPE_TEXT = {
    "bot": gettext_lazy("存消息、事实和知识；处理回合；主动回忆、翻聊天记录、查知识"),
    "curation": gettext_lazy("永久保留、取消保留、标失效、恢复、改写事实；裁决冲突组；读操作流水"),
    "undo": gettext_lazy("撤销事实操作"),
    "forget": gettext_lazy("预览并执行遗忘（消息、事实、情节、人物、会话流）"),
    "export": gettext_lazy("导出一个人物的全部数据（跨所有会话流）"),
    "tuning": gettext_lazy("保存、删除、应用、回滚和评估检索参数方案"),
    "admin": gettext_lazy("全部权限"),
}
#: The new token's secret travels from the POST to the page after the redirect in this signed cookie
#: (only the browser that created it sees it, once); the page then deletes it.
NEW_TOKEN_COOKIE = "new_api_token"


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    """List, create (POST/redirect/GET: the secret is shown once, after the redirect) and revoke API tokens."""
    if not _can_manage_tokens(request.user):
        return render(request, "403.html", status=403)
    status = 200
    if request.method == "POST":
        name = (request.POST.get("name") or "").strip()
        try:
            if not name or len(name) > 100:
                raise TokenScopeError(_("名称必填，最多 100 个字符。"))
            if "\x00" in name:
                raise TokenScopeError(NUL_MESSAGE)
            row, plain = issue_token(name, request.POST.getlist("scopes"))
        except (TokenScopeError, TokenNameTaken) as exc:
            messages.error(request, str(exc))
            status = 400
        else:
            response = redirect("console:tokens")
            response.set_signed_cookie(NEW_TOKEN_COOKIE, f"{row.pk}:{plain}", salt=NEW_TOKEN_COOKIE, max_age=120,
                                       path=reverse("console:tokens"), httponly=True, samesite="Strict",
                                       secure=request.is_secure())
            return response
    created = None
    signed = request.get_signed_cookie(NEW_TOKEN_COOKIE, default=None, salt=NEW_TOKEN_COOKIE, max_age=120)
    if signed:
        pk, _sep, plain = signed.partition(":")
        created = {"row": ApiToken.objects.filter(pk=pk).first(), "plain": plain}
    context = {"tokens": selectors.api_tokens(), "scopes": SCOPE_TEXT, "created": created,
               "everything": selectors.broad_token_count(), "name": request.POST.get("name", "") if status == 400 else ""}
    response = render(request, "privacy/tokens.html", context, status=status)
    response["Cache-Control"] = "no-store"  # a new secret may be on this page
    response.delete_cookie(NEW_TOKEN_COOKIE, path=reverse("console:tokens"))  # shown once: a reload shows it no more
    return response


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    if not _can_manage_tokens(request.user):
        return render(request, "403.html", status=403)
    token = get_object_or_404(ApiToken, pk=pk)
    if request.POST.get("confirmed") != "1":  # without JavaScript: a page that names the token asks first
        return render(request, "privacy/token_revoke.html", {"token": token})
    if revoke_tokens(token_id=token.pk, user=request.user.get_username()):
        messages.success(request, _("已吊销令牌 %(name)s；所有进程在 1 秒内拒绝它。") % {"name": token.name})
    return redirect("console:tokens")
