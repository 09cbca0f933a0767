"""A query string holding a NUL character is refused before any view or form sees it.

PostgreSQL cannot store or even compare text with a NUL (``\x00``); SQLite can. A search
box (``?q=``), a filter or the admin's search would otherwise answer 500 on PostgreSQL
and something else on SQLite. Refused here once for every page, on every backend: the
console and the admin answer 400 with a sentence, the API its JSON error with a 422 (as
for a NUL in a request body). Posted forms say it as a form error (``memory.fields.TextField``).
"""
from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.translation import gettext as _

from config import outage
from config.api import error_response


class RefuseNulQueryMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if any("\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists()):
            if request.path.startswith("/api/"):
                return error_response(request, 422, "query: contains a NUL character (\\u0000), which cannot be stored",
                                      [{"field": "query", "message": "contains a NUL character", "type": "value_error"}])
            return HttpResponseBadRequest(_("查询参数含有 NUL 字符（\\x00），无法处理。"),
                                          content_type="text/plain; charset=utf-8")
        return self.get_response(request)


class DatabaseOutageMiddleware:
    """A console page (or the admin, or ``/healthz``'s callers) meeting an unreachable database answers 503.

    With ``Retry-After`` and a sentence instead of a 500 and a traceback; the outage is logged
    once (``config/outage.py``). The API answers its own JSON error (``config/api.py``).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not outage.unavailable(exception):
            return None
        outage.report(exception, f"{request.method} {request.path}")
        outage.mark(request)
        if outage.may_have_been_applied():
            text = _("数据库连接在保存途中断开：这次操作可能已经生效，请先刷新页面查看，再决定是否重做。")
        else:
            text = _("数据库暂时不可用，这次操作没有生效。请稍后重试。")
        response = HttpResponse(text, status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(outage.RETRY_AFTER_SECONDS)
        return response
