"""``GET /healthz`` — the load balancer's and the orchestrator's question: can this web process serve?

No login, no session, no template: one ``SELECT 1`` on the database and one bounded
``PING`` to Redis (memory/broker.py: ≤ 0.1 s, nothing while the breaker is open).

* 200 ``{"status": "ok", "database": "ok", "redis": "ok"|"down", "backend": …}`` — the
  process can read and write memory. Redis down is reported but is **not** a failure:
  messages and facts are still stored (the background work catches up when Redis is
  back), and taking every web host out of the pool because the shared Redis is down
  would turn a degraded service into an outage.
* 503 ``{"status": "down", "database": "<error>", …}`` — the database cannot be reached.

The answer names no host, user, path or version (it is served to anyone).
"""
from __future__ import annotations

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from memory import broker


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    body = {"status": "ok", "database": "ok", "redis": "ok", "backend": connection.vendor}
    code = 200
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
    except DatabaseError as exc:
        body.update(status="down", database=type(exc).__name__)
        code = 503
        # a probe every few seconds: no line per answer (config.logs.OutageReported; requests log the outage once)
        request.database_outage = True
    try:
        broker.check()
    except broker.BrokerUnavailable:
        body["redis"] = "down"
    return JsonResponse(body, status=code)
