"""Fixtures of the memory-store tests: persons, streams of each kind, fixed clock.

``NOW`` and ``H`` are the constants of docs/REFERENCE.md §19; every service and
selector gets its time explicitly so the numbers of the scenarios are exact.
"""
from __future__ import annotations

import pytest

from memory import overrides, services
from memory.models import Fact, PipelineEvent

NOW = 1_800_000_000_000
H = 3_600_000
DAY = 24 * H


@pytest.fixture(autouse=True)
def _memory_settings(settings):
    settings.MEMORY_ENQUEUE_TASKS = False
    settings.EMBEDDING_PROVIDER = "none"
    settings.PRIVATE_FACTS_IN_GROUP = False
    settings.FACT_RECALL_LIMIT = 6


@pytest.fixture(autouse=True)
def _fresh_overrides(db):
    overrides.reset_cache()
    yield
    overrides.reset_cache()


@pytest.fixture(autouse=True)
def _fresh_vector_index():
    """Each test rolls back its writes, revision counter included: start from an empty index."""
    from memory.search.vector_index import knowledge_index

    knowledge_index().reset()
    yield
    knowledge_index().reset()


@pytest.fixture(autouse=True)
def _fresh_activation():
    from memory import selectors

    selectors.short_term_activation().clear()
    yield
    selectors.short_term_activation().clear()


@pytest.fixture
def empty_lexical_indexes():
    """Empty FTS tables and no resident index before and after (the lexical-index tests' store is their own)."""
    from memory.search import lexical, lexical_index

    for table in lexical.TABLES:
        lexical.clear(table)
    lexical_index.reset_all()
    yield
    lexical_index.reset_all()


def make_person(ext: str, name: str = "", platform: str = "qq"):
    return services.resolve_person(platform=platform, external_id=ext, name=name or ext, at=NOW)


@pytest.fixture
def person(db):
    return make_person("u1", "凌白")


@pytest.fixture
def other_person(db):
    return make_person("u2", "炫芽衣")


@pytest.fixture
def direct_stream(db):
    return services.resolve_stream(platform="qq", kind="direct", external_id="d1", name="私聊")


@pytest.fixture
def group_stream(db):
    return services.resolve_stream(platform="qq", kind="group", external_id="g1", name="群聊")


@pytest.fixture
def desktop_stream(db):
    return services.resolve_stream(platform="desktop", kind="desktop", external_id="desk", name="桌面")


def fact_row(fact_id: int) -> Fact:
    return Fact.objects.get(pk=fact_id)


def events(kind: str) -> list[dict]:
    return list(PipelineEvent.objects.filter(kind=kind).order_by("seq").values_list("payload", flat=True))
