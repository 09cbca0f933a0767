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
