"""Fact extraction queue (docs/REFERENCE.md §14)."""
from __future__ import annotations

import pytest

from memory import meta, pipeline, selectors, services
from memory.dispatch import triggers
from memory.engine.extraction import Extraction
from memory.models import Fact, Knowledge, MemoryEdge, PipelineEvent, QueueFailure
from memory.providers.heuristic import HeuristicExtractor
from memory.search import lexical
from tests.workers.conftest import (
    T0,
    ScriptedExtractor,
    fact,
    make_person,
    make_stream,
    post_messages,
)

pytestmark = pytest.mark.django_db


def events(kind: str) -> list[dict]:
    return list(PipelineEvent.objects.filter(kind=kind).order_by("seq").values_list("payload", flat=True))


def test_cursors_are_per_stream():
    assert triggers.read_cursor(1) == 0
    pipeline.advance_cursor(1, 42)
    assert meta.meta_get("fact_extract_cursor") == {"1": 42}
    assert triggers.read_cursor(2) == 0


def test_the_cursor_map_is_parsed_once_per_stored_text(monkeypatch):
    pipeline.advance_cursor(1, 42)
    parsed = []
    real_loads = triggers.json.loads
    monkeypatch.setattr(triggers.json, "loads", lambda text: parsed.append(text) or real_loads(text))
    assert [triggers.read_cursor(1) for _ in range(3)] == [42, 42, 42] and triggers.due_queues(1) == []
    assert len(parsed) <= 1  # a process that parsed this text before parses it no more
    mine = triggers.cursor_map()
    mine["1"] = 7  # a copy: the shared map is not changed behind the stored text
    assert triggers.read_cursor(1) == 42
    pipeline.advance_cursor(1, 50)
    assert triggers.read_cursor(1) == 50 and parsed[-1] == '{"1": 50}'


def test_a_non_integer_cursor_reads_as_zero():
    meta.meta_set("fact_extract_cursor", {"1": "42", "2": True})
    assert triggers.read_cursor(1) == 0 and triggers.read_cursor(2) == 0


def test_below_the_trigger_the_model_is_not_called(settings):
    settings.FACT_EXTRACT_TRIGGER_MESSAGES = 8
    stream = make_stream()
    post_messages(stream, 3)
    extractor = ScriptedExtractor()

    assert pipeline.extract_stream(stream_id=stream.pk, extractor=extractor).status == "idle"
    assert extractor.calls == []


def test_a_valid_extraction_writes_facts_knowledge_edges_and_moves_the_cursor(settings):
    settings.FACT_EXTRACT_TRIGGER_MESSAGES = 8
    settings.FACT_EXTRACT_BATCH_MESSAGES = 4
    stream = make_stream(kind="group")
    alice = make_person("900000001", "小红")
    ids = post_messages(stream, 10, speakers=[alice])
    extractor = ScriptedExtractor(Extraction(facts=[fact("900000001", "小红住在杭州", "居住", "居住地")],
                                             knowledge=["月球没有全球性磁场"]))

    outcome = pipeline.extract_stream(stream_id=stream.pk, extractor=extractor, at=T0 + 5)

    assert outcome.status == "written"
    written = Fact.objects.get()
    assert (written.person_id, written.content, written.origin_kind) == (alice.pk, "小红住在杭州", "group")
    assert written.source == f"extract:stream{stream.pk}"
    item = Knowledge.objects.get()
    assert item.source == "fact_extract"
    assert [h.id for h in selectors.search_knowledge(query="月球磁场")] == [item.pk]
    assert triggers.read_cursor(stream.pk) == ids[3]
    assert MemoryEdge.objects.count() == 1 and outcome.edges == 1
    assert events("memory_extract") == [{"streamId": stream.pk, "messageCount": 4, "extracted": 1, "written": 1,
                                         "knowledge": 1, "edges": 1}]
    assert events("memory_fact")[0]["factId"] == written.pk
    assert events("knowledge_learned") == [{"count": 1, "source": "fact_extract"}]
    # Participants are the batch's own senders, referred to by their external id.
    assert [(p.external_id, p.name) for p in extractor.calls[0]["participants"]] == [("900000001", "小红")]


def test_direct_streams_write_direct_origin_facts():
    stream = make_stream("d1", kind="direct")
    alice = make_person("a1", "小红")
    post_messages(stream, 32, speakers=[alice])
    pipeline.extract_stream(stream_id=stream.pk, extractor=ScriptedExtractor(Extraction(facts=[fact("a1", "小红怕冷")])))
    assert Fact.objects.get().origin_kind == "direct"


@pytest.mark.parametrize("result", [None, RuntimeError("boom")], ids=["malformed", "raises"])
def test_a_failed_extraction_keeps_the_cursor(result):
    stream = make_stream()
    post_messages(stream, 32)

    outcome = pipeline.extract_stream(stream_id=stream.pk, extractor=ScriptedExtractor(result or (lambda *a: None)))

    assert outcome.status == "failed"
    assert triggers.read_cursor(stream.pk) == 0
    assert not Fact.objects.exists()
    assert events("memory_extract_failed")[0]["cursor"] == 0


def test_the_third_failure_skips_the_batch():
    stream = make_stream()
    ids = post_messages(stream, 40)
    failing = ScriptedExtractor(lambda *a: None)

    cursors = []
    for _ in range(3):
        pipeline.extract_stream(stream_id=stream.pk, extractor=failing)
        cursors.append(triggers.read_cursor(stream.pk))

    assert cursors == [0, 0, ids[11]]
    assert len(events("memory_extract_failed")) == 3
    assert events("fact_extract_batch_skipped")[0]["cursor"] == ids[11]
    assert not QueueFailure.objects.exists()


def test_a_rerun_of_the_same_extraction_does_not_duplicate(settings):
    settings.FACT_EXTRACT_TRIGGER_MESSAGES = 12
    stream = make_stream()
    alice = make_person("a1", "小红")
    post_messages(stream, 24, speakers=[alice])
    extractor = ScriptedExtractor(Extraction(facts=[fact("a1", "小红喜欢喝冰美式", "喜好")], knowledge=["咖啡因会提神"]))

    first = pipeline.extract_stream(stream_id=stream.pk, extractor=extractor)
    second = pipeline.extract_stream(stream_id=stream.pk, extractor=extractor)
    third = pipeline.extract_stream(stream_id=stream.pk, extractor=extractor)

    assert (first.status, second.status, third.status) == ("written", "written", "idle")
    assert first.fact_ids == second.fact_ids and first.knowledge_ids == second.knowledge_ids
    assert Fact.objects.count() == 1 and Knowledge.objects.count() == 1


def test_an_unknown_person_ref_is_dropped():
    stream = make_stream()
    post_messages(stream, 32, speakers=[make_person("a1", "小红")])

    outcome = pipeline.extract_stream(stream_id=stream.pk, extractor=ScriptedExtractor(
        Extraction(facts=[fact("nobody", "某人住在北京")])))

    assert outcome.status == "written" and not Fact.objects.exists()
    assert events("memory_fact_dropped") == [{"reason": "unknown_person", "personRef": "nobody"}]


def test_supersedes_replaces_the_old_fact_end_to_end():
    stream = make_stream()
    alice = make_person("a1", "小红")
    old = services.add_fact(person_id=alice.pk, content="小红住在杭州", kind="居住", slot="居住地", at=T0).fact_id
    post_messages(stream, 32, speakers=[alice])
    extractor = ScriptedExtractor(Extraction(facts=[fact("a1", "小红搬到了上海", "居住", "居住地", supersedes=old)]))

    outcome = pipeline.extract_stream(stream_id=stream.pk, extractor=extractor, at=T0 + 10)

    new = outcome.fact_ids[0]
    assert Fact.objects.get(pk=old).superseded_by_id == new
    assert [f.id for f in selectors.top_facts(person_id=alice.pk, now=T0 + 10, stream_kind="all")] == [new]
    assert events("memory_fact_superseded") == [{"factId": new, "supersededId": old, "personId": alice.pk}]
    assert [k.id for k in extractor.calls[0]["known"]] == [old]


def test_a_refused_supersede_is_reported():
    stream = make_stream()
    alice, bob = make_person("a1", "小红"), make_person("b1", "小刚")
    others = services.add_fact(person_id=bob.pk, content="小刚住在杭州", at=T0).fact_id
    post_messages(stream, 32, speakers=[alice])
    extractor = ScriptedExtractor(Extraction(facts=[fact("a1", "小红住在上海", supersedes=others)]))

    pipeline.extract_stream(stream_id=stream.pk, extractor=extractor)

    assert Fact.objects.get(pk=others).superseded_by_id is None
    assert events("memory_fact_supersede_dropped")[0]["reason"] == "target_not_writable"


def test_a_slot_conflict_is_reported():
    stream = make_stream()
    alice = make_person("a1", "小红")
    old = services.add_fact(person_id=alice.pk, content="小红住在杭州", kind="居住", slot="居住地", at=T0).fact_id
    post_messages(stream, 32, speakers=[alice])

    outcome = pipeline.extract_stream(stream_id=stream.pk, extractor=ScriptedExtractor(
        Extraction(facts=[fact("a1", "小红住在南京", "居住", "居住地")])))

    assert events("memory_fact_conflict") == [
        {"factId": outcome.fact_ids[0], "slot": "居住地", "conflictWith": [old], "personId": alice.pk}
    ]


def test_known_facts_are_capped_per_person_and_in_total_and_include_private_ones(settings):
    settings.FACT_EXTRACT_TRIGGER_MESSAGES = 20
    settings.FACT_EXTRACT_BATCH_MESSAGES = 20
    stream = make_stream(kind="group")
    speakers = [make_person(f"u{i}", f"人{i}") for i in range(14)]
    topics = ["喜欢爬山", "养了一只猫", "会弹钢琴", "在学日语", "对花生过敏", "住在杭州", "是产品经理",
              "生日在三月", "不吃香菜", "有个弟弟"]
    for person in speakers:
        for topic in topics:
            services.add_fact(person_id=person.pk, content=f"{person.display_name}{topic}", origin_kind="direct", at=T0)
    post_messages(stream, 20, speakers=speakers, assistant_every=0)
    extractor = ScriptedExtractor()

    pipeline.extract_stream(stream_id=stream.pk, extractor=extractor, at=T0 + 1)

    call = extractor.calls[0]
    assert len(call["participants"]) == 12
    assert len(call["known"]) == 30
    per_person = {}
    for known in call["known"]:
        per_person[known.person_ref] = per_person.get(known.person_ref, 0) + 1
    assert max(per_person.values()) == 6 and list(per_person) == ["u0", "u1", "u2", "u3", "u4"]


def test_a_batch_without_participants_is_passed_without_a_model_call():
    stream = make_stream()
    for i in range(32):
        services.append_message(stream_id=stream.pk, role="assistant", content=f"自言自语第{i}句", at=T0 + i)
    extractor = ScriptedExtractor()

    outcome = pipeline.extract_stream(stream_id=stream.pk, extractor=extractor)

    assert outcome.status == "no_participants" and extractor.calls == []
    assert triggers.read_cursor(stream.pk) > 0


def test_the_heuristic_extractor_finds_first_person_facts():
    stream = make_stream("d1", kind="direct")
    ming = make_person("u1", "小明")
    post_messages(stream, 32, speakers=[ming])

    outcome = pipeline.extract_stream(stream_id=stream.pk, extractor=HeuristicExtractor())

    contents = list(Fact.objects.filter(person=ming).values_list("content", flat=True))
    assert outcome.status == "written" and any("杭州" in c for c in contents)
    assert MemoryEdge.objects.count() >= 1
    assert lexical.match_for("facts_fts", "杭州")


def test_new_facts_are_embedded_after_commit(settings, redis_db, burst, django_capture_on_commit_callbacks):
    settings.MEMORY_ENQUEUE_TASKS = True
    stream = make_stream()
    post_messages(stream, 32, speakers=[make_person("a1", "小红")])

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        pipeline.extract_stream(stream_id=stream.pk, extractor=ScriptedExtractor(
            Extraction(facts=[fact("a1", "小红会弹钢琴")])))

    assert len(callbacks) == 1
    assert burst.names() == ["vectors_backfill_task"]


def test_nothing_is_enqueued_when_nothing_was_written(settings, burst, django_capture_on_commit_callbacks):
    settings.MEMORY_ENQUEUE_TASKS = True
    stream = make_stream()
    post_messages(stream, 32)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        pipeline.extract_stream(stream_id=stream.pk, extractor=ScriptedExtractor())
    assert callbacks == [] and burst.calls == []
