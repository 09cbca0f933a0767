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

One rule of the server cannot be written in JSON Schema and is stated in words in the
schema's description; the generator leaves out the schema-valid requests that break it
(``_outside_json_schema``), nothing else: ``POST /conflicts/resolve``'s ``keep_fact_id``
must differ from its ``drop_fact_id`` (JSON Schema cannot compare two properties) — 422.
Every other refusal is a status the operation documents: 422 for input, 409 for state.
"""
from __future__ import annotations

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation

from memory.api.auth import hash_token
from memory.models import ApiToken

pytestmark = pytest.mark.django_db

PLAIN_TOKEN = "mc_schemathesis-fuzz-token"


# Loaded eagerly (the lazy ``from_fixture`` loader does not support pytest 9); reading the
# schema needs no database. One test per operation.
schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())
schema.config.checks.update(included_check_names=["all"])  # the default today; explicit so it stays so


def _outside_json_schema(case) -> bool:
    """A schema-valid request that breaks a rule JSON Schema cannot state (see the module docstring)."""
    body = case.body if isinstance(case.body, dict) else {}
    return case.path == "/api/v1/conflicts/resolve" and body.get("keep_fact_id") == body.get("drop_fact_id")


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
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case):
    ApiToken.objects.get_or_create(token_hash=hash_token(PLAIN_TOKEN), defaults={"name": "fuzz", "scopes": ["admin"]})
    case.call_and_validate(headers={"Authorization": f"Bearer {PLAIN_TOKEN}"})
