"""The TurnStore contract (memory/recall/turn_store.py): each store on the same inputs writes the
same rows — the ORM's on either backend, PostgreSQL's one-statement store on PostgreSQL, where
both run and their writes are compared."""
from __future__ import annotations

import pytest
from django.db import connection, transaction

from memory import selectors, services
from memory.engine import decay
from memory.models import Fact, Message, PipelineEvent, Turn
from memory.recall.turn_store import LineVector, OrmTurnStore, PostgreSQLTurnStore, turn_store
from memory.search import read_ahead

from .conftest import NOW, make_person

pytestmark = pytest.mark.django_db

H = 3_600_000
STORES = {"orm": OrmTurnStore, "postgresql": PostgreSQLTurnStore}


@pytest.fixture
def world(person, direct_stream):
    other = make_person("u9", "远方")
    a = services.add_fact(person_id=person.pk, content="他喜欢打篮球", kind="偏好", at=NOW - 24 * H).fact_id
    b = services.add_fact(person_id=person.pk, content="他养了一只猫", kind="事件", at=NOW - 48 * H).fact_id
    moved = services.add_fact(person_id=other.pk, content="她住在杭州", kind="身份", at=NOW).fact_id
    return {"person": person, "stream": direct_stream, "facts": [a, b], "moved": moved}


def _ranked(world, at):
    """The confirm's prompt: two of the person's facts, and one recorded under the wrong person
    (moved meanwhile: never reinforced)."""
    rows = Fact.objects.in_bulk([*world["facts"], world["moved"]])
    facts = [
        selectors.ScopedFact(
            id=f.pk, person_id=world["person"].pk, kind=f.kind, content=f.content, slot=f.slot,
            origin_kind=f.origin_kind, retention=f.retention_at(at), score=0.5, lexical_relevance=0.5, bm25=-1.0,
            half_life_hours=f.half_life_hours, active=f.active,
        )
        for f in rows.values()
    ]
    return sorted(facts, key=lambda f: [*world["facts"], world["moved"]].index(f.id))


def _write(store, world) -> dict:
    """One turn recorded and confirmed (twice) by ``store``; everything it wrote, ids left out."""
    stream, person = world["stream"], world["person"]
    values = {
        "stream_id": stream.pk, "speaker_id": person.pk, "at": NOW, "text": "他周末打球吗", "impression": "",
        "watermark_message_id": None, "stream_kind": "direct", "present_person_ids": [person.pk],
        "pool": [{"factId": world["facts"][0], "score": 0.5}], "prompt_fact_ids": [], "context_message_ids": [],
        "episode_ids": [], "profile": {"name": "default", "params": {}}, "visibility_blocked": 2,
    }
    event = {"at": NOW, "stream_id": stream.pk, "stage": "turn", "kind": "memory_retrieval_trace",
             "payload": {"streamId": stream.pk, "currentText": "他周末打球吗", "candidateCount": 1}}
    others = [{"at": NOW, "stream_id": None, "stage": "", "kind": "memory_fact_scope_blocked",
               "payload": {"streamKind": "direct", "blocked": 2}}]
    also = read_ahead.Read(("facts_of", person.pk), "SELECT id FROM facts WHERE person_id = %s ORDER BY id",
                           [person.pk], lambda rows: [r[0] for r in rows])
    # the turn's line (no vector yet), a line that says something else, a line embedded already
    line, other, embedded = (services.append_message(stream_id=stream.pk, role="user", content=text,
                                                     sender_person_id=person.pk, at=NOW - 3)[0].pk
                             for text in ("他周末打球吗", "他周末打球吗？", "他周末打球吗"))
    services.store_message_vector(message_id=embedded, vector=[0.0, 1.0, 0.0])
    given, later = services.vector_pair([1.0, 2.0, 3.0]), services.vector_pair([3.0, 2.0, 1.0])
    first_event = PipelineEvent.objects.order_by("-seq").values_list("seq", flat=True).first() or 0

    turn_id, also_rows = store.record(values, event, others, also)
    at = NOW + H
    ranked = _ranked(world, at)
    confirmed = {"stream_id": stream.pk, "stage": "turn", "kind": "memory_retrieval_confirmed",
                 "payload": {"turnId": turn_id, "promptFactIds": [f.id for f in ranked]}}
    counted = read_ahead.Read(("hits_of", person.pk), "SELECT id, hit_count FROM facts WHERE person_id = %s ORDER BY id",
                              [person.pk], lambda rows: [tuple(r) for r in rows])
    reinforced, confirm_also = store.confirm(turn_id, at=at, ranked=ranked, held_back_ids=[world["facts"][1]],
                                             event=confirmed, line=LineVector(line, "他周末打球吗", *given), also=counted)
    again, _ = store.confirm(turn_id, at=at + 1, ranked=ranked, held_back_ids=[], event=confirmed,
                             line=LineVector(line, "他周末打球吗", *later))
    line_vector = Message.objects.filter(pk=line).values_list("embedding", "embedding_q8").get()

    turn = Turn.objects.filter(pk=turn_id).values().get()
    turn.pop("id")
    events = [
        {**e, "turn_id": "T" if e["turn_id"] == turn_id else e["turn_id"],
         "payload": {k: ("T" if k == "turnId" and v == turn_id else v) for k, v in e["payload"].items()}}
        for e in PipelineEvent.objects.filter(seq__gt=first_event).order_by("seq").values(
            "at", "stream_id", "turn_id", "stage", "kind", "payload")
    ]
    events.sort(key=lambda e: (e["at"], e["kind"]))  # the order within one write is not the contract's
    facts = list(Fact.objects.filter(pk__in=[*world["facts"], world["moved"]]).order_by("id").values(
        "id", "strength", "updated_at", "due_at", "active", "hit_count", "last_hit_at"))
    others_kept = []
    for message_id in (other, embedded):  # another turn's claim: the message says something else / has one
        tid, _ = store.record({**values, "pool": []}, event)
        store.confirm(tid, at=at, ranked=[], held_back_ids=[], event=confirmed, line=LineVector(message_id, "他周末打球吗", *later))
        others_kept.append(Message.objects.filter(pk=message_id).values_list("embedding", "embedding_q8").get())
    return {"also": also_rows, "confirm_also": confirm_also, "reinforced": reinforced, "again": again, "turn": turn, "events": events,
            "facts": facts, "line_vector": tuple(bytes(v) for v in line_vector), "given": given,
            "others_kept": [tuple(None if v is None else bytes(v) for v in kept) for kept in others_kept]}


def _in_savepoint(write):
    """``write()``'s result, its writes rolled back (ids drawn from sequences are not reused: left out)."""
    sid = transaction.savepoint()
    try:
        return write()
    finally:
        transaction.savepoint_rollback(sid)


@pytest.mark.parametrize("name", list(STORES))
def test_a_store_keeps_the_contract(name, world):
    if name == "postgresql" and connection.vendor != "postgresql":
        pytest.skip("the one-statement store needs PostgreSQL (DATABASE_URL)")
    before = {f.id: f for f in _ranked(world, NOW + H)}  # what the confirm ranks them with
    out = _write(STORES[name](), world)
    a, b = world["facts"]
    stream = world["stream"]
    assert out["also"] == sorted([a, b])  # the read made with the write
    assert out["confirm_also"] == [(a, 1), (b, 1)]  # read with the confirm's write, after it
    assert out["reinforced"] == [a, b]  # the moved fact is not the person's any more: not reinforced
    assert out["again"] is None  # confirmed already: nothing written
    turn = out["turn"]
    assert turn["confirmed_at"] == NOW + H and turn["prompt_fact_ids"] == [a, b, world["moved"]]
    assert turn["reinforced_fact_ids"] == [a, b] and turn["held_back_fact_ids"] == [b]
    assert turn["visibility_blocked"] == 2 and turn["profile"] == {"name": "default", "params": {}}
    assert turn["stream_id"] == stream.pk and turn["text"] == "他周末打球吗"
    blocked, trace, confirmed = out["events"]  # by time, then kind
    assert blocked == {"at": NOW, "stream_id": None, "turn_id": None, "stage": "", "kind": "memory_fact_scope_blocked",
                       "payload": {"streamKind": "direct", "blocked": 2}}
    assert trace["turn_id"] == "T" and list(trace["payload"]) == ["turnId", "streamId", "currentText", "candidateCount"]
    assert trace["payload"]["turnId"] == "T" and trace["stage"] == "turn" and trace["stream_id"] == stream.pk
    assert confirmed["kind"] == "memory_retrieval_confirmed" and confirmed["turn_id"] == "T" and confirmed["at"] == NOW + H
    facts = {f["id"]: f for f in out["facts"]}
    for fid in (a, b):
        ranked = before[fid]
        strength = decay.reinforce(ranked.retention)
        assert facts[fid]["strength"] == pytest.approx(strength, abs=1e-12)
        assert facts[fid]["due_at"] == decay.freeze_due_at(strength, NOW + H, ranked.half_life_hours)
        assert (facts[fid]["updated_at"], facts[fid]["last_hit_at"], facts[fid]["active"]) == (NOW + H, NOW + H, True)
        assert facts[fid]["hit_count"] == 1
    assert facts[world["moved"]]["hit_count"] == 0
    # the turn's vector went onto its line with the claim; the second confirm's did not
    assert out["line_vector"] == out["given"]
    assert out["others_kept"] == [(None, None), services.vector_pair([0.0, 1.0, 0.0])]


@pytest.mark.postgresql_only("both stores run only on PostgreSQL")
def test_both_stores_write_the_same_on_the_same_inputs(world):
    orm = _in_savepoint(lambda: _write(OrmTurnStore(), world))
    one_statement = _in_savepoint(lambda: _write(PostgreSQLTurnStore(), world))
    assert orm == one_statement
    assert isinstance(turn_store(), PostgreSQLTurnStore)


def test_the_backend_chooses_its_store():
    assert isinstance(turn_store(), PostgreSQLTurnStore if connection.vendor == "postgresql" else OrmTurnStore)
