"""The built-in "reference" profile: the reference ranking's blend_score (docs/REFERENCE.md),
comparable with the default on a deployment's own turns (trace replay, what-if). It was called
"seed": turns, profiles, the journal and jobs recorded under that name are renamed by
tuning/migrations/0004_reference_profile, and the old names are still read as the new ones."""
from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.utils import translation

from memory import overrides, recall
from memory import services as memory_services
from memory.engine.tuning import TuningError, validate_overrides
from memory.meta import meta_get, meta_set
from memory.models import Job, Turn
from tuning import evaluation, inspection, services
from tuning.models import RetrievalProfile, TuningOperation

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000_000
DAY = 24 * 3_600_000


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.EMBEDDING_PROVIDER = "none"
    settings.MEMORY_ENQUEUE_TASKS = False
    settings.FACT_RECALL_LIMIT = 6
    overrides.reset_cache()
    with translation.override("zh-hans"):  # the refusals are matched in Chinese, whatever a test before left active
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


def test_reference_is_a_builtin_profile():
    rows = {p.name: p for p in services.list_profiles()}
    # the reference's multiplicative ranking, and a turn's query is its own text (no conversation)
    reference = {"reference_blend": 1, "context_lexical_lines": 0, "context_dense_messages": 0}
    assert list(rows) == ["default", "reference"]
    assert rows["reference"].builtin and rows["reference"].params == reference
    assert services.load_profile_params("reference") == reference
    with pytest.raises(services.ProfileError, match="内置"):
        services.save_profile("reference", {"bm25_weight": 2.0})
    with pytest.raises(services.ProfileError, match="内置"):
        services.delete_profile("reference")
    applied = services.apply_profile("reference")
    assert applied["params"] == reference
    assert overrides.active_overrides() == reference and services.active_profile_name() == "reference"


def test_the_old_name_still_works_and_answers_with_the_new_one():
    reference = services.load_profile_params("reference")
    assert services.load_profile_params("seed") == reference
    # applying "seed" applies "reference", under that name
    assert services.apply_profile("seed")["profile"] == "reference"
    assert services.active_profile_name() == "reference" and overrides.cached_active_profile() == "reference"
    assert meta_get(overrides.ACTIVE_PROFILE_META_KEY) == "reference"
    assert services.export_profile("seed")["profile"] == "reference"
    assert evaluation.resolve_target(profile="seed") == {"label": "reference", "profile": "reference", "params": reference}
    # the old name stays reserved: no stored profile can take it
    with pytest.raises(services.ProfileError, match="内置"):
        services.save_profile("seed", {"bm25_weight": 2.0})
    # the old knob reads as the new one (an exported profile file, an old client); both at once is refused
    assert validate_overrides({"seed_blend": 1, "bm25_weight": 2}) == {"reference_blend": 1, "bm25_weight": 2.0}
    assert services.save_profile("old-file", {"seed_blend": 1}).params == {"reference_blend": 1}
    with pytest.raises(TuningError, match="已改名"):
        validate_overrides({"seed_blend": 1, "reference_blend": 0})


def _migration():
    return importlib.import_module("tuning.migrations.0004_reference_profile")


def test_the_migration_renames_what_was_recorded_under_seed_and_the_turn_replays(world):
    services.apply_profile("reference")
    ctx = recall.prepare_turn(stream_id=world["s"].pk, speaker_id=world["a"].pk, text="阿青吃香菜吗", at=T0 + 100)
    turn = Turn.objects.get(pk=ctx.turn_id)
    recorded = dict(turn.profile)
    assert recorded["name"] == "reference"
    # what a store written before the rename holds
    old_params = {"seed_blend": 1, "context_lexical_lines": 0, "context_dense_messages": 0}
    Turn.objects.filter(pk=turn.pk).update(profile={"name": "seed", "params": old_params})
    RetrievalProfile.objects.create(name="mine", params={"seed_blend": 1, "bm25_weight": 2.0}, created_at=T0)
    op = TuningOperation.objects.create(at=T0, op="apply", profile="seed", detail={"params": old_params, "prev": "seed"})
    job = Job.objects.create(kind="evaluate", params={"target": {"label": "seed", "profile": "seed", "params": old_params}},
                             result={"base": {"profile": "seed", "params": old_params}})
    meta_set(overrides.ACTIVE_PROFILE_META_KEY, "seed")

    _migration().forward(apps, None)

    turn.refresh_from_db()
    assert turn.profile == recorded == {"name": "reference", "params": services.load_profile_params("reference")}
    assert RetrievalProfile.objects.get(name="mine").params == {"reference_blend": 1, "bm25_weight": 2.0}
    op.refresh_from_db()
    assert op.profile == "reference" and op.detail == {"params": recorded["params"], "prev": "reference"}
    job.refresh_from_db()
    assert job.params["target"] == {"label": "seed", "profile": "reference", "params": recorded["params"]}
    assert job.result == {"base": {"profile": "reference", "params": recorded["params"]}}
    assert meta_get(overrides.ACTIVE_PROFILE_META_KEY) == "reference"
    # the old turn replays under the profile it ran with: the reference's order, nothing drifted
    view = inspection.inspect_turn(turn, embed=False)
    assert view.profile_name == "reference" and view.profile_params == recorded["params"]
    assert [c.fact.id for c in view.candidates][:2] == [world["fresh"], world["old"]]
    assert view.drift == []

    _migration().backward(apps, None)  # reversible: the old names come back
    turn.refresh_from_db()
    assert turn.profile == {"name": "seed", "params": old_params}
    assert meta_get(overrides.ACTIVE_PROFILE_META_KEY) == "seed"


def test_a_turn_recorded_under_the_reference_profile_replays_with_zero_differences(world):
    services.apply_profile("reference")
    ctx = recall.prepare_turn(stream_id=world["s"].pk, speaker_id=world["a"].pk, text="阿青吃香菜吗", at=T0 + 100)
    assert [f.id for f in ctx.pool] == [world["fresh"], world["old"]]  # the reference's order: yesterday first
    samples = evaluation.build_samples()
    reference = evaluation.evaluate(samples, services.load_profile_params("reference"))
    assert reference["reconcile"] == {"matched": 1, "mismatched": 0, "drift_only": 0}
    assert reference["per_turn"][0]["reconcile"]["max_score_delta"] == 0.0
    # the default ranking on the same turn: another order, another prompt
    default = evaluation.evaluate(samples, {})
    row = default["per_turn"][0]
    assert row["replay_ids"] == row["ranked_ids"] == [world["old"], world["fresh"]]
    assert reference["per_turn"][0]["ranked_ids"] == [world["fresh"], world["old"]]
    assert row["reconcile"]["status"] == "mismatch"
    what_if = evaluation.compare(
        samples, {"label": "reference", "params": {"reference_blend": 1, "fact_recall_limit": 1}},
        {"label": "default", "params": {"fact_recall_limit": 1}}, emit=False,
    )
    turn = what_if["per_turn"][0]
    assert turn["moved_out"] == [world["fresh"]] and turn["moved_in"] == [world["old"]]
