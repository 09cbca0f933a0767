"""The API documentation page works with no network beyond the server itself."""
from __future__ import annotations

import pytest

# serialized_rollback as every browser module: a plain flush re-runs post_migrate and breaks the next module.
pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_api_docs_render_offline(browser, live_server):
    context = browser.new_context()
    outside: list[str] = []

    def only_the_server(route):
        if route.request.url.startswith(live_server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_server)
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto(f"{live_server.url}/api/docs")
    # Swagger UI draws one block per operation once its script and the schema have loaded.
    page.wait_for_selector(".swagger-ui .opblock")
    assert page.locator(".swagger-ui .opblock").count() > 10
    assert "/api/v1/messages" in page.content()
    assert not outside, outside
    context.close()
