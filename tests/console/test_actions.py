"""Curation from the console: confirm, act, redirect; refusals verbatim; htmx fragments."""
from __future__ import annotations

import pytest
from django.urls import reverse

from memory.models import Fact, FactOperation, FactState
from tests.console.conftest import NOW

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def _action(fact_id, action):
    return reverse("curation:fact_action", args=[fact_id, action])


def test_a_post_without_confirmation_shows_the_confirmation_page(operator, memory_set, frozen_now):
    fact_id = memory_set["facts"][2]
    response = operator.post(_action(fact_id, "invalidate"), {"next": "/facts/"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "标失效后该事实不再进入召回与提示词" in html and 'name="confirmed" value="1"' in html
    assert Fact.objects.get(pk=fact_id).superseded_by_id is None
    assert not FactOperation.objects.exists()


def test_pin_then_redirect_back_with_a_message(operator, memory_set, frozen_now):
    fact_id = memory_set["facts"][2]
    response = operator.post(_action(fact_id, "pin"), {"confirmed": "1", "next": "/facts/?person=2"}, follow=True)
    assert response.redirect_chain == [("/facts/?person=2", 302)]
    html = response.content.decode()
    assert "永久保留 已完成" in html and f'id="fact-row-{fact_id}"' in html
    assert Fact.objects.get(pk=fact_id).pinned
    op = FactOperation.objects.get()
    assert (op.op, op.user, op.fact_id) == ("pin", "operator", fact_id)


def test_next_must_be_a_local_url(operator, memory_set, frozen_now):
    fact_id = memory_set["facts"][2]
    response = operator.post(_action(fact_id, "pin"), {"confirmed": "1", "next": "https://evil.example/"})
    assert response["Location"] == reverse("console:fact", args=[fact_id])


def test_htmx_action_follows_the_redirect_to_the_fragment(operator, memory_set, frozen_now):
    fact_id = memory_set["facts"][2]
    response = operator.post(_action(fact_id, "pin"), {"confirmed": "1", "next": "/facts/"}, headers=HTMX, follow=True)
    html = response.content.decode()
    assert "<html" not in html  # the fact-results partial, from which htmx selects the row
    assert f'id="fact-row-{fact_id}"' in html and "chip pinned" in html
    assert 'id="messages" role="status" hx-swap-oob="true"' in html and "已完成" in html


def test_refusal_is_shown_verbatim_with_409(operator, memory_set, frozen_now):
    frozen = memory_set["facts"][3]
    response = operator.post(_action(frozen, "pin"), {"confirmed": "1"})
    assert response.status_code == 409
    assert f"操作被拒绝：事实 #{frozen} 已冻结" in response.content.decode()
    htmx = operator.post(_action(frozen, "pin"), {"confirmed": "1"}, headers=HTMX)
    assert htmx.status_code == 409 and htmx["HX-Reswap"] == "none"
    assert "hx-swap-oob" in htmx.content.decode() and "已冻结" in htmx.content.decode()


def test_replace_refusal_is_a_400(operator, memory_set, frozen_now):
    fact_id = memory_set["facts"][0]
    response = operator.post(_action(fact_id, "replace"), {"confirmed": "1", "content": "小林住在杭州。"})
    assert response.status_code == 400
    assert "操作被拒绝：新内容与原事实意思相同" in response.content.decode()


def test_replace_supersedes_and_mentions_conflicts(operator, memory_set, frozen_now):
    f1, f2 = memory_set["facts"][:2]
    response = operator.post(_action(f1, "replace"), {"confirmed": "1", "content": "小林住在苏州"}, follow=True)
    html = response.content.decode()
    new = Fact.objects.get(content="小林住在苏州")
    assert Fact.objects.get(pk=f1).superseded_by_id == new.pk
    assert f"事实 #{f1} 已取代为 #{new.pk}。" in html and f"新事实与 #{f2} 处于同一槽位" in html


def test_unknown_action_is_404(operator, memory_set):
    assert operator.post(_action(memory_set["facts"][0], "delete"), {"confirmed": "1"}).status_code == 404
    assert operator.post(_action(999999, "pin"), {"confirmed": "1"}).status_code == 404


def test_invalidate_and_restore(operator, memory_set, frozen_now):
    fact_id = memory_set["facts"][2]
    operator.post(_action(fact_id, "invalidate"), {"confirmed": "1"})
    assert Fact.objects.get(pk=fact_id).state == FactState.INVALID
    html = operator.get(reverse("console:fact", args=[fact_id])).content.decode()
    assert "已失效" in html and 'data-action="restore"' in html and 'data-action="pin"' not in html
    operator.post(_action(fact_id, "restore"), {"confirmed": "1"})
    assert Fact.objects.get(pk=fact_id).superseded_by_id is None


def test_bulk_invalidate_confirms_then_reports_each_refusal(operator, memory_set, frozen_now):
    f1, f2, f3, f4, f5 = memory_set["facts"]
    operator.post(_action(f5, "invalidate"), {"confirmed": "1"})
    url = reverse("curation:bulk_action")
    confirm = operator.post(url, {"action": "invalidate", "ids": [f3, f5], "next": "/facts/"})
    assert confirm.status_code == 200 and "小林喜欢猫" in confirm.content.decode()
    assert Fact.objects.get(pk=f3).superseded_by_id is None
    done = operator.post(url, {"action": "invalidate", "ids": [f3, f5], "confirmed": "1", "next": "/facts/"}, follow=True)
    html = done.content.decode()
    assert "标失效：1 条已完成" in html and f"#{f5}：事实 #{f5} 已经失效" in html
    assert Fact.objects.get(pk=f3).state == FactState.INVALID


def test_bulk_without_selection_says_so(operator, memory_set):
    response = operator.post(reverse("curation:bulk_action"), {"action": "pin", "next": "/facts/"}, follow=True)
    assert "请先勾选事实" in response.content.decode()


def test_keep_this_one_adjudicates_the_rest_and_is_undoable(make_client, memory_set, frozen_now):
    operator, reviewer = make_client("operator"), make_client("reviewer")
    f1, f2 = memory_set["facts"][:2]
    confirm = operator.post(reverse("curation:keep", args=[f2]), {"next": "/curation/conflicts/"})
    assert "其余 1 条将被标失效" in confirm.content.decode() and "小林住在杭州" in confirm.content.decode()
    response = operator.post(reverse("curation:keep", args=[f2]), {"confirmed": "1", "next": "/curation/conflicts/"},
                             headers=HTMX, follow=True)
    html = response.content.decode()
    assert "<html" not in html and 'id="conflict-groups"' in html and "没有待裁决的冲突组" in html
    assert Fact.objects.get(pk=f1).superseded_by_id == f1
    op = FactOperation.objects.get(op="adjudicate")
    assert (op.fact_id, op.related_fact_id) == (f1, f2)
    reviewer.post(reverse("curation:undo", args=[op.pk]), {"confirmed": "1"})
    assert Fact.objects.get(pk=f1).superseded_by_id is None
    assert "小林住在杭州" in operator.get(reverse("curation:conflicts")).content.decode()


def test_keep_what_the_operator_saw_or_nothing(operator, memory_set, frozen_now):
    from memory import services

    f1, f2 = memory_set["facts"][:2]
    page = operator.get(reverse("curation:conflicts")).content.decode()
    assert f'name="drop" value="{f1}"' in page and f'name="drop" value="{f2}"' in page  # each button names the rest
    alice = Fact.objects.get(pk=f1).person_id
    f6 = services.add_fact(person_id=alice, content="小林住在苏州", kind="身份", slot="住址", at=NOW).fact_id
    response = operator.post(reverse("curation:keep", args=[f2]), {"confirmed": "1", "drop": [f1]}, headers=HTMX)
    assert response.status_code == 409 and "冲突组在确认之后有了变化" in response.content.decode()
    assert not FactOperation.objects.exists()
    assert Fact.objects.filter(pk__in=[f1, f2, f6], superseded_by__isnull=True).count() == 3
    done = operator.post(reverse("curation:keep", args=[f2]), {"confirmed": "1", "drop": [f6, f1]}, follow=True)
    assert f"已保留 #{f2}，标失效 #{f1}、#{f6}" in done.content.decode()
    assert [o.fact_id for o in FactOperation.objects.order_by("id")] == [f1, f6]


def test_keep_outside_a_conflict_group_is_refused(operator, memory_set, frozen_now):
    response = operator.post(reverse("curation:keep", args=[memory_set["facts"][2]]), {"confirmed": "1"})
    assert response.status_code == 409 and "不在待裁决的冲突组里" in response.content.decode()


def test_undo_restores_the_decay_fields_exactly(make_client, memory_set, frozen_now):
    operator, reviewer = make_client("operator"), make_client("reviewer")
    fact_id = memory_set["facts"][2]
    before = Fact.objects.values("strength", "half_life_hours", "updated_at", "due_at", "active").get(pk=fact_id)
    operator.post(_action(fact_id, "pin"), {"confirmed": "1"})
    op = FactOperation.objects.get(op="pin")
    confirm = reviewer.post(reverse("curation:undo", args=[op.pk]), {"next": "/curation/operations/"})
    assert "按操作前的状态回滚该次变更" in confirm.content.decode()
    response = reviewer.post(reverse("curation:undo", args=[op.pk]), {"confirmed": "1", "next": "/curation/operations/"},
                             headers=HTMX, follow=True)
    html = response.content.decode()
    assert 'id="operations-table"' in html and "已撤销" in html and "撤销条目" in html
    after = Fact.objects.values("strength", "half_life_hours", "updated_at", "due_at", "active").get(pk=fact_id)
    assert after == before
    again = reviewer.post(reverse("curation:undo", args=[op.pk]), {"confirmed": "1"})
    assert again.status_code == 409 and "已经撤销过了" in again.content.decode()


def test_detail_page_actions_target_the_page_region(operator, memory_set, frozen_now):
    html = operator.get(reverse("console:fact", args=[memory_set["facts"][2]])).content.decode()
    assert 'hx-target="#fact-page" hx-select="#fact-page"' in html
    assert 'hx-confirm="永久保留后这条事实不再随时间淡忘' in html
    assert f'action="{_action(memory_set["facts"][2], "pin")}"' in html  # works without JavaScript too


def test_reviewer_sees_no_curation_buttons_and_operator_no_undo(make_client, memory_set, frozen_now):
    from curation import services

    services.pin_fact(fact_id=memory_set["facts"][2], at=NOW)
    fact_url = reverse("console:fact", args=[memory_set["facts"][2]])
    reviewer_html = make_client("reviewer").get(fact_url).content.decode()
    assert "data-action=" not in reviewer_html and "data-undo=" in reviewer_html
    operator_html = make_client("operator").get(fact_url).content.decode()
    assert "data-action=" in operator_html and "data-undo=" not in operator_html
