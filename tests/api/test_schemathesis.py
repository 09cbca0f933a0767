"""Property-based run over the OpenAPI schema: no client input may produce a 5xx.

Schemathesis generates valid and invalid requests (wrong types, missing fields,
out-of-range numbers, odd strings) for every operation and calls the Django WSGI
application in-process with a valid bearer token.
"""
from __future__ import annotations

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings

from memory.auth import hash_token
from memory.models import ApiToken

pytestmark = pytest.mark.django_db

PLAIN_TOKEN = "mc_schemathesis-fuzz-token"


# Loaded eagerly (the lazy ``from_fixture`` loader does not support pytest 9); reading the
# schema needs no database. One test per operation.
schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_errors(case):
    ApiToken.objects.get_or_create(token_hash=hash_token(PLAIN_TOKEN), defaults={"name": "fuzz"})
    response = case.call(headers={"Authorization": f"Bearer {PLAIN_TOKEN}"})
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}\n{case.as_curl_command()}"
    )
