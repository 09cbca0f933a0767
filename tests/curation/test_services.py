"""Manual curation with journal and undo — docs/REFERENCE.md §11."""
from __future__ import annotations

import pytest

from curation import selectors as journal
from curation import services as curation
from memory import selectors, services
from memory.models import Fact, FactOperation, FactState
from tests.memory.conftest import NOW, events

DECAY = ("strength", "half_life_hours", "updated_at", "due_at", "active")


def _fact(person, content, slot="", kind="偏好", at=NOW, **kw):
    return services.add_fact(person_id=person.pk, content=content, slot=slot, kind=kind, at=at, **kw).fact_id


def _decay(fid):
    return Fact.objects.values_list(*DECAY).get(pk=fid)


def _three(person, query, now=NOW + 1000):
    """The ids returned by the three read entries (lexical in scope, across persons, top_facts)."""
    in_scope = selectors.recall_facts_in_scope(person_ids=[person.pk], query=query, now=now, stream_kind="direct")
    across = selectors.recall_facts_across_persons(query=query, now=now, stream_kind="direct")
    top = [f for f in selectors.top_facts(person_id=person.pk, now=now, stream_kind="direct") if query in f.content]
    return [f.id for f in in_scope], [f.id for f in across], [f.id for f in top]


def _retentions(person, query, now=NOW + 1000):
    return [f.retention for f in selectors.recall_facts_in_scope(person_ids=[person.pk], query=query, now=now,
                                                                  stream_kind="direct")]


class TestInvalidateRestore:
    def test_invalidate_hides_from_every_entry(self, person):
        fid = _fact(person, "他现在住在杭州", slot="居住地")
        op = curation.invalidate_fact(fact_id=fid, user="alice", at=NOW + 1)
        assert _three(person, "杭州") == ([], [], [])
        row = Fact.objects.get(pk=fid)
        assert row.superseded_by_id == fid and row.state == FactState.INVALID
        assert (op.op, op.actor, op.prev, op.user, op.fact_id) == ("invalidate", "manual", {"superseded_by": None},
                                                                   "alice", fid)
        assert events("memory_fact_invalidated") == [{"factId": fid, "personId": person.pk, "operationId": op.pk}]

    def test_restore_brings_it_back_with_the_same_retention(self, person):
        fid = _fact(person, "他现在住在杭州", slot="居住地")
        before = _retentions(person, "杭州")
        curation.invalidate_fact(fact_id=fid, at=NOW + 1)
        op = curation.restore_fact(fact_id=fid, at=NOW + 2)
        assert _three(person, "杭州") == ([fid], [fid], [fid])
        assert _retentions(person, "杭州") == before
        assert op.prev == {"superseded_by": fid}
        assert events("memory_fact_restored")[0]["factId"] == fid

    def test_restore_a_superseded_fact(self, person):
        old = _fact(person, "他现在住在成都", slot="居住地")
        new = _fact(person, "他现在住在杭州", slot="居住地", supersedes=old)
        op = curation.restore_fact(fact_id=old, at=NOW + 1)
        assert op.prev == {"superseded_by": new}
        assert Fact.objects.get(pk=old).superseded_by_id is None

    def test_frozen_facts_can_be_invalidated(self, person):
        fid = _fact(person, "他今天心情不好", kind="事件", at=0)
        services.sweep(at=NOW)
        curation.invalidate_fact(fact_id=fid, at=NOW)
        assert Fact.objects.get(pk=fid).superseded_by_id == fid

    def test_guards(self, person):
        fid = _fact(person, "他现在住在杭州")
        with pytest.raises(curation.FactNotFoundError):
            curation.invalidate_fact(fact_id=99999)
        with pytest.raises(curation.FactStateError):
            curation.restore_fact(fact_id=fid)
        curation.invalidate_fact(fact_id=fid, at=NOW)
        with pytest.raises(curation.FactStateError):
            curation.invalidate_fact(fact_id=fid, at=NOW)
        assert FactOperation.objects.count() == 1


class TestPin:
    def test_pin_and_unpin_log_the_decay_fields(self, person):
        fid = _fact(person, "他喜欢喝冰美式")
        original = _decay(fid)
        pin = curation.pin_fact(fact_id=fid, at=NOW + 10)
        assert pin.prev == dict(zip(DECAY, [original[0], original[1], original[2], original[3], 1], strict=True))
        row = Fact.objects.get(pk=fid)
        assert row.pinned and row.strength == 1.0 and row.updated_at == NOW + 10
        pinned = _decay(fid)
        unpin = curation.unpin_fact(fact_id=fid, at=NOW + 20)
        assert unpin.prev == dict(zip(DECAY, [pinned[0], 876_000.0, pinned[2], pinned[3], 1], strict=True))
        row = Fact.objects.get(pk=fid)
        assert (row.half_life_hours, row.strength, row.updated_at) == (2160, 1.0, NOW + 20)
        with pytest.raises(curation.FactStateError):
            curation.unpin_fact(fact_id=fid, at=NOW + 30)

    def test_pin_then_undo_is_bit_identical(self, person):
        fid = _fact(person, "他喜欢喝冰美式", at=NOW - 12_345_678)
        original = _decay(fid)
        pin = curation.pin_fact(fact_id=fid, at=NOW)
        undo = curation.undo_operation(operation_id=pin.pk, at=NOW + 1)
        assert _decay(fid) == original
        pin.refresh_from_db()
        assert pin.undone_by_id == undo.pk
        assert (undo.op, undo.undo_of_id, undo.related_fact_id, undo.fact_id) == ("undo", pin.pk, fid, fid)
        assert undo.prev["half_life_hours"] == 876_000.0

    def test_pin_guards(self, person):
        fid = _fact(person, "他喜欢喝冰美式")
        curation.pin_fact(fact_id=fid, at=NOW)
        with pytest.raises(curation.FactStateError):
            curation.pin_fact(fact_id=fid, at=NOW)
        frozen = _fact(person, "他今天心情不好", kind="事件", at=0)
        services.sweep(at=NOW)
        with pytest.raises(curation.FactStateError):
            curation.pin_fact(fact_id=frozen, at=NOW)
        gone = _fact(person, "他住在成都")
        curation.invalidate_fact(fact_id=gone, at=NOW)
        with pytest.raises(curation.FactStateError):
            curation.pin_fact(fact_id=gone, at=NOW)
        with pytest.raises(curation.FactNotFoundError):
            curation.pin_fact(fact_id=99999, at=NOW)


class TestUndo:
    def test_invalidate_then_undo_is_bit_identical(self, person):
        fid = _fact(person, "他现在住在杭州", at=NOW - 987_654_321)
        original = _decay(fid)
        op = curation.invalidate_fact(fact_id=fid, at=NOW)
        undo = curation.undo_operation(operation_id=op.pk, at=NOW + 1)
        row = Fact.objects.get(pk=fid)
        assert row.superseded_by_id is None
        assert _decay(fid) == original
        assert undo.prev == {"superseded_by": fid}
        assert events("memory_operation_undone") == [
            {"operationId": undo.pk, "undoOf": op.pk, "factId": fid, "personId": person.pk}
        ]

    def test_undo_of_replace_self_invalidates_the_new_row(self, person):
        old = _fact(person, "他现在住在成都", slot="居住地")
        write = curation.replace_fact(fact_id=old, content="他现在住在杭州", at=NOW + 1)
        assert write.created and write.superseded == old
        op = FactOperation.objects.get(pk=write.operation_id)
        assert (op.op, op.actor, op.fact_id, op.related_fact_id) == ("replace", "manual", old, write.fact_id)
        assert op.prev == {"superseded_by": None, "new_row_created": True}
        new = Fact.objects.get(pk=write.fact_id)
        assert (new.kind, new.slot, new.origin_kind) == ("偏好", "居住地", "legacy")
        undo = curation.undo_operation(operation_id=op.pk, at=NOW + 2)
        assert Fact.objects.get(pk=old).superseded_by_id is None
        assert Fact.objects.get(pk=write.fact_id).superseded_by_id == write.fact_id  # not deleted
        assert undo.prev == {"superseded_by": write.fact_id, "related_fact_invalidated": write.fact_id}
        assert _three(person, "成都")[0] == [old]
        assert _three(person, "杭州")[0] == []

    def test_undo_of_a_reinforcing_supersede_keeps_the_existing_row(self, person):
        existing = _fact(person, "他现在住在杭州", slot="居住地")
        old = _fact(person, "他现在住在成都", slot="居住地")
        write = services.add_fact(person_id=person.pk, content="他现在住在杭州", slot="居住地", supersedes=old,
                                  at=NOW + 5)
        undo = curation.undo_operation(operation_id=write.operation_id, at=NOW + 6)
        assert Fact.objects.get(pk=old).superseded_by_id is None
        assert Fact.objects.get(pk=existing).superseded_by_id is None
        assert "related_fact_invalidated" not in undo.prev

    def test_undo_guards(self, person):
        fid = _fact(person, "他现在住在杭州")
        op = curation.invalidate_fact(fact_id=fid, at=NOW)
        undo = curation.undo_operation(operation_id=op.pk, at=NOW + 1)
        with pytest.raises(curation.FactStateError):
            curation.undo_operation(operation_id=op.pk, at=NOW + 2)
        with pytest.raises(curation.FactStateError):
            curation.undo_operation(operation_id=undo.pk, at=NOW + 2)
        with pytest.raises(curation.FactNotFoundError):
            curation.undo_operation(operation_id=99999, at=NOW + 2)


class TestAdjudicate:
    def test_resolve_and_restore(self, person):
        first = _fact(person, "他现在住在成都", slot="居住地")
        second = _fact(person, "他现在住在杭州", slot="居住地")
        groups = selectors.conflict_groups(now=NOW)
        assert len(groups) == 1 and [m["id"] for m in groups[0].members] == [first, second]
        op = curation.adjudicate(keep_fact_id=second, drop_fact_id=first, at=NOW + 1)
        assert (op.op, op.fact_id, op.related_fact_id, op.prev) == ("adjudicate", first, second,
                                                                    {"superseded_by": None})
        assert selectors.conflict_groups(now=NOW) == []
        assert Fact.objects.get(pk=first).superseded_by_id == first
        assert events("memory_conflict_resolved")[0] == {
            "keepFactId": second, "dropFactId": first, "personId": person.pk, "operationId": op.pk,
        }
        curation.restore_fact(fact_id=first, at=NOW + 2)
        assert [m["id"] for m in selectors.conflict_groups(now=NOW)[0].members] == [first, second]

    def test_undo_adjudicate(self, person):
        first = _fact(person, "他现在住在成都", slot="居住地")
        second = _fact(person, "他现在住在杭州", slot="居住地")
        op = curation.adjudicate(keep_fact_id=second, drop_fact_id=first, at=NOW + 1)
        curation.undo_operation(operation_id=op.pk, at=NOW + 2)
        assert len(selectors.conflict_groups(now=NOW)) == 1

    def test_guards(self, person, other_person):
        a = _fact(person, "他现在住在成都", slot="居住地")
        b = _fact(person, "他现在住在杭州", slot="居住地")
        c = _fact(person, "他是程序员", slot="职业")
        d = _fact(other_person, "他现在住在深圳", slot="居住地")
        e = _fact(person, "他喜欢猫")
        f = _fact(person, "他喜欢狗")
        with pytest.raises(curation.CurationInputError):
            curation.adjudicate(keep_fact_id=a, drop_fact_id=a)
        with pytest.raises(ValueError):  # CurationInputError is a ValueError (HTTP 400)
            curation.adjudicate(keep_fact_id=a, drop_fact_id=c)
        with pytest.raises(curation.CurationInputError):
            curation.adjudicate(keep_fact_id=a, drop_fact_id=d)
        with pytest.raises(curation.CurationInputError):
            curation.adjudicate(keep_fact_id=e, drop_fact_id=f)  # empty slot
        with pytest.raises(curation.FactNotFoundError, match="#99999"):
            curation.adjudicate(keep_fact_id=a, drop_fact_id=99999)
        curation.invalidate_fact(fact_id=b, at=NOW)
        with pytest.raises(curation.FactStateError):
            curation.adjudicate(keep_fact_id=a, drop_fact_id=b)
        assert FactOperation.objects.filter(op="adjudicate").count() == 0

    def test_frozen_member_cannot_be_adjudicated(self, person):
        a = _fact(person, "他现在住在成都", slot="居住地", kind="事件", at=0)
        b = _fact(person, "他现在住在杭州", slot="居住地", kind="偏好", at=NOW)
        services.sweep(at=NOW)
        with pytest.raises(curation.FactStateError):
            curation.adjudicate(keep_fact_id=b, drop_fact_id=a, at=NOW)


class TestKeepOnly:
    def test_drops_every_other_member_each_undoable(self, person):
        a = _fact(person, "他现在住在成都", slot="居住地")
        b = _fact(person, "他现在住在杭州", slot="居住地")
        c = _fact(person, "他现在住在深圳", slot="居住地")
        other_slot = _fact(person, "他是程序员", slot="职业")
        ops = curation.keep_only(keep_fact_id=b, expected_drop_ids=[c, a], user="alice", at=NOW + 1)
        assert [(o.op, o.fact_id, o.related_fact_id, o.user) for o in ops] == [
            ("adjudicate", a, b, "alice"), ("adjudicate", c, b, "alice"),
        ]
        assert selectors.conflict_groups(now=NOW) == []
        assert [Fact.objects.get(pk=i).superseded_by_id for i in (a, b, c, other_slot)] == [a, None, c, None]
        assert [e["dropFactId"] for e in events("memory_conflict_resolved")] == [a, c]
        curation.undo_operation(operation_id=ops[1].pk, at=NOW + 2)
        assert [m["id"] for m in selectors.conflict_groups(now=NOW)[0].members] == [b, c]

    def test_all_or_nothing_when_a_drop_is_refused(self, person, monkeypatch):
        a = _fact(person, "他现在住在成都", slot="居住地")
        b = _fact(person, "他现在住在杭州", slot="居住地")
        c = _fact(person, "他现在住在深圳", slot="居住地")
        adjudicate = curation.adjudicate

        def second_refused(**kwargs):
            if kwargs["drop_fact_id"] == c:
                raise curation.FactStateError("another operator was faster")
            return adjudicate(**kwargs)

        monkeypatch.setattr(curation, "adjudicate", second_refused)
        with pytest.raises(curation.FactStateError, match="faster"):
            curation.keep_only(keep_fact_id=b, at=NOW + 1)
        assert Fact.objects.get(pk=a).superseded_by_id is None  # the first drop was rolled back
        assert FactOperation.objects.count() == 0 and events("memory_conflict_resolved") == []
        assert [m["id"] for m in selectors.conflict_groups(now=NOW)[0].members] == [a, b, c]

    def test_refuses_when_the_group_changed_since_confirmation(self, person):
        a = _fact(person, "他现在住在成都", slot="居住地")
        b = _fact(person, "他现在住在杭州", slot="居住地")
        c = _fact(person, "他现在住在深圳", slot="居住地")  # arrived after the operator looked
        with pytest.raises(curation.FactStateError, match="变化"):
            curation.keep_only(keep_fact_id=b, expected_drop_ids=[a], at=NOW + 1)
        assert FactOperation.objects.count() == 0
        assert [Fact.objects.get(pk=i).superseded_by_id for i in (a, b, c)] == [None, None, None]

    def test_refuses_outside_a_conflict_group(self, person):
        alone = _fact(person, "他是程序员", slot="职业")
        no_slot = _fact(person, "他喜欢猫")
        a = _fact(person, "他现在住在成都", slot="居住地")
        b = _fact(person, "他现在住在杭州", slot="居住地")
        curation.invalidate_fact(fact_id=a, at=NOW)
        for fid in (alone, no_slot, a, b):
            with pytest.raises(curation.NotInConflictGroupError, match=f"#{fid}"):
                curation.keep_only(keep_fact_id=fid, at=NOW + 1)
        with pytest.raises(curation.FactNotFoundError):
            curation.keep_only(keep_fact_id=99999, at=NOW + 1)
        assert FactOperation.objects.filter(op="adjudicate").count() == 0



class TestKeepAll:
    def test_every_member_stays_valid_and_leaves_the_slot_each_undoable(self, person):
        a = _fact(person, "他住在成都", slot="居住地")
        b = _fact(person, "他住在杭州", slot="居住地")
        ops = curation.keep_all(fact_id=b, expected_member_ids=[a, b], user="alice", at=NOW + 1)
        assert [(o.op, o.fact_id, o.prev["slot"]) for o in ops] == [("adjudicate", a, "居住地"), ("adjudicate", b, "居住地")]
        assert selectors.conflict_groups(now=NOW) == []
        assert [(f.state, f.slot) for f in Fact.objects.filter(pk__in=[a, b]).order_by("id")] == [("active", "")] * 2
        assert events("memory_conflict_kept_all")[0]["factIds"] == [a, b]
        for op in ops:
            curation.undo_operation(operation_id=op.pk, at=NOW + 2)
        assert [m["id"] for m in selectors.conflict_groups(now=NOW)[0].members] == [a, b]  # the group is back

    def test_refuses_a_changed_group_or_a_fact_outside_one(self, person):
        a = _fact(person, "他住在成都", slot="居住地")
        b = _fact(person, "他住在杭州", slot="居住地")
        with pytest.raises(curation.FactStateError, match="变化"):
            curation.keep_all(fact_id=a, expected_member_ids=[a], at=NOW + 1)
        with pytest.raises(curation.NotInConflictGroupError):
            curation.keep_all(fact_id=_fact(person, "他喜欢猫"), at=NOW + 1)
        assert FactOperation.objects.count() == 0 and Fact.objects.get(pk=b).slot == "居住地"


class TestReplace:
    def test_guards(self, person):
        fid = _fact(person, "他现在住在杭州", slot="居住地")
        before = Fact.objects.values().get(pk=fid)
        for text in ("", "   ", "他现在住在杭州", "他现在住在杭州。"):
            with pytest.raises(ValueError):
                curation.replace_fact(fact_id=fid, content=text, at=NOW)
        assert Fact.objects.values().get(pk=fid) == before
        with pytest.raises(curation.FactNotFoundError):
            curation.replace_fact(fact_id=99999, content="x", at=NOW)
        curation.invalidate_fact(fact_id=fid, at=NOW)
        with pytest.raises(curation.FactStateError):
            curation.replace_fact(fact_id=fid, content="他现在住在深圳", at=NOW)

    def test_replace_by_the_text_of_an_invalidated_row(self, person):
        chengdu = _fact(person, "他现在住在成都", slot="居住地")
        hangzhou = _fact(person, "他现在住在杭州", slot="居住地")
        curation.invalidate_fact(fact_id=chengdu, at=NOW + 1)
        with pytest.raises(curation.FactStateError, match="恢复"):
            curation.replace_fact(fact_id=hangzhou, content="他现在住在成都", at=NOW + 2)
        assert Fact.objects.get(pk=hangzhou).superseded_by_id is None
        assert Fact.objects.get(pk=chengdu).superseded_by_id == chengdu  # not revived behind the user's back
        curation.restore_fact(fact_id=chengdu, at=NOW + 3)
        write = curation.replace_fact(fact_id=hangzhou, content="他现在住在成都", at=NOW + 4)
        assert write.fact_id == chengdu and write.created is False
        assert Fact.objects.get(pk=hangzhou).superseded_by_id == chengdu
        op = FactOperation.objects.get(pk=write.operation_id)
        assert op.prev == {"superseded_by": None, "new_row_created": False}
        assert events("memory_fact_replaced")[0] == {
            "factId": hangzhou, "newFactId": chengdu, "personId": person.pk, "operationId": op.pk,
        }


def test_manual_and_automatic_operations_are_distinguishable(person):
    old = _fact(person, "他在星野公司上班")
    manual = curation.invalidate_fact(fact_id=old, at=NOW + 1)
    curation.restore_fact(fact_id=old, at=NOW + 2)
    write = services.add_fact(person_id=person.pk, content="他现在在云岚公司上班", supersedes=old, actor="auto",
                              at=NOW + 3)
    auto_op = FactOperation.objects.get(pk=write.operation_id)
    assert (auto_op.actor, auto_op.op, auto_op.related_fact_id, auto_op.fact.content) == ("auto", "supersede", write.fact_id, "他在星野公司上班")
    assert manual.actor == "manual"
    log = list(journal.operations(fact_id=old))
    assert [o.op for o in log] == ["supersede", "restore", "invalidate"]
    assert [o.pk for o in journal.operations(actor="auto")] == [auto_op.pk]
    undo = curation.undo_operation(operation_id=auto_op.pk, at=NOW + 4)
    assert Fact.objects.get(pk=old).superseded_by_id is None
    assert Fact.objects.get(pk=write.fact_id).superseded_by_id == write.fact_id
    assert undo.prev["related_fact_invalidated"] == write.fact_id


def test_failed_operation_writes_no_journal_row(person):
    fid = _fact(person, "他现在住在杭州")
    with pytest.raises(curation.FactStateError):
        curation.restore_fact(fact_id=fid, at=NOW)
    assert FactOperation.objects.count() == 0
    assert events("memory_fact_restored") == []
