"""The turn pages: the list and its filters, the inspector, labelling (htmx and plain POST), replay, the fit and
label pages of tuning."""
from __future__ import annotations

import json

import pytest
from django.urls import reverse

from memory import services as memory_services
from memory.models import Turn
from tests.tuning import world as labelled
from tuning import relevance, services
from tuning.models import RelevanceLabel

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    return labelled.build(["阿青", "小白"], label=False)


def _first(world):
    turn_id, name, topic = world.turns[0]
    return turn_id, world.facts[(name, topic)]


def test_the_list_shows_each_turn_with_its_counts_and_filters(world, operator):
    turn_id, fact_id = _first(world)
    relevance.set_label(turn_id=turn_id, fact_id=fact_id, relevant=True, user="reviewer")
    html = operator.get(reverse("console:turns")).content.decode()
    assert html.count('data-turn="') == 12 and 'data-labels="1"' in html
    labelled_only = operator.get(reverse("console:turns"), {"labelled": "yes"}).content.decode()
    assert labelled_only.count('data-turn="') == 1 and f'data-turn="{turn_id}"' in labelled_only
    assert operator.get(reverse("console:turns"), {"labelled": "no"}).content.decode().count('data-turn="') == 11
    one_stream = operator.get(reverse("console:turns"), {"stream": world.streams["小白"].pk}).content.decode()
    assert one_stream.count('data-turn="') == 6
    present = operator.get(reverse("console:turns"), {"person": world.persons["阿青"]}).content.decode()
    assert present.count('data-turn="') == 6
    using = operator.get(reverse("console:turns"), {"fact": fact_id}).content.decode()
    assert f'data-turn="{turn_id}"' in using and 'id="fact-filter"' in using
    future = operator.get(reverse("console:turns"), {"since": "2099-01-01"}).content.decode()
    assert future.count('data-turn="') == 0
    partial = operator.get(reverse("console:turns"), {"labelled": "yes"}, headers={"HX-Request": "true"})
    assert b"<html" not in partial.content and b'id="turn-results"' in partial.content


def test_the_list_takes_a_fixed_number_of_queries(world, operator, django_assert_max_num_queries):
    with django_assert_max_num_queries(12):  # session, user, perms, count, page, labels of the page, progress (2)
        assert operator.get(reverse("console:turns")).status_code == 200


def test_the_stream_and_fact_pages_link_to_their_turns(world, operator):
    _turn_id, fact_id = _first(world)
    stream = world.streams["阿青"]
    assert f'href="{reverse("console:turns")}?stream={stream.pk}"' in operator.get(
        reverse("console:stream", args=[stream.pk])).content.decode()
    assert f'href="{reverse("console:turns")}?fact={fact_id}"' in operator.get(
        reverse("console:fact", args=[fact_id])).content.decode()


def test_the_inspector_says_why_each_fact_was_or_was_not_in_the_prompt(world, operator):
    turn_id, fact_id = _first(world)
    turn = Turn.objects.get(pk=turn_id)
    html = operator.get(reverse("console:turn", args=[turn_id])).content.decode()
    assert f'id="fact-{fact_id}"' in html and 'data-verdict="prompt"' in html
    for prompt_fact in turn.prompt_fact_ids:
        assert f'<tr id="fact-{prompt_fact}" data-fact="{prompt_fact}" data-verdict="prompt"' in html
    assert "提示词最多放" in html and "每一项得分" in html
    assert f"说说{world.turns[0][2]}吧" in html and "词面查询" in html  # the conversation, the line's query weight
    assert 'class="label-form"' not in html  # an operator does not label


def test_a_reviewer_labels_a_candidate_and_the_count_follows(world, reviewer):
    turn_id, fact_id = _first(world)
    url = reverse("console:turn_label", args=[turn_id])
    response = reviewer.post(url, {"fact": fact_id, "relevant": "yes"})
    assert response.status_code == 302 and response["Location"].endswith(f"#fact-{fact_id}")
    assert RelevanceLabel.objects.get().relevant is True and RelevanceLabel.objects.get().user == "reviewer"
    row = reviewer.post(url, {"fact": fact_id, "relevant": "no"}, headers={"HX-Request": "true"})
    assert row.status_code == 200 and json.loads(row["HX-Trigger"])["labelsChanged"]["fact"] == fact_id
    body = row.content.decode()
    assert body.lstrip().startswith(f'<tr id="fact-{fact_id}"') and 'data-labelled="no"' in body
    counts = reviewer.get(reverse("console:turn", args=[turn_id]), {"part": "counts"}).content.decode()
    assert 'id="label-counts"' in counts and "1 条标注" in counts
    assert reviewer.post(url, {"fact": fact_id, "relevant": "clear"}).status_code == 302
    assert not RelevanceLabel.objects.exists()


def test_labelling_refuses_a_fact_of_someone_absent_and_an_operator(world, reviewer, operator):
    turn_id, _fact = _first(world)
    other = world.facts[("小白", world.turns[0][2])]
    url = reverse("console:turn_label", args=[turn_id])
    refused = reviewer.post(url, {"fact": other, "relevant": "yes"}, headers={"HX-Request": "true"})
    assert refused.status_code == 409 and "没有这个人" in refused.content.decode()
    assert operator.post(url, {"fact": other, "relevant": "yes"}).status_code == 403
    assert reviewer.post(url, {"fact": "x", "relevant": "yes"}).status_code == 302  # a form error, said on the page
    assert not RelevanceLabel.objects.exists()


def test_a_missing_fact_is_found_by_search_and_added(world, reviewer):
    turn_id, _ = _first(world)
    name = world.turns[0][1]
    other_topic = "吉他" if world.turns[0][2] != "吉他" else "咖啡"
    missing = world.facts[(name, other_topic)]
    found = reviewer.get(reverse("console:turn", args=[turn_id]), {"q": other_topic},
                         headers={"HX-Request": "true", "HX-Target": "add-results"}).content.decode()
    assert f'data-fact="{missing}"' in found and "标为相关" in found
    assert f'data-fact="{world.facts[("小白", other_topic)]}"' not in found  # only the persons present
    added = reviewer.post(reverse("console:turn_label", args=[turn_id]), {"fact": missing, "relevant": "yes"},
                          headers={"HX-Request": "true"})
    assert RelevanceLabel.objects.get(fact_id=missing).added is True  # not a candidate of the turn
    assert 'id="added-labels"' in added.content.decode() and f'data-fact="{missing}"' in added.content.decode()
    page = reviewer.get(reverse("console:turn", args=[turn_id])).content.decode()
    assert f'<div class="added" data-fact="{missing}">' in page


def test_replay_puts_two_profiles_side_by_side_and_marks_the_difference(world, operator):
    turn_id, _ = _first(world)
    name, topic = world.turns[0][1:]
    memory_services.add_fact(person_id=world.persons[name], content=f"{name}说{topic}很黏人", at=labelled.T0)
    services.save_profile("one-fact", {"fact_recall_limit": 1})
    page = operator.get(reverse("console:turn", args=[turn_id]), {"profile": "one-fact"}).content.decode()
    assert 'id="replay-summary"' in page and 'data-changed="yes"' in page
    partial = operator.get(reverse("console:turn_replay", args=[turn_id]), {"profile": "one-fact"},
                           headers={"HX-Request": "true"})
    assert partial.status_code == 200 and b'<div id="replay">' in partial.content and b"<html" not in partial.content
    plain = operator.get(reverse("console:turn_replay", args=[turn_id]), {"profile": "one-fact"})
    assert plain.status_code == 302 and "#replay" in plain["Location"]
    unknown = operator.get(reverse("console:turn", args=[turn_id]), {"profile": "nope"}).content.decode()
    assert "不存在" in unknown


def test_the_fit_form_refuses_with_too_few_labels_saying_how_many(world, staff):
    turn_id, fact_id = _first(world)
    relevance.set_label(turn_id=turn_id, fact_id=fact_id, relevant=True, user="staff")
    response = staff.post(reverse("tuning:fit"), {"budget": 10}, follow=True)
    html = response.content.decode()
    assert "至少 30 个回合" in html and "现在只有 1 个" in html
    assert 'id="fit-labels" data-turns="1"' in staff.get(reverse("tuning:index")).content.decode()


def test_the_labels_page_imports_exports_and_shows_the_journal(world, reviewer):
    turn_id, fact_id = _first(world)
    entries = {"labels": [{"turn": turn_id, "fact": fact_id, "relevant": True}]}
    done = reviewer.post(reverse("tuning:labels"), {"text": json.dumps(entries)}, follow=True).content.decode()
    assert RelevanceLabel.objects.count() == 1 and 'data-op="import"' in done
    refused = reviewer.post(reverse("tuning:labels"), {"text": json.dumps({"labels": [{"turn": turn_id, "fact": 10**9,
                                                                                        "relevant": True}]})})
    assert refused.status_code == 400 and "不存在" in refused.content.decode()
    assert reviewer.post(reverse("tuning:labels"), {"text": "{not json"}).status_code == 400
    exported = json.loads(reviewer.get(reverse("tuning:labels_export")).content)
    assert exported["labels"][0]["fact"] == fact_id and RelevanceLabel.objects.count() == 1


def test_only_labellers_reach_the_labels_page(world, operator, staff):
    assert operator.get(reverse("tuning:labels")).status_code == 403
    assert staff.get(reverse("tuning:labels")).status_code == 200


def test_the_rows_speak_the_page_language_and_escape_who_labelled(world, reviewer, operator):
    turn_id, fact_id = _first(world)
    relevance.set_label(turn_id=turn_id, fact_id=fact_id, relevant=False, user="<b>rev</b>")
    zh = reviewer.get(reverse("console:turn", args=[turn_id])).content.decode()
    en = reviewer.get(reverse("console:turn", args=[turn_id]), headers={"Accept-Language": "en"}).content.decode()
    assert zh.count("<summary>每一项得分</summary>") == zh.count('data-verdict="') > 0
    assert en.count("<summary>Every score term</summary>") == en.count('data-verdict="') and "每一项得分" not in en
    assert "<dt>Lexical relevance</dt>" in en and "<dt>词面相关度</dt>" in zh  # the labels follow each request
    row = zh[zh.index(f'<tr id="fact-{fact_id}"'):]
    row = row[:row.index("</tr>")]
    assert 'value="no" class="danger" aria-pressed="true"' in row and 'value="clear"' in row
    assert 'name="csrfmiddlewaretoken"' in row and "&lt;b&gt;rev&lt;/b&gt;" in row and "<b>rev</b>" not in row
    assert "标为" not in row and 'class="label-form"' not in operator.get(
        reverse("console:turn", args=[turn_id])).content.decode()  # an operator sees labels, no form


def test_the_inspector_names_the_facts_the_conversation_shows(db, operator):
    from memory import recall

    at = 1_800_000_000_000
    person = memory_services.resolve_person(platform="qq", external_id="cat", name="阿喵", at=at)
    stream = memory_services.resolve_stream(platform="qq", kind="direct", external_id="cat", name="私聊")
    said = memory_services.add_fact(person_id=person.pk, content="我家的猫叫咪咪", kind="偏好", at=at - 86_400_000).fact_id
    memory_services.append_message(stream_id=stream.pk, role="user", content="我家的猫叫咪咪", sender_person_id=person.pk,
                                   at=at)
    ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=person.pk, text="猫几岁了", at=at + 1000)
    recall.confirm_turn(turn_id=ctx.turn_id, at=at + 1001)
    response = operator.get(reverse("console:turn", args=[ctx.turn_id]))
    assert [f.pk for f in response.context["v"].shown] == [said]
    html = response.content.decode()
    assert 'id="shown-note"' in html and "我家的猫叫咪咪" in html and "机器人已经看得到" in html
