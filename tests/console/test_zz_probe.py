import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

@pytest.mark.django_db
def test_probe(make_client, memory_set, frozen_now):
    op = make_client("operator"); staff = make_client("staff"); rev = make_client("reviewer")
    f = memory_set["facts"]
    for client, url in [(op, reverse("console:dashboard")), (op, reverse("console:streams")),
                        (op, reverse("console:stream", args=[memory_set["direct"].pk])),
                        (op, reverse("console:episodes")), (op, reverse("console:facts")),
                        (op, reverse("console:facts") + "?q=住在"), (op, reverse("console:fact", args=[f[0]])),
                        (op, reverse("console:knowledge")), (op, reverse("console:jobs")),
                        (op, reverse("curation:conflicts")), (rev, reverse("curation:operations")),
                        (staff, reverse("console:imports")), (staff, reverse("console:graph")),
                        (staff, reverse("console:playground") + f"?stream={memory_set['direct'].pk}&speaker={memory_set['alice'].pk}&text=住在哪里")]:
        client.get(url)  # warm
        with CaptureQueriesContext(connection) as ctx:
            r = client.get(url)
        print("\n=====", url, r.status_code, len(ctx.captured_queries))
        for q in ctx.captured_queries:
            print("   ", q["sql"][:230])
