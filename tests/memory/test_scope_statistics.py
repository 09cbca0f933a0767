"""A person-scoped query ranks by the statistics of the facts it ranks (the present persons'), not
the whole table's: what other people remember does not move one person's ranking, and a word in
half of a person's facts (their name) weighs little. The reference ranking keeps the whole table's."""
from __future__ import annotations

import pytest
from django.db import connection

from memory import selectors, services
from memory.engine.bm25 import fts_tokens, scope_bm25
from memory.models import Fact
from memory.search import lexical
from tests.memory.conftest import NOW

REFERENCE = {"reference_blend": 1, "context_lexical_lines": 0, "context_dense_messages": 0}

CAROLINE = [
    "Caroline went to an LGBTQ support group",
    "Caroline researched adoption agencies",
    "Caroline gave a talk at a school",
    "Caroline is thinking about a career in counseling",
]
MELANIE = ["Melanie painted a lake sunrise", "Melanie signed up for a pottery class", "Melanie ran a charity race"]


def _persons():
    c = services.resolve_person(platform="t", external_id="c", name="Caroline", at=NOW)
    m = services.resolve_person(platform="t", external_id="m", name="Melanie", at=NOW)
    for text in CAROLINE:
        services.add_fact(person_id=c.pk, content=text, kind="事件", origin_kind="direct", at=NOW)
    for text in MELANIE:
        services.add_fact(person_id=m.pk, content=text, kind="事件", origin_kind="direct", at=NOW)
    return c, m


def _others(n: int) -> None:
    """Other people's memories: they hold the words of the queries below, in every proportion."""
    for i in range(n):
        p = services.resolve_person(platform="t", external_id=f"o{i}", name=f"o{i}", at=NOW)
        services.add_fact(person_id=p.pk, content=f"my friend {i} joined a support group and researched schools",
                          kind="事件", origin_kind="direct", at=NOW)


def _bm25(persons, query, overrides=None):
    found = selectors.recall_facts_in_scope(person_ids=[p.pk for p in persons], query=query, now=NOW,
                                            stream_kind="direct", return_candidates=True, overrides=overrides or {})
    return {f.id: (f.bm25, f.coverage) for f in found}


def _scope_numbers(persons, query):
    docs = {fid: fts_tokens(tokens) for fid, tokens in
            Fact.objects.filter(person_id__in=[p.pk for p in persons]).values_list("id", "tokens")}
    terms = lexical.terms_of(lexical.match_for("facts_fts", query))
    return scope_bm25([fts_tokens(t) for t in terms if fts_tokens(t)], docs, extra_tokens=1)


@pytest.mark.parametrize("query", ["What did Caroline research?", "Caroline support group", "pottery"])
def test_other_peoples_memories_do_not_move_a_persons_ranking(db, query):
    c, m = _persons()
    before = _bm25([c, m], query)
    assert {fid: b for fid, (b, _) in before.items()} == _scope_numbers([c, m], query)
    _others(12)
    assert _bm25([c, m], query) == before  # the same doubles, coverage included
    reference = _bm25([c, m], query, REFERENCE)
    assert reference.keys() == before.keys()
    assert [b for b, _ in reference.values()] != [b for b, _ in before.values()]  # the reference ranking reads the whole table


def test_a_name_in_half_the_facts_does_not_outweigh_the_word_asked_about(db):
    c, m = _persons()
    _others(40)  # "caroline" is rare in the table, "research" and "school" are not
    ranked = selectors.recall_facts_in_scope(person_ids=[c.pk, m.pk], query="What did Caroline research at school?",
                                             now=NOW, stream_kind="direct", return_candidates=True)
    assert ranked[0].content in ("Caroline researched adoption agencies", "Caroline gave a talk at a school")
    reference = selectors.recall_facts_in_scope(person_ids=[c.pk, m.pk], query="What did Caroline research at school?",
                                           now=NOW, stream_kind="direct", return_candidates=True, overrides=REFERENCE)
    assert {f.id for f in reference} == {f.id for f in ranked}  # the same candidates, read against another table


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_resident_index_and_the_stored_tokens_agree(empty_lexical_indexes, monkeypatch):
    # outside a transaction the resident index computes the scope's numbers, inside one the stored tokens do
    from memory.search import lexical_index

    answered = []
    scope_scores = lexical_index.ResidentBM25.scope_scores
    monkeypatch.setattr(lexical_index.ResidentBM25, "scope_scores",
                        lambda self, *args: answered.append(r := scope_scores(self, *args)) or r)
    c, m = _persons()
    _others(5)
    assert not connection.in_atomic_block and lexical.resident("facts_fts") is not None
    for query in ["What did Caroline research?", "Melanie painted", "support group school", "nothing like it"]:
        resident = _bm25([c, m], query)
        assert {fid: b for fid, (b, _) in resident.items()} == _scope_numbers([c, m], query)
    assert answered and all(r is not None for r in answered)
