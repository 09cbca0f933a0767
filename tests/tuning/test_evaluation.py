"""Trace-replay evaluation and what-if comparison (docs/REFERENCE.md §12)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from memory import overrides, recall, selectors
from memory import services as memory_services
from memory.engine.metrics import ndcg_at_k
from memory.engine.tuning import reconcile_trace_pool
from memory.models import Fact, Job, PipelineEvent, Turn
from tuning import evaluation, services
from tuning.evaluation import QueryVectors

pytestmark = pytest.mark.django_db

T0 = 1_700_000_000_000


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.EMBEDDING_PROVIDER = "none"
    settings.MEMORY_ENQUEUE_TASKS = False
    settings.FACT_RECALL_LIMIT = 6


def person(name: str):
    return memory_services.resolve_person(platform="qq", external_id=name, name=name, at=T0)


def stream(kind: str = "group", ext: str = "g1"):
    return memory_services.resolve_stream(platform="qq", kind=kind, external_id=ext)


def fact(p, content: str, **kw) -> int:
    return memory_services.add_fact(person_id=p.pk, content=content, at=T0, **kw).fact_id


def replay(persons, text, impression="", *, kind="group", at=T0 + 1000, overrides=None):
    return recall.replay_turn_pool(
        person_ids=[p.pk for p in persons], text=text, impression=impression, now=at, stream_kind=kind,
        overrides=overrides or {},
    )


def record_turn(s, speaker, persons, text, impression="", *, pool=None, prompt=(), replied=True, at=T0 + 1000):
    """A trace as the API records it; by default the pool is the replay with no overrides."""
    if pool is None:
        pool = [f.as_dict() for f in replay(persons, text, impression, kind=s.kind, at=at)]
    return Turn.objects.create(
        stream=s, speaker=speaker, at=at, text=text, impression=impression, stream_kind=s.kind,
        present_person_ids=[p.pk for p in persons], pool=pool, prompt_fact_ids=list(prompt),
        confirmed_at=at + 5 if replied else None,
    )


def fact_state():
    return {f["id"]: (f["strength"], f["hit_count"], f["updated_at"], f["active"]) for f in Fact.objects.values()}


# --- 84: nDCG ------------------------------------------------------------------------------


def test_ndcg_values():
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k([10, 11, 12, 13], {11, 13}, 4) == pytest.approx(0.650921, abs=1e-6)
    assert ndcg_at_k([10, 11, 12, 13], {11, 13}, 4) == pytest.approx(expected)
    assert ndcg_at_k([11, 13, 10], {11, 13}, 3) == 1.0
    assert ndcg_at_k([10, 11], set(), 2) == 0.0
    assert ndcg_at_k([1, 2, 3, 4], {4}, 3) == 0.0


# --- 90: reconciliation statuses -------------------------------------------------------------


def test_reconcile_statuses():
    same = reconcile_trace_pool([(11, 0.5), (12, 0.4)], [(11, 0.5), (12, 0.4)])
    assert (same.status, same.max_score_delta) == ("match", 0.0)
    diff = reconcile_trace_pool([(11, 0.5), (13, 0.4)], [(11, 0.5), (12, 0.4)])
    assert (diff.status, diff.missing, diff.extra, diff.order_changed) == ("mismatch", [12], [13], False)
    swapped = reconcile_trace_pool([(12, 0.4), (11, 0.5)], [(11, 0.5), (12, 0.4)])
    assert swapped.status == "mismatch" and swapped.order_changed


# --- 91: E-1 ----------------------------------------------------------------------------------


@pytest.fixture
def e1():
    a, b = person("阿青"), person("小白")
    s = stream("group")
    fa = fact(a, "阿青喜欢手冲咖啡")
    fb = fact(b, "小白常听爵士乐配咖啡")
    fact(b, "小白住在杭州")
    return {"a": a, "b": b, "s": s, "fa": fa, "fb": fb}


def test_e1_replay_covers_both_texts_and_reconciles_as_match(e1):
    pool = replay([e1["a"], e1["b"]], "咖啡 手冲", "爵士 咖啡")
    ids = [f.id for f in pool]
    assert e1["fa"] in ids and e1["fb"] in ids
    turn = record_turn(e1["s"], e1["a"], [e1["a"], e1["b"]], "咖啡 手冲", "爵士 咖啡", prompt=[e1["fb"]])
    report = evaluation.evaluate(evaluation.build_samples(), {})
    assert report["reconcile"] == {"matched": 1, "mismatched": 0, "drift_only": 0}
    row = report["per_turn"][0]
    assert row["turn_id"] == turn.pk and row["reconcile"]["status"] == "match"
    assert row["reconcile"]["max_score_delta"] == 0.0
    assert row["ranked_ids"] == ids[: report["k"]]  # no vectors: the replay order cut at k
    assert row["ndcg"] > 0


def test_e1_extra_trace_id_is_one_mismatch(e1):
    pool = [f.as_dict() for f in replay([e1["a"], e1["b"]], "咖啡 手冲", "爵士 咖啡")]
    pool.append({"factId": 99999, "score": 0.01})
    record_turn(e1["s"], e1["a"], [e1["a"], e1["b"]], "咖啡 手冲", "爵士 咖啡", pool=pool, prompt=[e1["fa"]])
    report = evaluation.evaluate(evaluation.build_samples(), {})
    assert report["reconcile"] == {"matched": 0, "mismatched": 1, "drift_only": 0}
    assert report["per_turn"][0]["reconcile"]["missing"] == [99999]
    assert report["groups"]["all"]["reconcile_mismatched"] == 1


def test_e1_unreplied_trace_is_reconciled_but_not_scorable(e1):
    record_turn(e1["s"], e1["a"], [e1["a"], e1["b"]], "咖啡 手冲", "爵士 咖啡", prompt=[], replied=False)
    report = evaluation.evaluate(evaluation.build_samples(), {})
    row = report["per_turn"][0]
    assert row["reconcile"]["status"] == "match"
    assert row["scorable"] is False and row["ndcg"] is None and row["pool"] is None
    assert report["groups"]["all"]["weak"] == {"turns": 0, "recall": None, "ndcg": None, "displaced": 0, "negatives": 0}


# --- 92: E-2 ----------------------------------------------------------------------------------


def test_e2_no_traces():
    assert evaluation.build_samples() == []
    report = evaluation.evaluate([], {})
    assert report["sample_count"] == 0 and report["per_turn"] == []
    empty = {"turns": 0, "recall": None, "ndcg": None, "displaced": 0, "negatives": 0}
    assert report["groups"]["all"] == {
        "sample_count": 0, "human": empty, "weak": empty, "labelled_without_relevant": 0, "recall_count_median": 0,
        "recall_count_mean": 0.0, "reconcile_mismatched": 0,
    }


# --- 93: E-3 ----------------------------------------------------------------------------------


def test_e3_vectors_rerank_like_production(e1):
    memory_services.store_fact_vector(fact_id=e1["fa"], vector=np.array([1, 0, 0, 0], dtype=np.float32))
    memory_services.store_fact_vector(fact_id=e1["fb"], vector=np.array([0, 1, 0, 0], dtype=np.float32))
    q = np.array([1, 0, 0, 0], dtype=np.float32)
    persons = [e1["a"], e1["b"]]
    record_turn(e1["s"], e1["a"], persons, "咖啡", prompt=[e1["fa"]])
    pool = replay(persons, "咖啡")
    expected = [f.id for f in selectors.rank_recalled_facts(pool, q, 6, overrides={})]
    assert expected[0] == e1["fa"]
    report = evaluation.evaluate(evaluation.build_samples(), {}, vectors=QueryVectors(lambda _t: q, "fixed"))
    row = report["per_turn"][0]
    assert row["ranked_ids"] == expected and row["vector"] is True
    assert row["ndcg"] == 1.0


# --- 94: embedding cache ------------------------------------------------------------------------


def test_same_text_embeds_once_and_no_embedder_means_zero_calls(e1):
    persons = [e1["a"], e1["b"]]
    record_turn(e1["s"], e1["a"], persons, "咖啡 手冲", prompt=[e1["fa"]])
    record_turn(e1["s"], e1["b"], persons, "咖啡 手冲", prompt=[e1["fa"]], at=T0 + 2000)
    seen = []

    def embed(text):
        seen.append(text)
        return np.array([1, 0, 0, 0], dtype=np.float32)

    report = evaluation.evaluate(evaluation.build_samples(), {}, vectors=QueryVectors(embed, "fake"))
    assert report["embedding"]["calls"] == 1 and report["embedding"]["cache_hits"] == 1 and seen == ["咖啡 手冲"]
    plain = evaluation.evaluate(evaluation.build_samples(), {}, vectors=QueryVectors(None))
    assert plain["embedding"]["calls"] == 0 and plain["groups"]["all"]["weak"]["ndcg"] > 0


def test_embedding_failure_is_cached_as_none(e1):
    record_turn(e1["s"], e1["a"], [e1["a"]], "咖啡", prompt=[e1["fa"]])
    record_turn(e1["s"], e1["a"], [e1["a"]], "咖啡", prompt=[e1["fa"]], at=T0 + 3000)

    def boom(_text):
        raise RuntimeError("provider down")

    vectors = QueryVectors(boom, "broken")
    report = evaluation.evaluate(evaluation.build_samples(), {}, vectors=vectors)
    assert report["embedding"]["calls"] == 1 and report["embedding"]["cache_hits"] == 1
    assert report["groups"]["all"]["weak"]["ndcg"] == 1.0


# --- 95: E-4 grouped means ------------------------------------------------------------------------


def test_e4_grouped_means(e1):
    a, b = e1["a"], e1["b"]
    group, direct = e1["s"], stream("direct", "d1")
    outside = fact(a, "阿青养了一只橘猫")  # not matched by the query: outside the pool
    record_turn(group, a, [a, b], "手冲 咖啡", prompt=[e1["fa"]])
    record_turn(group, a, [a, b], "手冲 咖啡", prompt=[outside], at=T0 + 2000)
    record_turn(direct, a, [a], "手冲 咖啡", prompt=[e1["fa"]], at=T0 + 3000)
    report = evaluation.evaluate(evaluation.build_samples(), {})
    g = report["groups"]
    assert g["all"]["weak"]["ndcg"] == pytest.approx(round(2 / 3, 4)) and g["all"]["weak"]["displaced"] == 1
    assert g["group"]["weak"]["ndcg"] == 0.5 and g["group"]["weak"]["displaced"] == 1
    assert g["direct"]["weak"]["ndcg"] == 1.0 and g["direct"]["weak"]["displaced"] == 0
    assert (g["all"]["sample_count"], g["group"]["sample_count"], g["direct"]["sample_count"]) == (3, 2, 1)
    assert (g["all"]["weak"]["turns"], g["all"]["human"]["turns"]) == (3, 0)
    assert report["per_turn"][1]["displaced"] == [outside]
    assert g["all"]["weak"]["recall"] == pytest.approx(round(2 / 3, 4)) and g["group"]["weak"]["recall"] == 0.5


def test_desktop_turns_have_a_row_of_their_own(e1):
    desk = stream("desktop", "pc")
    record_turn(desk, e1["a"], [e1["a"]], "咖啡", prompt=[e1["fa"]])
    g = evaluation.evaluate(evaluation.build_samples(), {})["groups"]
    counts = (g["all"]["sample_count"], g["group"]["sample_count"], g["direct"]["sample_count"], g["desktop"]["sample_count"])
    assert counts == (1, 0, 0, 1)


def test_recall_counts_upper_median_and_mean():
    rows = [
        {"stream_kind": "group", "pool": None, "recall_count": c, "displaced": [], "recall": None,
         "reconcile": {"status": "match"}, "ndcg": None}
        for c in (1, 4, 2, 3)
    ]
    stats = evaluation.group_stats(rows)
    assert stats["recall_count_median"] == 3 and stats["recall_count_mean"] == 2.5


# --- 87: evaluated overrides, live state untouched, nothing reinforced ------------------------------


def test_evaluated_overrides_do_not_touch_the_live_state_and_reinforce_nothing(e1):
    services.save_profile("alpha", {"ppr_alpha": 0.9})
    services.apply_profile("alpha")
    persons = [e1["a"], e1["b"]]
    for i in range(3):
        record_turn(e1["s"], e1["a"], persons, "咖啡 手冲", "爵士", prompt=[e1["fa"], e1["fb"]], at=T0 + 1000 * (i + 1))
    before = fact_state()
    events_before = set(PipelineEvent.objects.values_list("kind", flat=True))
    report = evaluation.evaluate(
        evaluation.build_samples(), {"fact_recall_limit": 3}, vectors=QueryVectors(lambda t: np.ones(4, np.float32))
    )
    assert report["k"] == 3 and report["sample_count"] == 3
    assert all(r["recall_count"] >= 1 for r in report["per_turn"]) and report["groups"]["all"]["weak"]["ndcg"] > 0
    assert overrides.active_overrides() == {"ppr_alpha": 0.9}
    assert fact_state() == before
    assert all(f.hit_count == 0 for f in Fact.objects.all())
    new_kinds = set(PipelineEvent.objects.values_list("kind", flat=True)) - events_before
    assert new_kinds == {"retrieval_eval_done"}


def test_end_to_end_turns_from_the_recall_path_replay_and_leave_facts_alone(e1):
    """A turn recorded by prepare_turn replays as an exact match; after confirm_turn reinforced
    its prompt facts the same ids come back with (slightly) different scores — the replay
    reports that drift as a mismatch with its max score delta. Evaluating changes nothing."""
    s = e1["s"]
    memory_services.append_message(stream_id=s.pk, role="user", content="聊聊咖啡", sender_person_id=e1["b"].pk, at=T0)
    ctx = recall.prepare_turn(stream_id=s.pk, speaker_id=e1["a"].pk, text="手冲 咖啡", impression="爵士", at=T0 + 100)
    fresh = evaluation.evaluate(evaluation.build_samples(), overrides.active_overrides())["per_turn"][0]
    assert fresh["reconcile"]["status"] == "match" and fresh["reconcile"]["max_score_delta"] == 0.0
    assert fresh["scorable"] is False  # not confirmed yet
    recall.confirm_turn(turn_id=ctx.turn_id, at=T0 + 200)
    turn = Turn.objects.get(pk=ctx.turn_id)
    assert turn.prompt_fact_ids == [e1["fa"], e1["fb"]]
    before = fact_state()
    row = evaluation.evaluate(evaluation.build_samples(), overrides.active_overrides())["per_turn"][0]
    rec = row["reconcile"]
    assert rec["status"] == "mismatch" and rec["missing"] == rec["extra"] == [] and not rec["order_changed"]
    assert rec["drift_only"] is True
    assert 0 < rec["max_score_delta"] < 1e-3
    assert row["ranked_ids"] == turn.prompt_fact_ids and row["ndcg"] == 1.0
    assert fact_state() == before


# --- what-if comparison ----------------------------------------------------------------------------


def test_compare_lists_facts_moving_in_and_out_of_top_k(e1):
    a, b = e1["a"], e1["b"]
    extra = [fact(a, f"阿青第{i}次提到咖啡豆") for i in range(4)]
    record_turn(e1["s"], a, [a, b], "咖啡", prompt=[e1["fa"]])
    samples = evaluation.build_samples()
    before = fact_state()
    report = evaluation.compare(
        samples,
        {"label": "A", "params": {"fact_recall_limit": 1}},
        {"label": "B", "params": {"fact_recall_limit": 4}},
    )
    assert report["a"]["k"] == 1 and report["b"]["k"] == 4
    turn = report["per_turn"][0]
    assert len(turn["top_a"]) == 1 and len(turn["top_b"]) == 4
    assert turn["moved_out"] == [] and set(turn["moved_in"]) == set(turn["top_b"]) - set(turn["top_a"])
    assert report["changed_turns"] == 1
    assert set(report["facts"]) >= {str(i) for i in turn["moved_in"]}
    weak = report["difference"]["all"]["weak"]
    assert weak["ndcg"]["mean"] == pytest.approx(
        report["b"]["groups"]["all"]["weak"]["ndcg"] - report["a"]["groups"]["all"]["weak"]["ndcg"], abs=1e-4
    )
    assert weak["ndcg"]["n"] == 1 and weak["ndcg"]["low"] <= weak["ndcg"]["mean"] <= weak["ndcg"]["high"]
    assert report["difference"]["group"]["weak"]["ndcg"] is not None and report["difference"]["direct"]["weak"]["ndcg"] is None
    assert report["difference"]["all"]["human"] == {"recall": None, "ndcg": None}
    assert fact_state() == before
    assert extra  # facts exist


def test_compare_same_params_changes_nothing(e1):
    record_turn(e1["s"], e1["a"], [e1["a"], e1["b"]], "咖啡", prompt=[e1["fa"]])
    report = evaluation.compare(evaluation.build_samples(), {"params": {}}, {"params": {}})
    assert report["changed_turns"] == 0 and report["difference"]["all"]["weak"]["ndcg"]["mean"] == 0.0


# --- jobs ---------------------------------------------------------------------------------------


def test_job_runs_with_progress_and_stores_the_report(e1, django_capture_on_commit_callbacks, monkeypatch, settings):
    from celery import Celery

    from tests.redis_url import TEST_REDIS_URL
    from tuning import tasks

    settings.REDIS_URL = TEST_REDIS_URL  # the pre-publish check pings it; nothing is published
    sent = []
    monkeypatch.setattr(Celery, "send_task", lambda self, name, args=None, **options: sent.append((name, args[0])))
    record_turn(e1["s"], e1["a"], [e1["a"], e1["b"]], "咖啡", prompt=[e1["fa"]])
    record_turn(e1["s"], e1["a"], [e1["a"], e1["b"]], "爵士", prompt=[e1["fb"]], at=T0 + 5000)
    target = evaluation.resolve_target(params={"fact_recall_limit": 2})
    with django_capture_on_commit_callbacks(execute=True):
        job = evaluation.submit_evaluation(target, max_turns=10, user="alice")
    assert sent == [("tuning.tasks.evaluate_task", job.pk)]
    job.refresh_from_db()
    assert (job.status, job.kind, job.created_by) == ("queued", "evaluate", "alice")
    progress = []
    monkeypatch.setattr(evaluation, "PROGRESS_INTERVAL_S", 0.0)
    import memory.dispatch.jobs

    orig = memory.dispatch.jobs.job_progress

    def spy(**kw):
        progress.append((kw["progress"], kw.get("total")))
        return orig(**kw)

    monkeypatch.setattr(memory.dispatch.jobs, "job_progress", spy)
    assert tasks.evaluate_task(job.pk) is True
    job.refresh_from_db()
    assert job.status == "done" and job.progress == job.total == 2 and job.percent == 100
    assert job.result["k"] == 2 and job.result["sample_count"] == 2
    assert progress == [(1, 2), (2, 2)]
    assert tasks.evaluate_task(job.pk) is False  # duplicate delivery: no-op


def test_job_max_turns_takes_the_most_recent(e1):
    for i in range(5):
        record_turn(e1["s"], e1["a"], [e1["a"]], "咖啡", prompt=[e1["fa"]], at=T0 + 1000 * (i + 1))
    samples = evaluation.build_samples(max_turns=2)
    assert [s.at for s in samples] == [T0 + 4000, T0 + 5000]


def test_failed_job_records_the_error(e1):
    record_turn(e1["s"], e1["a"], [e1["a"]], "咖啡", prompt=[e1["fa"]])
    job = Job.objects.create(kind="evaluate", params={"target": {"params": {}}, "max_turns": 5})

    def broken(**_kw):
        raise RuntimeError("replay exploded")

    assert evaluation.run_job(job.pk, vectors=QueryVectors(None), replay=broken) is False
    job.refresh_from_db()
    assert job.status == "failed" and "replay exploded" in job.error


def test_compare_job(e1):
    record_turn(e1["s"], e1["a"], [e1["a"], e1["b"]], "咖啡", prompt=[e1["fa"]])
    services.save_profile("wide", {"fact_recall_limit": 10})
    a = evaluation.resolve_target()  # the active profile
    b = evaluation.resolve_target(profile="wide")
    job = Job.objects.create(kind="compare", params={"a": a, "b": b, "max_turns": 5})
    assert evaluation.run_job(job.pk, vectors=QueryVectors(None)) is True
    job.refresh_from_db()
    assert job.result["kind"] == "compare" and job.result["b"]["k"] == 10
    assert job.result["a"]["profile"] == "default"


def test_resolve_target():
    services.save_profile("p", {"ppr_hops": 3})
    assert evaluation.resolve_target(profile="p")["params"] == {"ppr_hops": 3}
    assert evaluation.resolve_target(params={"bm25_weight": 2})["params"] == {"bm25_weight": 2.0}
    assert evaluation.resolve_target()["profile"] == "default"
    services.apply_profile("p")
    assert evaluation.resolve_target()["params"] == {"ppr_hops": 3}
    with pytest.raises(services.ProfileError) as err:
        evaluation.resolve_target(profile="ghost")
    assert err.value.status == 404
    with pytest.raises(services.ProfileError):
        evaluation.resolve_target(params={"ppr_hops": 2.5})
