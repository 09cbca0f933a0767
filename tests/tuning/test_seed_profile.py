"""The built-in "seed" profile: the seed's blend_score ranking, comparable with the default on a
deployment's own turns (trace replay, what-if)."""
from __future__ import annotations

import pytest

from memory import overrides, recall
from memory import services as memory_services
from tuning import evaluation, services

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000_000
DAY = 24 * 3_600_000


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.EMBEDDING_PROVIDER = "none"
    settings.MEMORY_ENQUEUE_TASKS = False
    settings.FACT_RECALL_LIMIT = 6
    overrides.reset_cache()
    yield
    overrides.reset_cache()


@pytest.fixture
def world():
    a = memory_services.resolve_person(platform="qq", external_id="a", name="阿青", at=T0)
    s = memory_services.resolve_stream(platform="qq", kind="direct", external_id="d1")
    old = memory_services.add_fact(person_id=a.pk, content="阿青不喜欢吃香菜", kind="偏好", at=T0 - 180 * DAY).fact_id
    fresh = memory_services.add_fact(person_id=a.pk, content="阿青昨天去吃了火锅", kind="事件", at=T0).fact_id
    for i, text in enumerate(["她养了一只猫", "她是一名护士", "她住在北京", "她喜欢爬山", "她对芒果过敏", "她在学游泳"]):
        b = memory_services.resolve_person(platform="qq", external_id=f"f{i}", name=f"路人{i}", at=T0)
        memory_services.add_fact(person_id=b.pk, content=text, kind="身份", at=T0)
    return {"a": a, "s": s, "old": old, "fresh": fresh}


def test_seed_is_a_builtin_profile():
    rows = {p.name: p for p in services.list_profiles()}
    # the seed's multiplicative ranking, and a turn's query is its own text (no conversation)
    seed = {"seed_blend": 1, "context_lexical_lines": 0, "context_dense_messages": 0}
    assert rows["seed"].builtin and rows["seed"].params == seed
    assert services.load_profile_params("seed") == seed
    with pytest.raises(services.ProfileError, match="内置"):
        services.save_profile("seed", {"bm25_weight": 2.0})
    with pytest.raises(services.ProfileError, match="内置"):
        services.delete_profile("seed")
    applied = services.apply_profile("seed")
    assert applied["params"] == seed
    assert overrides.active_overrides() == seed and services.active_profile_name() == "seed"


def test_a_turn_recorded_under_the_seed_profile_replays_with_zero_differences(world):
    services.apply_profile("seed")
    ctx = recall.prepare_turn(stream_id=world["s"].pk, speaker_id=world["a"].pk, text="阿青吃香菜吗", at=T0 + 100)
    assert [f.id for f in ctx.pool] == [world["fresh"], world["old"]]  # the seed's order: yesterday first
    samples = evaluation.build_samples()
    seed = evaluation.evaluate(samples, services.load_profile_params("seed"))
    assert seed["reconcile"] == {"matched": 1, "mismatched": 0, "drift_only": 0}
    assert seed["per_turn"][0]["reconcile"]["max_score_delta"] == 0.0
    # the default ranking on the same turn: another order, another prompt
    default = evaluation.evaluate(samples, {})
    row = default["per_turn"][0]
    assert row["replay_ids"] == row["ranked_ids"] == [world["old"], world["fresh"]]
    assert seed["per_turn"][0]["ranked_ids"] == [world["fresh"], world["old"]]
    assert row["reconcile"]["status"] == "mismatch"
    what_if = evaluation.compare(
        samples, {"label": "seed", "params": {"seed_blend": 1, "fact_recall_limit": 1}},
        {"label": "default", "params": {"fact_recall_limit": 1}}, emit=False,
    )
    turn = what_if["per_turn"][0]
    assert turn["moved_out"] == [world["fresh"]] and turn["moved_in"] == [world["old"]]
