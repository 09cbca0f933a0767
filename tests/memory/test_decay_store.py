"""Forgetting through the store — docs/REFERENCE.md §1 and §16."""
from __future__ import annotations

import math

import pytest

from curation import services as curation
from memory import selectors, services
from memory.engine import decay
from memory.models import Fact
from tests.memory.conftest import DAY, NOW, H, fact_row

T0 = NOW


def _recall(person, query, now, **kw):
    return selectors.recall_facts_in_scope(person_ids=[person.pk], query=query, now=now, stream_kind="direct", **kw)


def test_sweep_freezes_event_fact_but_it_stays_lexically_recallable(person):
    fid = services.add_fact(person_id=person.pk, content="他今天心情不好", kind="事件", at=T0).fact_id
    later = T0 + 100 * DAY
    assert services.sweep(at=later) == 1
    row = fact_row(fid)
    assert row.active is False
    assert fact_row(fid).due_at == decay.freeze_due_at(1.0, T0, 504)  # frozen rows keep their due_at

    hits = _recall(person, "心情", later)
    assert [h.id for h in hits] == [fid]
    assert hits[0].active is False
    assert hits[0].retention == pytest.approx(0.036857, abs=1e-6)
    # the read path is read-only: still frozen until a recall is adopted
    assert fact_row(fid).active is False

    assert services.reinforce_recalled_facts(facts=hits, at=later) == [fid]
    row = fact_row(fid)
    assert row.active is True
    assert row.strength == pytest.approx(0.373957, abs=1e-6)
    assert row.updated_at == later
    assert row.hit_count == 1 and row.last_hit_at == later
    assert row.due_at == decay.freeze_due_at(row.strength, later, 504)


def test_sweep_is_idempotent_and_reads_only_due_rows(person):
    services.add_fact(person_id=person.pk, content="他今天心情不好", kind="事件", at=T0)
    assert services.sweep(at=T0 + 69 * DAY) == 0  # 事件 freezes after 69.76 days
    assert services.sweep(at=T0 + 70 * DAY) == 1
    assert services.sweep(at=T0 + 71 * DAY) == 0


def test_sweep_reads_due_facts_a_batch_at_a_time_soonest_first(person, monkeypatch):
    """A turn's sweep (``once``) freezes one batch, the soonest due; the periodic sweep goes on until none is left."""
    monkeypatch.setattr(services, "SWEEP_BATCH", 2)
    ids = [services.add_fact(person_id=person.pk, content=f"他今天心情不好 {k}", kind="事件", at=T0 + k * H).fact_id
           for k in range(5)]
    later = T0 + 100 * DAY
    assert services.sweep(at=later, once=True) == 2
    assert [fact_row(i).active for i in ids] == [False, False, True, True, True]
    assert services.sweep(at=later) == 3
    assert not Fact.objects.filter(pk__in=ids, active=True).exists()
    assert services.sweep(at=later) == 0


def test_sweep_leaves_a_row_exactly_at_due_at_for_a_later_sweep(person):
    fid = services.add_fact(person_id=person.pk, content="他今天心情不好", kind="事件", at=T0).fact_id
    due = fact_row(fid).due_at
    # due_at is truncated to the ms: retention there is still a hair above 0.1
    assert decay.retention(1.0, T0, 504, due) > decay.FREEZE
    assert services.sweep(at=due) == 0
    assert fact_row(fid).active is True
    assert services.sweep(at=due + 1) == 1


def test_sweep_puts_right_a_due_instant_written_too_early(person):
    # an import or a hand edit left due_at before the instant the row's state gives: the first
    # sweep sets it right (freezing nothing), later sweeps do not read the row again
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fid = services.add_fact(person_id=person.pk, content="他今天心情不好", kind="事件", at=T0).fact_id
    right = fact_row(fid).due_at
    Fact.objects.filter(pk=fid).update(due_at=T0)
    assert services.sweep(at=T0 + DAY) == 0
    assert fact_row(fid).due_at == right and fact_row(fid).active is True
    with CaptureQueriesContext(connection) as queries:
        assert services.sweep(at=T0 + 2 * DAY) == 0
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT"]
    assert services.sweep(at=right + 1) == 1


def test_identity_survives_the_sweep_and_tops_top_facts(person):
    ident = services.add_fact(person_id=person.pk, content="他是一名程序员", kind="身份", at=T0).fact_id
    services.add_fact(person_id=person.pk, content="他昨天去爬山了", kind="事件", at=T0)
    later = T0 + 100 * DAY
    assert services.sweep(at=later) == 1
    top = selectors.top_facts(person_id=person.pk, now=later, stream_kind="direct")
    assert [f.id for f in top] == [ident]  # frozen rows are not in top_facts
    assert top[0].retention == pytest.approx(0.82704, abs=1e-5)


def test_pinned_fact_survives_the_sweep(person):
    fid = services.add_fact(person_id=person.pk, content="他喜欢喝冰美式", kind="偏好", at=T0).fact_id
    curation.pin_fact(fact_id=fid, at=T0 + 1)
    later = T0 + 1 + int(2160 * 5.5 * H)
    assert services.sweep(at=later) == 0
    row = fact_row(fid)
    assert row.active is True
    assert row.pinned
    assert row.due_at == T0 + 1 + 10_476_032_440_036
    assert row.due_at > later
    ret = decay.retention(row.strength, row.updated_at, row.half_life_hours, later)
    assert ret >= 0.99
    assert ret == pytest.approx(0.990644, abs=1e-6)


def test_unpinned_preference_would_have_frozen(person):
    services.add_fact(person_id=person.pk, content="他喜欢喝冰美式", kind="偏好", at=T0)
    assert services.sweep(at=T0 + 1 + int(2160 * 5.5 * H)) == 1


def test_reinforcement_ignores_revive_threshold(person):
    """A frozen fact at retention 0.02 revives with strength reinforce(0.02) = 0.363."""
    fid = services.add_fact(person_id=person.pk, content="他今天心情不好", kind="事件", at=T0).fact_id
    hours = 504 * math.log2(1 / 0.02)
    later = T0 + round(hours * H)
    assert services.sweep(at=later) == 1
    hits = _recall(person, "心情", later)
    assert hits[0].retention == pytest.approx(0.02, abs=1e-9)
    services.reinforce_recalled_facts(facts=hits, at=later)
    row = fact_row(fid)
    assert row.active is True
    assert row.strength == pytest.approx(0.363, abs=1e-9)


def test_recall_reinforcement_values(person):
    """A 偏好 fact at t0, recall at +2 days → 0.984715, recall again → 0.990065."""
    fid = services.add_fact(person_id=person.pk, content="玩家不喜欢吃香菜", kind="偏好", at=T0).fact_id
    now = T0 + 2 * DAY
    before = _recall(person, "香菜", now)
    assert before[0].id == fid
    assert before[0].retention < 1
    assert before[0].retention == pytest.approx(0.984715, abs=1e-6)
    # reading did not change anything
    assert fact_row(fid).strength == 1.0 and fact_row(fid).hit_count == 0
    services.reinforce_recalled_facts(facts=before, at=now)
    after = _recall(person, "香菜", now)
    assert after[0].retention > before[0].retention
    assert after[0].retention == pytest.approx(0.990065, abs=1e-6)


def test_reinforce_recalled_facts_requires_the_right_person(person, other_person):
    fid = services.add_fact(person_id=person.pk, content="玩家不喜欢吃香菜", kind="偏好", at=T0).fact_id
    hit = _recall(person, "香菜", T0)[0]
    from dataclasses import replace

    assert services.reinforce_recalled_facts(facts=[replace(hit, person_id=other_person.pk)], at=T0) == []
    assert fact_row(fid).hit_count == 0


def test_write_side_hit_reinforces_and_revives(person):
    fid = services.add_fact(person_id=person.pk, content="他今天心情不好", kind="事件", at=T0).fact_id
    later = T0 + 100 * DAY
    services.sweep(at=later)
    again = services.add_fact(person_id=person.pk, content="他今天心情不好", kind="事件", at=later)
    assert again.fact_id == fid and again.created is False
    row = fact_row(fid)
    assert row.active is True
    assert row.strength == pytest.approx(0.373957, abs=1e-6)
    assert row.hit_count == 1


def test_state_kind_keeps_twelve_hours(person):
    """The product keeps 状态 at 12 h (docs/REFERENCE.md §1; the reference retired the kind)."""
    fid = services.add_fact(person_id=person.pk, content="他现在很困", kind="状态", at=T0).fact_id
    row = fact_row(fid)
    assert row.half_life_hours == 12
    assert row.due_at == T0 + 143_507_293
    hit = _recall(person, "很困", T0 + 12 * H)[0]
    assert hit.retention == pytest.approx(0.5, abs=1e-9)
    assert services.sweep(at=T0 + 143_507_294) == 1


@pytest.mark.parametrize("kind,delta", [
    ("身份", 104_760_324_400), ("日期", 104_760_324_400), ("偏好", 25_831_312_865), ("关系", 25_831_312_865),
    ("习惯", 17_220_875_243), ("事件", 6_027_306_335), ("未分类", 6_027_306_335),
])
def test_due_at_is_precomputed_per_kind(person, kind, delta):
    fid = services.add_fact(person_id=person.pk, content=f"测试事实{kind}内容", kind=kind, at=T0).fact_id
    assert fact_row(fid).due_at - T0 == delta


def test_sweep_with_nothing_due_takes_no_write_lock(person):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    services.add_fact(person_id=person.pk, content="喜欢喝冰美式", kind="偏好", at=T0)
    with CaptureQueriesContext(connection) as queries:
        assert services.sweep(at=T0 + DAY) == 0
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT"]


def test_a_fact_reinforced_while_the_sweep_decides_stays_active(person, monkeypatch):
    fid = services.add_fact(person_id=person.pk, content="他今天心情不好", kind="事件", at=T0).fact_id
    later = T0 + 100 * DAY
    evaluate = decay.evaluate

    def reinforced_meanwhile(state, at):  # a turn confirms the fact between the sweep's read and its update
        fact = selectors.recall_facts_in_scope(person_ids=[person.pk], query="心情", now=later, stream_kind="direct")
        services.reinforce_recalled_facts(facts=fact, at=later)
        return evaluate(state, at)

    monkeypatch.setattr(decay, "evaluate", reinforced_meanwhile)
    assert services.sweep(at=later) == 0
    assert fact_row(fid).active is True
