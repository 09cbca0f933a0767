"""Fitting a profile to relevance labels: the knobs, the split, the search, the report, the job, applying it."""
from __future__ import annotations

import pytest

from memory import overrides
from memory.engine.tuning import UNFITTED, WHITELIST
from memory.models import Job, Turn
from tests.tuning import world as labelled
from tuning import evaluation, fit, relevance, services
from tuning.evaluation import QueryVectors, TraceSample
from tuning.models import RelevanceLabel, TuningOperation

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.EMBEDDING_PROVIDER = "none"
    settings.MEMORY_ENQUEUE_TASKS = False


def sample(turn_id: int, stream_id: int, relevant=(1,)) -> TraceSample:
    return TraceSample(turn_id=turn_id, stream_id=stream_id, stream_kind="direct", at=0, text="t", impression="",
                       person_ids=(1,), pool=(), prompt_fact_ids=(), replied=True, relevant=tuple(relevant))


def test_the_fit_searches_every_whitelisted_knob_but_the_unfitted_ones():
    assert set(fit.knobs()) == set(WHITELIST) - UNFITTED
    assert "fact_recall_limit" not in fit.knobs() and "retention_prior" in fit.knobs()


def test_an_axis_keeps_values_in_bounds_and_integers_integral():
    for name, spec in WHITELIST.items():
        axis = fit.Axis(name, spec)
        assert axis.value(-1.0) == spec.min and axis.value(2.0) == spec.max
        assert axis.value(axis.position(spec.legacy)) == pytest.approx(spec.legacy, rel=1e-3, abs=1e-3)
        if spec.kind == "int":
            assert all(isinstance(axis.value(p / 10), int) for p in range(11))
    wide = fit.Axis("w", WHITELIST["bm25_weight"].__class__("float", 1.0, 100.0, 2.0, "w"))
    assert wide.log and wide.value(0.5) == pytest.approx(10.0)  # the middle of a log range


def test_fewer_than_thirty_labelled_turns_are_refused_saying_how_many_are_needed():
    with pytest.raises(fit.FitRefused) as refused:
        fit.split([sample(i, 1) for i in range(3)])
    assert refused.value.have == 3 and refused.value.needed == 30 and refused.value.status == 409
    assert "30" in str(refused.value) and "3 个" in str(refused.value)
    unlabelled = [sample(i, 1, relevant=()) for i in range(40)]  # labelled "nothing relevant": nothing to learn
    with pytest.raises(fit.FitRefused):
        fit.split(unlabelled)


def test_whole_streams_are_held_out_when_there_are_three_or_more():
    samples = [sample(s * 100 + i, s) for s in range(6) for i in range(6)]
    parts = fit.split(samples)
    assert parts.how == "stream" and parts.as_dict()["heldout_streams"] == [2, 5]
    assert (len(parts.dev), len(parts.heldout)) == (24, 12)
    one_stream = fit.split([sample(i, 7) for i in range(33)])
    assert one_stream.how == "turn" and (len(one_stream.dev), len(one_stream.heldout)) == (22, 11)


def test_the_compass_search_climbs_to_the_best_point_within_its_budget(monkeypatch):
    target = {"retention_prior": 0.3, "pool_share": 0.9}

    def evaluate(self, point, samples=None):
        score = -sum(abs(point[n] - v) for n, v in target.items())
        return fit.Scored(dict(point), 0.0, score, [])

    monkeypatch.setattr(fit.Search, "evaluate", evaluate)
    search = fit.Search(base={}, dev=[], vectors=QueryVectors(None), k=None, budget=300)
    start, best = search.run()
    assert start.point == fit.start_point({}, search.axes)
    assert best.point["retention_prior"] == pytest.approx(0.3, abs=0.02)
    assert best.point["pool_share"] == pytest.approx(0.9, abs=0.02)
    assert len(search.trajectory) <= 300 and search.trajectory[0]["moved"] == ""
    for point in (step["point"] for step in search.trajectory):
        assert all(WHITELIST[n].min <= v <= WHITELIST[n].max for n, v in point.items())
    tight = fit.Search(base={}, dev=[], vectors=QueryVectors(None), k=None, budget=3)
    tight.run()
    assert len(tight.trajectory) == 3


@pytest.fixture
def world():
    return labelled.build()


def test_a_fit_chooses_on_dev_turns_and_reports_held_out_ones(world):
    samples = fit.labelled_samples()
    assert len(samples) == 36
    ticks = []
    report = fit.fit(samples, {}, budget=3, progress=lambda done, total: ticks.append((done, total)))
    assert report["split"]["how"] == "stream" and report["split"]["heldout_turns"] == 12
    assert report["evaluations"] == 3 and len(report["trajectory"]) == 3
    assert set(report["knobs"]) == set(fit.knobs())
    held = report["heldout"]
    assert held["base"]["turns"] == held["chosen"]["turns"] == 12 and 0 <= held["base"]["recall"] <= 1
    assert report["verdict"] in {"better", "negligible", "worse", "unsure", "unchanged"}
    assert {t["split"] for t in report["per_turn"]} == {"dev", "heldout"} and len(report["per_turn"]) == 36
    assert all(t["relevant"] for t in report["per_turn"])
    assert ticks[-1] == (3 * 24 + 2 * 12, 3 * 24 + 2 * 12)
    if report["chosen"]["changed"]:
        assert held["gain"]["recall"]["n"] == 12 and held["gain"]["recall"]["low"] <= held["gain"]["recall"]["high"]
    assert report["chosen"]["params"] == services.validate_params(report["chosen"]["params"])


def test_the_fit_job_runs_and_one_click_saves_and_applies_its_profile(world, django_capture_on_commit_callbacks,
                                                                      monkeypatch):
    sent = []
    monkeypatch.setattr(evaluation.enqueue, "publish", lambda name, args: sent.append((name, args)))
    with django_capture_on_commit_callbacks(execute=True):
        job = fit.submit_fit(budget=2, user="staff")
    assert sent == [("tuning.tasks.fit_task", (job.pk,))]
    assert job.params["turns"] == 36 and job.params["base"]["profile"] == "default"
    assert fit.run_fit_job(job.pk, vectors=QueryVectors(None)) is True
    job.refresh_from_db()
    assert job.status == Job.Status.DONE and job.progress == job.total > 0
    assert job.result["base"]["profile"] == "default"
    with pytest.raises(services.ProfileError):
        fit.apply_fit(Job.objects.create(kind="fit", params={}), user="staff")  # not finished: nothing to apply
    applied = fit.apply_fit(job, user="staff")
    assert applied["profile"] == f"fit-{job.pk}" and overrides.active_overrides() == job.result["chosen"]["params"]
    ops = list(TuningOperation.objects.filter(op__in=["save", "apply"]).values_list("op", "user", "detail"))
    assert [(op, user) for op, user, _ in ops] == [("save", "staff"), ("apply", "staff")]
    assert all(detail["source"] == f"fit #{job.pk}" for _, _, detail in ops)
    services.rollback_to_default(user="staff")
    assert overrides.active_overrides() == {}


def test_a_fit_with_three_labelled_turns_is_refused_before_any_job(world):
    keep = [t for t, _, _ in world.turns[:3]]
    RelevanceLabel.objects.exclude(turn_id__in=keep).delete()
    with pytest.raises(fit.FitRefused) as refused:
        fit.submit_fit(budget=5)
    assert refused.value.have == 3 and "至少 30 个回合" in str(refused.value)
    assert not Job.objects.filter(kind="fit").exists()


def test_a_fit_whose_labels_went_away_meanwhile_fails_saying_why(world):
    job = Job.objects.create(kind="fit", params={"base": {"params": {}}, "budget": 2})
    RelevanceLabel.objects.all().delete()
    assert fit.run_fit_job(job.pk, vectors=QueryVectors(None)) is False
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "至少 30 个回合" in job.error


def test_evaluation_scores_labelled_turns_against_their_labels_only(world):
    """A labelled turn is in the human pool (its labels are the positives), an unlabelled confirmed
    one in the weak pool (its prompt facts): never both."""
    unlabelled = world.turns[0][0]
    RelevanceLabel.objects.filter(turn_id=unlabelled).delete()
    report = evaluation.evaluate(evaluation.build_samples(max_turns=500), {})
    rows = {r["turn_id"]: r for r in report["per_turn"]}
    assert rows[unlabelled]["pool"] == "weak"
    assert rows[unlabelled]["positives"] == Turn.objects.get(pk=unlabelled).prompt_fact_ids
    name, topic = world.turns[1][1:]
    assert rows[world.turns[1][0]]["pool"] == "human" and rows[world.turns[1][0]]["positives"] == [world.facts[(name, topic)]]
    overall = report["groups"]["all"]
    assert (overall["human"]["turns"], overall["weak"]["turns"]) == (35, 1)
    only_labelled = evaluation.build_samples(labelled=True, streams=[world.streams["阿青"].pk])
    assert len(only_labelled) == 5 and all(s.labelled for s in only_labelled)
    relevance.set_label(turn_id=unlabelled, fact_id=world.facts[world.turns[0][1:]], relevant=False, user="r")
    again = evaluation.evaluate(evaluation.build_samples(max_turns=500), {})
    assert again["groups"]["all"]["labelled_without_relevant"] == 1 and again["groups"]["all"]["weak"]["turns"] == 0


@pytest.mark.parametrize(("gain", "changed", "expected"), [
    ({"mean": 0.05, "low": 0.02, "high": 0.08}, {"x": 1}, "better"),
    ({"mean": 0.001, "low": 0.0002, "high": 0.002}, {"x": 1}, "negligible"),
    ({"mean": -0.03, "low": -0.05, "high": -0.01}, {"x": 1}, "worse"),
    ({"mean": 0.01, "low": -0.01, "high": 0.03}, {"x": 1}, "unsure"),
    ({"mean": 0.0, "low": 0.0, "high": 0.0}, {}, "unchanged"),
])
def test_the_verdict_needs_an_interval_above_zero_and_a_gain_worth_a_change(gain, changed, expected):
    assert fit.verdict(gain, changed) == expected
