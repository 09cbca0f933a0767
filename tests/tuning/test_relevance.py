"""Relevance labels: set, refuse, import all or nothing, export, journal; forgetting and retention."""
from __future__ import annotations

import pytest

from memory import services as memory_services
from memory.models import Fact, Turn
from memory.pipeline import retention
from memory.privacy import forget
from tests.tuning import world as labelled
from tuning import relevance
from tuning.models import RelevanceLabel, TuningOperation

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _offline(settings):
    settings.EMBEDDING_PROVIDER = "none"
    settings.MEMORY_ENQUEUE_TASKS = False


@pytest.fixture
def world():
    return labelled.build(["阿青", "小白"], label=False)


def test_a_label_is_stored_changed_and_cleared_with_who_and_when_journalled(world):
    turn_id, name, topic = world.turns[0]
    fact_id = world.facts[(name, topic)]
    label = relevance.set_label(turn_id=turn_id, fact_id=fact_id, relevant=True, user="reviewer", at=5)
    assert (label.relevant, label.user, label.at, label.added) == (True, "reviewer", 5, False)
    assert relevance.set_label(turn_id=turn_id, fact_id=fact_id, relevant=True, user="other", at=6).user == "reviewer"
    relevance.set_label(turn_id=turn_id, fact_id=fact_id, relevant=False, user="staff", at=7)
    assert RelevanceLabel.objects.get().relevant is False
    assert relevance.set_label(turn_id=turn_id, fact_id=fact_id, relevant=None, user="staff", at=8) is None
    assert not RelevanceLabel.objects.exists()
    ops = list(TuningOperation.objects.order_by("id").values_list("op", "user", "detail"))
    assert [(op, user) for op, user, _ in ops] == [("label", "reviewer"), ("label", "staff"), ("unlabel", "staff")]
    assert ops[1][2] == {"relevant": False, "prev": {"relevant": True, "user": "reviewer", "at": 5}}
    assert ops[2][2]["prev"]["relevant"] is False


def test_a_fact_missing_from_the_pool_is_labelled_as_added(world):
    turn_id, name, _ = world.turns[0]
    pool = {e["factId"] for e in Turn.objects.get(pk=turn_id).pool}
    outside = next(f for (n, _t), f in world.facts.items() if n == name and f not in pool)
    assert relevance.set_label(turn_id=turn_id, fact_id=outside, relevant=True, user="r").added is True


@pytest.mark.parametrize(("case", "status"), [("unknown_turn", 404), ("unknown_fact", 404), ("other_person", 409)])
def test_a_refused_label_stores_nothing(world, case, status):
    turn_id, name, topic = world.turns[0]
    fact_id = world.facts[(name, topic)]
    other = world.facts[("小白", topic)]
    args = {"unknown_turn": (10**9, fact_id), "unknown_fact": (turn_id, 10**9), "other_person": (turn_id, other)}[case]
    with pytest.raises(relevance.LabelError) as refused:
        relevance.set_label(turn_id=args[0], fact_id=args[1], relevant=True, user="r")
    assert refused.value.status == status
    assert not RelevanceLabel.objects.exists() and not TuningOperation.objects.exists()


def test_a_private_fact_cannot_be_labelled_for_a_group_turn(world):
    group = memory_services.resolve_stream(platform="qq", kind="group", external_id="g")
    private = world.facts[("阿青", "橘猫")]
    turn = Turn.objects.create(stream=group, speaker_id=world.persons["阿青"], at=1, text="橘猫", stream_kind="group",
                               present_person_ids=[world.persons["阿青"]])
    with pytest.raises(relevance.LabelError, match="私聊"):
        relevance.set_label(turn_id=turn.pk, fact_id=private, relevant=True, user="r")


def test_an_import_is_all_or_nothing_and_names_every_refused_entry(world):
    (t0, n0, p0), (t1, n1, p1) = world.turns[0], world.turns[1]
    good = [{"turn": t0, "fact": world.facts[(n0, p0)], "relevant": True}]
    bad = good + [
        {"turn": t1, "fact": 10**9, "relevant": True},
        {"turn": t1, "fact": world.facts[("小白", p1)], "relevant": False},
        {"turn": t1, "fact": "7", "relevant": True},
        {"turn": t0, "fact": world.facts[(n0, p0)], "relevant": False},
    ]
    with pytest.raises(relevance.LabelInputError) as refused:
        relevance.import_labels(bad, user="importer")
    assert [e["index"] for e in refused.value.errors] == [1, 2, 3, 4]
    assert "不存在" in refused.value.errors[0]["message"] and "没有这个人" in refused.value.errors[1]["message"]
    assert not RelevanceLabel.objects.exists() and not TuningOperation.objects.exists()
    assert relevance.import_labels(good, user="importer") == {"created": 1, "updated": 0, "unchanged": 0}
    again = [{**good[0], "relevant": False}, {"turn": t1, "fact": world.facts[(n1, p1)], "relevant": True}]
    assert relevance.import_labels(again, user="importer") == {"created": 1, "updated": 1, "unchanged": 0}
    assert TuningOperation.objects.filter(op="import").count() == 3


def test_export_then_import_round_trips(world):
    for turn_id, name, topic in world.turns:
        relevance.set_label(turn_id=turn_id, fact_id=world.facts[(name, topic)], relevant=True, user="r")
    exported = relevance.export_labels()
    assert len(exported["labels"]) == len(world.turns) and set(exported["labels"][0]) >= {"turn", "fact", "relevant"}
    RelevanceLabel.objects.all().delete()
    assert relevance.import_labels(exported["labels"], user="r")["created"] == len(world.turns)
    progress = relevance.progress()
    assert (progress.turns, progress.turns_with_relevant, progress.labels, progress.relevant) == (12, 12, 12, 12)


def test_forgetting_a_fact_or_a_person_takes_their_labels_and_counts_them(world):
    turn_id, name, topic = world.turns[0]
    fact_id = world.facts[(name, topic)]
    relevance.set_label(turn_id=turn_id, fact_id=fact_id, relevant=True, user="r")
    other_turn, other_name, other_topic = world.turns[-1]
    relevance.set_label(turn_id=other_turn, fact_id=world.facts[(other_name, other_topic)], relevant=True, user="r")
    forget.forget(target="fact", target_id=fact_id, user="op")
    assert not RelevanceLabel.objects.filter(fact_id=fact_id).exists()
    assert not TuningOperation.objects.filter(fact_id=fact_id).exists()
    plan = forget.plan_forget(target="person", target_id=world.persons[other_name])
    counts = plan.counts()
    assert counts["relevance_labels"] == 1 and counts["tuning_operations"] == 1  # the label and its journal row
    assert plan.dependents["relevance_labels"] == list(RelevanceLabel.objects.values_list("id", flat=True))
    forget.forget(target="person", target_id=world.persons[other_name], user="op", expected_digest=plan.digest())
    assert not RelevanceLabel.objects.exists() and not TuningOperation.objects.exists()


def test_forgetting_a_stream_takes_its_turns_labels_and_keeps_the_facts(world):
    (turn_id, name, topic), (other_turn, other_name, other_topic) = world.turns[0], world.turns[-1]
    fact_id = world.facts[(name, topic)]
    relevance.set_label(turn_id=turn_id, fact_id=fact_id, relevant=True, user="r")
    relevance.set_label(turn_id=other_turn, fact_id=world.facts[(other_name, other_topic)], relevant=True, user="r")
    plan = forget.plan_forget(target="stream", target_id=world.streams[name].pk)
    assert turn_id in plan.turns and fact_id not in plan.facts
    label_id = RelevanceLabel.objects.get(turn_id=turn_id).pk
    assert plan.dependents["relevance_labels"] == [label_id] and plan.counts()["relevance_labels"] == 1
    forget.forget(target="stream", target_id=world.streams[name].pk, user="op", expected_digest=plan.digest())
    assert not RelevanceLabel.objects.filter(turn_id=turn_id).exists()
    assert not TuningOperation.objects.filter(turn_id=turn_id).exists()
    assert Fact.objects.filter(pk=fact_id).exists()
    assert list(RelevanceLabel.objects.values_list("turn_id", flat=True)) == [other_turn]


def test_the_forget_preview_page_counts_the_labels(world, client):
    from django.contrib.auth.models import User

    turn_id, name, topic = world.turns[0]
    relevance.set_label(turn_id=turn_id, fact_id=world.facts[(name, topic)], relevant=True, user="r")
    client.force_login(User.objects.create_superuser("root", "r@example.com", "pw"))
    html = client.get(f"/forget/fact/{world.facts[(name, topic)]}/").content.decode()
    assert 'data-dependent="相关性标注"' in html


def test_retention_keeps_a_labelled_turn(world, monkeypatch):
    turn_id, name, topic = world.turns[0]
    relevance.set_label(turn_id=turn_id, fact_id=world.facts[(name, topic)], relevant=True, user="r")
    Turn.objects.update(at=1)  # older than any age limit
    retention.prune_turns(now=10**13, max_count=0, max_hours=1)
    assert Turn.objects.count() == len(world.turns)  # the newest 500 always stay
    monkeypatch.setattr(retention, "REPLAYABLE_TURNS", 1)
    newest = Turn.objects.order_by("-id").values_list("id", flat=True).first()
    assert retention.prune_turns(now=10**13, max_count=0, max_hours=1) == len(world.turns) - 2
    assert set(Turn.objects.values_list("id", flat=True)) == {turn_id, newest}  # the labelled one and the newest
    assert RelevanceLabel.objects.filter(turn_id=turn_id).exists()
