"""The console keeps answering on hostile input: huge ids and far-future timestamps never give a 500."""
from __future__ import annotations

import pytest

from memory import services
from tests.console.conftest import NOW

HUGE = "99999999999999999999"  # > 2**63 - 1: SQLite cannot even bind it

GET_URLS = [
    f"/streams/{HUGE}/",
    f"/facts/{HUGE}/",
    f"/facts/?person={HUGE}",
    f"/episodes/?stream={HUGE}",
    f"/imports/{HUGE}/delete/",
    f"/graph/?node=fact:{HUGE}",
    f"/graph/?node=episode:{HUGE}",
    f"/graph/?kind=fact&ref={HUGE}",
    f"/graph/?kind=knowledge&ref={HUGE}&hops=2",
    f"/playground/?stream={HUGE}&speaker={HUGE}&text=hi",
    f"/jobs/{HUGE}/",
    f"/curation/operations/?person={HUGE}",
    f"/curation/operations/?fact={HUGE}",
    f"/curation/conflicts/?person={HUGE}",
    f"/tuning/jobs/{HUGE}/",
    f"/tuning/jobs/{HUGE}/progress/",
    f"/tuning/jobs/{HUGE}/report.json",
    f"/streams/?page={HUGE}",
    f"/facts/?page={HUGE}",
]
POSTS = [
    (f"/curation/facts/{HUGE}/pin/", {"confirm": "1"}),
    (f"/curation/facts/{HUGE}/invalidate/", {}),
    ("/curation/facts/bulk/", {"action": "pin", "ids": [HUGE]}),
    ("/curation/facts/bulk/", {"action": "pin", "ids": [HUGE], "confirm": "1"}),
    (f"/curation/conflicts/keep/{HUGE}/", {"confirm": "1"}),
    (f"/curation/operations/{HUGE}/undo/", {"confirm": "1"}),
    (f"/imports/{HUGE}/delete/", {}),
]


@pytest.mark.parametrize("url", GET_URLS)
def test_huge_ids_in_get_never_500(admin_client_, memory_set, url):
    response = admin_client_.get(url)
    assert response.status_code in (200, 400, 404), (url, response.status_code)


@pytest.mark.parametrize(("url", "data"), POSTS)
def test_huge_ids_in_post_never_500(admin_client_, memory_set, url, data):
    response = admin_client_.post(url, data)
    assert response.status_code in (200, 302, 400, 404), (url, response.status_code)


@pytest.mark.parametrize("url", [f"/graph/?node=fact:{HUGE}", f"/graph/?kind=fact&ref={HUGE}",
                                 f"/curation/operations/?person={HUGE}", f"/curation/operations/?fact={HUGE}"])
def test_out_of_range_id_is_a_400_with_a_message(admin_client_, memory_set, url):
    response = admin_client_.get(url)
    assert response.status_code == 400
    assert "超出范围" in response.content.decode()


def test_bulk_with_an_out_of_range_id_is_a_400(admin_client_, memory_set):
    fact = memory_set["facts"][0]
    response = admin_client_.post("/curation/facts/bulk/", {"action": "pin", "ids": [str(fact), HUGE]})
    assert response.status_code == 400 and "事实编号无效" in response.content.decode()
    from memory.models import Fact

    assert not Fact.objects.get(pk=fact).pinned


def test_largest_sqlite_id_is_still_a_plain_miss(admin_client_, memory_set):
    largest = str(2**63 - 1)
    assert admin_client_.get(f"/graph/?node=fact:{largest}").status_code == 200
    assert admin_client_.get(f"/curation/operations/?fact={largest}").status_code == 200
    assert admin_client_.get(f"/streams/{largest}/").status_code == 404


FAR = 253_402_300_799_999  # valid for the schema; past year 9999 once shifted to local time


def test_far_future_timestamps_do_not_break_pages(admin_client_, memory_set, frozen_now):
    stream = memory_set["direct"]
    person = memory_set["alice"]
    message, _ = services.append_message(stream_id=stream.pk, role="user", content="来自未来", sender_person_id=person.pk,
                                         at=FAR)
    fact = services.add_fact(person_id=person.pk, content="小林来自一万年后", kind="身份", at=FAR).fact_id
    services.add_episode(stream_id=stream.pk, summary="未来的情节", cues=["未来"], started_at=FAR, ended_at=FAR,
                         message_ids=[], at=FAR)
    for url in ["/streams/", f"/streams/{stream.pk}/", "/facts/", f"/facts/{fact}/", "/episodes/", "/",
                f"/graph/?node=fact:{fact}"]:
        response = admin_client_.get(url)
        assert response.status_code == 200, url
    page = admin_client_.get(f"/streams/{stream.pk}/").content.decode()
    assert str(FAR) in page and "来自未来" in page


@pytest.mark.parametrize(("value", "shown"), [
    (None, ""), ("", ""), (NOW, "2025-01-01 08:00"), (FAR, str(FAR)), (-(10**20), str(-(10**20))),
    (10**30, str(10**30)), ("abc", "—"),
])
def test_ms_filter_never_raises(settings, value, shown):
    from console.templatetags.console import ms

    settings.TIME_ZONE = "Asia/Shanghai"
    assert ms(value) == shown
