"""The bot-facing JSON API (django-ninja): ``/api/v1/...``, OpenAPI docs at ``/api/docs``.

A bot integrates with the memory system only through this API. Every route needs
``Authorization: Bearer <token>`` (``python manage.py create_api_token NAME``). All
instants are integer epoch milliseconds and every call that reads or writes memory
accepts an optional ``at`` (default: now) so replays and tests are deterministic.

Errors always have a JSON body ``{"detail": "<one sentence>", "errors": [...]}``:
422 for malformed JSON, a key given twice in one object, missing fields and wrong types (the
field path is named) and for text holding a NUL character or a lone surrogate, escaped or raw
(refused on every database backend), and for a platform or external id holding an invisible format
character (zero-width, bidi control: refused, not stripped, so no id can pass for another); 415 for a
body not sent as ``application/json``;
404 for unknown ids, 409 for a wrong state, 413 for oversized bodies, 401 without a
valid token, 403 for a token without the route's scope. Client input never produces a 500. Input is validated before anything is
written; the write endpoints (messages, facts, knowledge, curation) run in one
transaction, so nothing is half-written on an error. The read paths (turns, confirm,
actions) are not held in a write transaction — that would block ingest for the whole
computation; their services write in short transactions of their own.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import cached_property
from typing import Any

import pydantic
from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.db import DatabaseError, DataError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser

from config import outage
from curation import api as curation_api
from memory.api import routes as memory_api
from memory.api.auth import BearerTokenAuth
from memory.broker import BrokerUnavailable
from tuning import api as tuning_api

logger = logging.getLogger(__name__)

# Assembled here, above the apps: each app defines its routes (memory/api/routes.py, curation/api.py,
# tuning/api.py) and the statuses of its own exceptions (ERROR_STATUSES); this module builds the one
# NinjaAPI (its docstring above is the API description), the strict JSON parser, the error format
# and the mounting under /v1.


# --- request body parsing ---------------------------------------------------------


class BodyParseError(ValueError):
    """The request body is not a JSON document the API can store: 422 naming ``field`` (``status`` otherwise)."""

    status = 422

    def __init__(self, message: str, field: str = "body", kind: str = "json_invalid") -> None:
        super().__init__(message)
        self.field, self.kind = field, kind


class UnsupportedMediaType(BodyParseError):
    """A body sent as anything but JSON (text/plain, a form, multipart, no Content-Type): 415."""

    status = 415


def _reject_constant(name: str) -> Any:
    raise BodyParseError(f"{name} is not a JSON number")


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the body (``object_pairs_hook``): a key given twice is refused — which of the two a
    parser keeps differs between parsers (a proxy or an audit log could read the other value)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey
    return obj


class _Duplicated(dict):
    """An object that repeats ``key`` (the second parse, which finds where the duplicate is)."""

    key = ""


def _mark_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _value in pairs:
        if key in seen:
            marked = _Duplicated(pairs)
            marked.key = key
            return marked
        seen.add(key)
    return dict(pairs)


def _find_duplicate(value: Any, path: str = "body") -> str | None:
    """The dotted path of the first repeated key."""
    if isinstance(value, _Duplicated):
        return f"{path}.{value.key}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _find_duplicate(item, f"{path}.{key}")
        if found:
            return found
    return None


def _unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored on every backend, or None.

    A lone surrogate is not UTF-8; a NUL character is refused by PostgreSQL (SQLite keeps it),
    so both backends refuse it here, before anything is written, with the same 422.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate, which is not valid Unicode text"
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which cannot be stored"
    return None


def _find_unstorable(value: Any, path: str = "body") -> tuple[str, str] | None:
    """Path of the first string (value or key) that cannot be stored, and why."""
    if isinstance(value, str):
        reason = _unstorable(value)
        return (path, reason) if reason else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _find_unstorable(key, path) or _find_unstorable(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_unstorable(item, f"{path}.{index}")
            if found:
                return found
    return None


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or (content_type.startswith("application/") and content_type.endswith("+json"))


class StrictJsonParser(Parser):
    """JSON bodies only (``Content-Type: application/json``): no NaN/Infinity, no key given twice, valid UTF-8,
    no lone surrogates (escaped or raw), no NUL characters."""

    def parse_body(self, request: HttpRequest) -> Any:
        content_type = (request.content_type or "").strip().lower()
        if not _is_json(content_type):
            said = f"Content-Type {content_type}" if content_type else "no Content-Type"
            raise UnsupportedMediaType(f"the request body must be JSON sent as Content-Type: application/json ({said})",
                                       kind="unsupported_media_type")
        try:
            data = json.loads(request.body, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
        except BodyParseError:
            raise
        except _DuplicateKey:
            where = _find_duplicate(json.loads(request.body, object_pairs_hook=_mark_duplicates)) or "body"
            raise BodyParseError(f"{where} is given twice; a key may appear once in an object", field=where,
                                 kind="duplicate_key") from None
        except UnicodeDecodeError as exc:
            raise BodyParseError("the request body is not valid UTF-8") from exc
        except json.JSONDecodeError as exc:
            raise BodyParseError(f"the request body is not valid JSON ({exc.msg} at position {exc.pos})") from exc
        except (ValueError, RecursionError) as exc:
            raise BodyParseError("the request body is not valid JSON") from exc
        # Strict JSON holds no raw NUL (raw control characters are refused): a NUL is a \u escape. A lone
        # surrogate is a \u escape or its raw UTF-8 bytes (ED A0–BF xx, which json decodes with surrogatepass).
        # A body with none of these — a UTF-16/32 one's ASCII is NUL bytes — is not walked (a query
        # embedding: 512 numbers); ED also leads Hangul syllables, whose bodies are walked for nothing.
        body = request.body
        bad = _find_unstorable(data) if b"\\u" in body or b"\x00" in body or b"\xed" in body else None
        if bad:
            raise BodyParseError(f"{bad[0]} {bad[1]}", field=bad[0])
        return data


NO_NUL = r"^[^\x00]*$"


def _no_nul_pattern(pattern: str | None) -> str:
    """``pattern`` (unanchored, "contains a character of this class") for a string without NUL."""
    if not pattern:
        return NO_NUL
    if pattern.startswith("[^"):  # a negated class would match the NUL itself
        pattern = "[^\\x00" + pattern[2:]
    return rf"^[^\x00]*{pattern}[^\x00]*$"


def _state_no_nul(node: Any, components: dict[str, Any], seen: set[str]) -> None:
    """Every string a request body may hold says in its pattern that it has no NUL (the parser refuses one)."""
    if isinstance(node, list):
        for item in node:
            _state_no_nul(item, components, seen)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        name = ref.rsplit("/", 1)[-1]
        if name not in seen:
            seen.add(name)
            _state_no_nul(components.get(name), components, seen)
    if node.get("type") == "string" and "enum" not in node and "const" not in node and "format" not in node:
        node["pattern"] = _no_nul_pattern(node.get("pattern"))
    for key, value in node.items():
        if key not in ("pattern", "not") and isinstance(value, (dict, list)):
            _state_no_nul(value, components, seen)


class ScopedNinjaAPI(NinjaAPI):
    """States each route's token scope in the OpenAPI document (``x-token-scope`` + description).

    The security requirement keeps an empty scope list: OpenAPI 3.0 allows scopes only for
    OAuth2/OpenID schemes, and schema-driven clients read the bearer requirement as is.
    """

    def get_openapi_operation_id(self, operation: Any) -> str:
        """``<app>_api_<function>`` (``memory_api_post_turn``): a client's generated names depend on the
        app and the view's name, never on which module of the app holds the route."""
        app = operation.view_func.__module__.split(".")[0]
        return f"{app}_api_{operation.view_func.__name__}"

    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: dict | None = None) -> Any:
        """The document, built once per prefix (it is expensive to build; the routes do not
        change once the URLconf is loaded). Shared: a caller must not change it."""
        if path_prefix is None:
            path_prefix = self.get_root_path(path_params or {})
        if path_prefix not in self._documents:
            self._documents[path_prefix] = self._document(path_prefix)
        return self._documents[path_prefix]

    @cached_property
    def _documents(self) -> dict[str, Any]:
        return {}

    def _document(self, path_prefix: str) -> Any:
        schema = super().get_openapi_schema(path_prefix=path_prefix)
        scopes: dict[str, str] = {}
        for bound in self._get_bound_routers():
            for path_view in bound.path_operations.values():
                for operation in path_view.operations:
                    scope = next((getattr(cb, "scope", "") for cb in operation.auth_callbacks), "")
                    if scope:
                        scopes[operation.operation_id or self.get_openapi_operation_id(operation)] = scope
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                scope = scopes.get(operation.get("operationId", "")) if isinstance(operation, dict) else None
                if scope:
                    operation["x-token-scope"] = scope
                    note = f"**Token scope:** `{scope}` (or `admin`); without it the answer is 403."
                    operation["description"] = f"{note}\n\n{operation.get('description', '')}".strip()
        components = schema.get("components", {}).get("schemas", {})
        for model, example in EXAMPLES.items():  # one real example per body (each app's, validated by the tests)
            if model.__name__ in components:
                components[model.__name__]["examples"] = [example]
        seen: set[str] = set()
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                if isinstance(operation, dict):
                    # ninja keys the views' statuses by int: one key per status once JSON makes them strings
                    operation["responses"] = {str(status): said for status, said in operation["responses"].items()}
                    operation["responses"].setdefault("503", {"description": UNAVAILABLE, "content": ERROR_CONTENT})
                if isinstance(operation, dict) and "requestBody" in operation:
                    _state_no_nul(operation["requestBody"], components, seen)
                    for status, said in BODY_REFUSALS.items():
                        operation["responses"].setdefault(status, {"description": said, "content": ERROR_CONTENT})
        return schema


ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
#: What every route with a body may answer before its view runs (StrictJsonParser, Django's upload limit).
BODY_REFUSALS = {
    "413": "Content Too Large: the body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE",
    "415": "Unsupported Media Type: the body was not sent as Content-Type: application/json",
}


#: What any route may answer while the database or the task queue is away or busy (with Retry-After).
UNAVAILABLE = (
    "Service Unavailable: the database or the task queue (Redis) is away or busy; retry after Retry-After "
    "seconds. The body says whether the request was not applied or may have been applied (a message: "
    "resend it with the same external_message_id)"
)


#: One real example of every request and response body, by model (each app keeps its own).
EXAMPLES: dict[type, Any] = {**memory_api.EXAMPLES, **curation_api.EXAMPLES, **tuning_api.EXAMPLES}


api = ScopedNinjaAPI(
    title="Memory Console API",
    version="1",
    description=__doc__,
    urls_namespace="api",
    auth=BearerTokenAuth(scope="bot"),
    parser=StrictJsonParser(),
)



# --- error mapping ----------------------------------------------------------------


def error_response(request: HttpRequest, status: int, detail: str, errors: list[dict] | None = None) -> HttpResponse:
    return api.create_response(request, {"detail": detail, "errors": errors or []}, status=status)


def _field_path(loc: Any) -> str:
    parts = [str(p) for p in (loc or ())]
    # ninja prefixes the parameter source and, for a body schema, the parameter name
    if len(parts) >= 2 and parts[0] == "body" and parts[1] == "payload":
        parts = [parts[0], *parts[2:]]
    return ".".join(parts) or "body"


def _on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = []
    for err in exc.errors:
        errors.append(
            {"field": _field_path(err.get("loc")), "message": str(err.get("msg", "invalid")), "type": err.get("type", "")}
        )
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
    return error_response(request, 422, detail, errors)


def _on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cause = exc.__cause__
    if isinstance(cause, BodyParseError):
        return error_response(request, cause.status, str(cause), [{"field": cause.field, "message": str(cause),
                                                                   "type": cause.kind}])
    if isinstance(cause, RequestDataTooBig):
        return _on_too_big(request, cause)
    if isinstance(exc, AuthenticationError):
        return error_response(request, 401, "a valid 'Authorization: Bearer <token>' header is required")
    return error_response(request, exc.status_code, str(exc))


def _on_too_big(request: HttpRequest, exc: Exception) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return error_response(request, 413, f"the request body is larger than {limit} bytes")


def _status(code: int):
    def handler(request: HttpRequest, exc: Exception) -> HttpResponse:
        return error_response(request, code, str(exc) or exc.__class__.__name__)

    return handler


def _on_not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    return error_response(request, 404, str(exc) or "not found")


def _on_database_down(request: HttpRequest, exc: Exception) -> HttpResponse:
    # PostgreSQL unreachable, starting or stopping: one log line per outage (config/outage.py), no traceback
    outage.report(exc, f"{request.method} {request.path}")
    outage.mark(request)
    response = error_response(request, 503, outage.detail(request.path, request.method))
    response["Retry-After"] = str(outage.RETRY_AFTER_SECONDS)
    return response


def _on_operational(request: HttpRequest, exc: OperationalError) -> HttpResponse:
    if outage.unavailable(exc):
        return _on_database_down(request, exc)
    if "locked" in str(exc).lower() or "busy" in str(exc).lower():
        response = error_response(request, 503, "the database is busy; retry shortly")
        response["Retry-After"] = "1"
        return response
    return _on_unexpected(request, exc)


def _on_broker_down(request: HttpRequest, exc: Exception) -> HttpResponse:
    # The job (if any) is already marked failed with the reason; nothing is left running.
    response = error_response(request, 503, f"the task queue (Redis) is unavailable; nothing was started, retry later ({exc})")
    response["Retry-After"] = "5"
    return response


def _on_unstorable(request: HttpRequest, exc: Exception) -> HttpResponse:
    # PostgreSQL refuses some values SQLite keeps (a NUL character in text): client input, not a 500
    logger.info("unstorable input on %s %s: %s", request.method, request.path, exc)
    return error_response(request, 422, "the input cannot be stored (text must not contain NUL characters)")


def _on_database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    if outage.unavailable(exc):  # an InterfaceError: the connection was closed under the request
        return _on_database_down(request, exc)
    return _on_unexpected(request, exc)


def _on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("api error on %s %s", request.method, request.path, exc_info=exc)
    if outage.may_have_been_applied():  # a write of this request committed (or was in flight) before it failed
        return error_response(request, 500, "internal error; the request may have been partly applied")
    return error_response(request, 500, "internal error; the request was not applied")


def _handler_for(status: int) -> Callable[[HttpRequest, Exception], HttpResponse]:
    if status == 404:
        return _on_not_found
    return _status(status)


api.add_exception_handler(ValidationError, _on_validation_error)
api.add_exception_handler(HttpError, _on_http_error)
api.add_exception_handler(RequestDataTooBig, _on_too_big)
api.add_exception_handler(Http404, _on_not_found)
api.add_exception_handler(ObjectDoesNotExist, _on_not_found)
for _exc, _code in {**memory_api.ERROR_STATUSES, **curation_api.ERROR_STATUSES}.items():
    api.add_exception_handler(_exc, _handler_for(_code))
api.add_exception_handler(BrokerUnavailable, _on_broker_down)
api.add_exception_handler(ValueError, _status(422))  # input a view refused late: documented on every route
# a pydantic error escaping a view is a server bug (e.g. a response not matching its schema)
api.add_exception_handler(pydantic.ValidationError, _on_unexpected)
api.add_exception_handler(OperationalError, _on_operational)
api.add_exception_handler(DataError, _on_unstorable)
api.add_exception_handler(DatabaseError, _on_database_error)
api.add_exception_handler(Exception, _on_unexpected)


# --- routes: memory's, curation's beside them and tuning's under /tuning, each app's router mounted on its own ------
# (nested under memory's router, each route also carried memory's tag: /api/docs listed it twice)

api.add_router("/v1", memory_api.router)
api.add_router("/v1", curation_api.router)
api.add_router("/v1/tuning", tuning_api.router)
