"""Memory text is untrusted: it renders as text on every page, SVG labels included."""
from __future__ import annotations

import pytest
from django.urls import reverse

from memory import services
from tests.console.conftest import HOUR, NOW, XSS

pytestmark = pytest.mark.django_db

SHORT = '<b onmouseover=alert(3)>x'


@pytest.fixture
def hostile(memory_set, frozen_now):
    """Untrusted text in every layer, name and label the console shows."""
    from curation import services as curation
    from memory.models import ImportBatch, Job

    evil = services.resolve_person(platform="qq", external_id="evil", name=XSS, at=NOW - HOUR)
    stream = services.resolve_stream(platform="qq", kind="direct", external_id="evil", name=XSS)
    m, _ = services.append_message(stream_id=stream.pk, role="user", content=XSS, sender_person_id=evil.pk, at=NOW - HOUR)
    episode = services.add_episode(stream_id=stream.pk, summary=XSS, cues=[XSS], started_at=NOW - HOUR, ended_at=NOW,
                                   message_ids=[m.pk], at=NOW)
    a = services.add_fact(person_id=evil.pk, content=XSS, kind=SHORT, slot=SHORT, origin_kind="direct",
                          source=SHORT, at=NOW - HOUR).fact_id
    b = services.add_fact(person_id=evil.pk, content="javascript:alert(9) 另一个说法", kind=SHORT, slot=SHORT,
                          origin_kind="direct", at=NOW - HOUR).fact_id
    curation.pin_fact(fact_id=a, user=XSS[:150], at=NOW)
    k = services.add_knowledge(content=XSS + " 知识", source=SHORT, at=NOW)
    services.link_together(refs=[("fact", a), ("fact", b), ("episode", episode.pk), ("knowledge", k)], at=NOW)
    services.emit_event("memory_extract_failed", {"error": XSS}, at=NOW, stream_id=stream.pk)
    batch = ImportBatch.objects.create(kind="paste", origin_name=XSS[:200], summary=XSS[:120], submitted=1, added=1,
                                       status="done", created_at=NOW)
    services.add_knowledge(content="导入的" + XSS, source="import_center", at=NOW, batch_id=batch.pk)
    Job.objects.create(kind="import", status="failed", error=XSS, result={"x": XSS}, created_by=XSS[:150])
    return {"person": evil, "stream": stream, "episode": episode, "facts": [a, b], "knowledge": k, "batch": batch}


def assert_escaped(html: str) -> None:
    assert "<script>" not in html.replace('<script src="', "")  # only the vendored htmx script tag
    assert "<img" not in html and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert "<b onmouseover" not in html
    assert 'href="javascript:' not in html.lower() and "href='javascript:" not in html.lower()


def test_every_page_escapes_memory_text(make_client, hostile):
    client = make_client("superuser")
    a, b = hostile["facts"]
    pages = [
        reverse("console:dashboard"),
        reverse("console:streams"),
        reverse("console:stream", args=[hostile["stream"].pk]),
        reverse("console:stream", args=[hostile["stream"].pk]) + "?q=script",
        reverse("console:episodes"),
        reverse("console:episodes") + "?q=script",
        reverse("console:facts"),
        reverse("console:facts") + "?q=alert",
        reverse("console:fact", args=[a]),
        reverse("console:fact", args=[b]),
        reverse("console:knowledge"),
        reverse("console:knowledge") + "?q=script",
        reverse("console:imports"),
        reverse("console:import_delete", args=[hostile["batch"].pk]),
        reverse("console:graph"),
        reverse("console:graph") + f"?node=fact:{a}&kind=fact&ref={a}",
        reverse("console:graph") + "?q=alert",
        reverse("console:playground") + f"?stream={hostile['stream'].pk}&speaker={hostile['person'].pk}&text=alert script",
        reverse("console:jobs"),
        reverse("curation:conflicts"),
        reverse("curation:operations"),
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert_escaped(html)
        assert "&lt;script&gt;" in html or "&lt;b onmouseover" in html, url


def test_confirmation_pages_escape_memory_text(make_client, hostile):
    client = make_client("superuser")
    a = hostile["facts"][0]
    for action in ("invalidate", "unpin", "replace"):
        html = client.post(reverse("curation:fact_action", args=[a, action])).content.decode()
        assert_escaped(html)
        assert "&lt;script&gt;" in html
    html = client.post(reverse("curation:keep", args=[a])).content.decode()
    assert_escaped(html)
    assert "&lt;script&gt;" in html or "&lt;b onmouseover" in html, "keep"
    html = client.post(reverse("curation:bulk_action"), {"action": "pin", "ids": [a]}).content.decode()
    assert_escaped(html)
    assert "&lt;script&gt;" in html or "&lt;b onmouseover" in html, "bulk"


def test_svg_labels_are_escaped(make_client, hostile):
    html = make_client("superuser").get(reverse("console:graph")).content.decode()
    svg = html[html.index('<svg class="graph"'):html.index("</svg>")]
    assert "&lt;script&gt;" in svg and "<script" not in svg
