"""What a process keeps (resident indexes, jieba) is frozen out of the garbage collector's full passes."""
from __future__ import annotations

import gc

import pytest

from memory import services
from memory.search import lexical, residency
from memory.search.lexical_index import resident
from tests.memory.conftest import NOW


@pytest.fixture
def freezing(settings):
    """RESIDENT_GC_FREEZE on (the test settings turn it off), and nothing left frozen after."""
    settings.RESIDENT_GC_FREEZE = True
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_settle_freezes_what_is_alive_and_the_setting_turns_it_off(freezing, settings):
    keep = [{"kept": i} for i in range(1000)]
    residency.settle()
    assert gc.get_freeze_count() >= len(keep)
    gc.unfreeze()
    settings.RESIDENT_GC_FREEZE = False
    residency.settle()
    residency.settle_process()
    assert gc.get_freeze_count() == 0


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_built_resident_index_is_frozen(freezing, empty_lexical_indexes, monkeypatch):
    services.add_knowledge(content="月球是地球唯一的天然卫星", source="t", at=NOW)
    assert gc.get_freeze_count() == 0
    index = resident("knowledge_fts")  # outside a transaction: built now
    assert index is not None and len(index) == 1
    assert gc.get_freeze_count() > 0
    settled = []
    monkeypatch.setattr(residency, "settle", lambda: settled.append(1))
    assert lexical.knowledge_candidates(lexical.match_for("knowledge_fts", "月球"), limit=3)
    assert settled == []  # a query of a fresh index freezes nothing more


def test_settle_hands_a_builds_free_memory_back_to_the_system(freezing):
    # a build's transient peak (rows, token strings, sort buffers) is not kept as the process's size
    if residency._malloc_trim is None:
        pytest.skip("not glibc: nothing to trim")

    def rss_kb() -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

    peak = [bytes(1000) + str(i).encode() for i in range(40_000)]  # ~40 MB from malloc's heap, a few kept
    kept = peak[::5_000]
    del peak
    before = rss_kb()
    residency.settle()
    assert rss_kb() < before - 5_000, "the freed pages stayed resident"
    assert len(kept) == 8
