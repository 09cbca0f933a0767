"""A new fact is compared with the person's similar facts (docs/REFERENCE.md §3): exact key, then the best
bm25 matches and the char/bigram test. While all of a person's matches fit among the candidates, the answer
is known without ranking them, and without the document frequencies ranking reads (they grow with the store)."""
from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import services
from memory.models import Fact
from memory.search import lexical
from tests.memory.conftest import NOW

RANKED = ("bm25(", "SELECT term, count(*)", "FROM lexical_stats")  # what scoring reads, on either backend


def _add(person, content, at=NOW):
    return services.add_fact(person_id=person.pk, content=content, kind="偏好", at=at)


def _ranked(queries) -> list[str]:
    return [q["sql"] for q in queries if any(mark in q["sql"] for mark in RANKED)]


def test_a_person_with_few_matches_is_answered_without_ranking(person, other_person):
    for i, text in enumerate(["喜欢在周末去西湖边跑步", "养了一只叫团子的橘猫", "每天早上喝一杯黑咖啡"]):
        _add(person, text, at=NOW + i)
    for i in range(12):  # another person's facts hold the same words: they are no candidates of this one
        _add(other_person, f"第{i}次喜欢在周末去西湖边跑步和骑车", at=NOW + 10 + i)
    with CaptureQueriesContext(connection) as new:
        created = _add(person, "周末喜欢去爬山和露营", at=NOW + 30)
    with CaptureQueriesContext(connection) as again:
        same = _add(person, "喜欢在周末去西湖边跑步。", at=NOW + 31)
    assert created.created and not _ranked(new.captured_queries)
    kept = Fact.objects.get(person=person, content="喜欢在周末去西湖边跑步")
    assert not same.created and same.fact_id == kept.pk and not _ranked(again.captured_queries)
    assert Fact.objects.get(pk=kept.pk).hit_count == 1


def test_the_matches_are_the_valid_ones_in_id_order_or_none_past_the_limit(person):
    ids = [_add(person, f"喜欢吃第{i}种水果", at=NOW + i).fact_id for i in range(5)]
    services.add_fact(person_id=person.pk, content="不再喜欢吃水果了", kind="偏好", supersedes=ids[1], at=NOW + 9)
    match = lexical.match_for("facts_fts", "喜欢吃水果")
    found = lexical.fact_matches(match, person_id=person.pk, limit=8)
    assert found is not None and ids[1] not in [i for i, _ in found]  # superseded: not valid
    assert [i for i, _ in found] == sorted(i for i, _ in found) and {ids[0], ids[2], ids[3], ids[4]} <= {i for i, _ in found}
    assert lexical.fact_matches(match, person_id=person.pk, limit=len(found) - 1) is None
    assert lexical.fact_matches("", person_id=person.pk, limit=8) == []


def test_two_same_facts_among_the_matches_are_ranked_as_before(person):
    """Both count as the same fact: the better bm25 match is the one reinforced, as without the shortcut."""
    first = _add(person, "我喜欢吃辣的川菜和湘菜").fact_id
    second = _add(person, "我喜欢吃辣的川菜和湘菜呀", at=NOW + 1)
    assert second.created is False and second.fact_id == first  # said again: the same row
    # a second row that is the same fact (written directly: add_fact would have reinforced the first)
    other = Fact.objects.create(person=person, kind="偏好", content="我也喜欢吃辣的川菜和湘菜", content_key="other",
                                strength=1.0, half_life_hours=720, updated_at=NOW, created_at=NOW, due_at=NOW + 10**9,
                                active=True)
    lexical.index_fact(other.pk, other.content, person.pk)
    Fact.objects.filter(pk=first).update(content_key="first")  # neither is the exact key of what comes next
    assert len(lexical.fact_matches(lexical.match_for("facts_fts", "我喜欢吃辣的川菜和湘菜"), person_id=person.pk,
                                    limit=8)) == 2
    expected = next(fid for fid, text in lexical.similar_fact_candidates(
        lexical.match_for("facts_fts", "我喜欢吃辣的川菜和湘菜"), person_id=person.pk, limit=8)
        if services.is_same_fact("我喜欢吃辣的川菜和湘菜", text))
    with CaptureQueriesContext(connection) as queries:
        again = _add(person, "我喜欢吃辣的川菜和湘菜", at=NOW + 3)
    assert again.fact_id == expected and not again.created and _ranked(queries.captured_queries)
