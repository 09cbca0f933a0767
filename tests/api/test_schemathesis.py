"""Property-based run over the OpenAPI schema with every schemathesis check.

Schemathesis generates schema-valid and schema-violating requests (wrong types, missing
fields, out-of-range numbers, odd strings, missing or wrong credentials) for every
operation of memory/api/routes.py, curation/api.py and tuning/api.py and calls the Django WSGI
application in-process with a valid bearer token. ``call_and_validate`` runs all the
checks the installed schemathesis offers (not_a_server_error, status_code_conformance,
content_type_conformance, response_headers_conformance, response_schema_conformance,
positive_data_acceptance, negative_data_rejection, missing_required_header,
ignored_auth, unsupported_method, use_after_free, ensure_resource_availability …):
the schema says what the server accepts, refuses and answers.

Two rules of the server cannot be written in JSON Schema and are stated in words in the
schema's descriptions; the generator leaves out the schema-valid requests that break
them (``_outside_json_schema``), nothing else:

* ``POST /conflicts/resolve``: ``keep_fact_id`` must differ from ``drop_fact_id``
  (JSON Schema cannot compare two properties) — 400;
* tuning ``params``: an integer parameter takes a JSON integer, ``3`` and not ``3.0``
  (DESIGN: integers stay integers over HTTP; JSON Schema's ``integer`` admits ``3.0``) — 400.
"""
from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation

from memory.api.auth import hash_token
from memory.engine.tuning import WHITELIST
from memory.models import ApiToken

pytestmark = pytest.mark.django_db

PLAIN_TOKEN = "mc_schemathesis-fuzz-token"
INTEGER_PARAMS = {name for name, spec in WHITELIST.items() if spec.kind == "int"}


# Loaded eagerly (the lazy ``from_fixture`` loader does not support pytest 9); reading the
# schema needs no database. One test per operation.
schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())
schema.config.checks.update(included_check_names=["all"])  # the default today; explicit so it stays so


def _whole_floats_for_integer_params(body: Any) -> bool:
    targets = [body, *(body.get(k) for k in ("a", "b"))] if isinstance(body, dict) else []
    for target in targets:
        params = target.get("params") if isinstance(target, dict) else None
        if isinstance(params, dict) and any(isinstance(params.get(n), float) for n in INTEGER_PARAMS):
            return True
    return False


def _outside_json_schema(case) -> bool:
    """A schema-valid request that breaks a rule JSON Schema cannot state (see the module docstring)."""
    body = case.body if isinstance(case.body, dict) else {}
    if case.path == "/api/v1/conflicts/resolve" and body.get("keep_fact_id") == body.get("drop_fact_id"):
        return True
    return case.path.startswith("/api/v1/tuning/") and _whole_floats_for_integer_params(body)


@schema.hook
def filter_case(context, case) -> bool:
    meta = case.meta
    positive = meta is None or meta.generation.mode.is_positive
    if meta is not None and meta.is_negative_at(ParameterLocation.HEADER):
        # The only header in the schema is Authorization, which the test always sets to a
        # valid token: a "missing header" case is not negative once it is sent.
        return False
    return not (positive and _outside_json_schema(case))


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """The WSGI app runs in the test's transaction: don't let request signals close its connection.

    Django's test client does the same; SQLite's in-memory test database ignores a close, a
    PostgreSQL connection would really be closed in the middle of the test's transaction.
    """
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case):
    ApiToken.objects.get_or_create(token_hash=hash_token(PLAIN_TOKEN), defaults={"name": "fuzz", "scopes": ["admin"]})
    case.call_and_validate(headers={"Authorization": f"Bearer {PLAIN_TOKEN}"})
