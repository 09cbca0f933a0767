import pytest
from django.urls import reverse

@pytest.mark.django_db
def test_smoke(admin_client_, memory_set, frozen_now):
    c = admin_client_
    f = memory_set["facts"]
    urls = [reverse("console:dashboard"), reverse("console:streams"), reverse("console:stream", args=[memory_set["direct"].pk]),
            reverse("console:stream", args=[memory_set["direct"].pk]) + "?q=猫",
            reverse("console:episodes"), reverse("console:episodes") + "?q=猫", reverse("console:facts"), reverse("console:facts") + "?q=杭州",
            reverse("console:fact", args=[f[0]]), reverse("console:knowledge"), reverse("console:knowledge") + "?q=猫",
            reverse("console:imports"), reverse("console:graph"), reverse("console:graph") + f"?node=fact:{f[2]}&kind=fact&ref={f[2]}",
            reverse("console:graph") + "?q=猫", reverse("console:playground"),
            reverse("console:playground") + f"?stream={memory_set['direct'].pk}&speaker={memory_set['alice'].pk}&text=我住哪里",
            reverse("console:jobs"), reverse("curation:conflicts"), reverse("curation:operations"), "/admin/", "/admin/memory/fact/"]
    for u in urls:
        r = c.get(u)
        assert r.status_code == 200, (u, r.status_code, r.content[:3000])
