"""Forgetting on request (memory/privacy/forget.py): the preview lists exactly what goes; one transaction removes it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from curation import services as curation
from memory import services
from memory.models import (
    Episode,
    EpisodeCue,
    Fact,
    FactOperation,
    ForgetRecord,
    MemoryEdge,
    MemoryNode,
    Message,
    PipelineEvent,
    Stream,
)
from memory.privacy import forget
from tests import lexical_probe
from tests.memory.conftest import NOW


def _docs(table: str, term: str) -> int:
    return lexical_probe.docs(table, term)


def _msg(stream, content, sender=None, role="user"):
    return services.append_message(stream_id=stream.pk, role=role, content=content, sender_person_id=sender, at=NOW)[0]


def test_forgetting_a_fact_removes_its_index_row_journal_graph_and_events(person):
    kept = services.add_fact(person_id=person.pk, content="喜欢喝乌龙茶", kind="偏好", at=NOW).fact_id
    gone = services.add_fact(person_id=person.pk, content="车牌号是浙A九九八八七", kind="身份", at=NOW).fact_id
    services.store_fact_vector(fact_id=gone, vector=np.ones(8, dtype=np.float32) / np.sqrt(8))
    services.link_together(refs=[("fact", kept), ("fact", gone)], at=NOW)
    curation.pin_fact(fact_id=gone, user="op", at=NOW)
    services.emit_event("memory_fact", {"factId": gone, "content": "车牌号是浙A九九八八七"}, at=NOW)
    assert _docs("facts_fts", "车牌") == 1

    plan = forget.plan_forget(target="fact", target_id=gone)
    assert plan.facts == [gone] and plan.vectors == 1 and plan.fts_rows == 1
    assert len(plan.nodes) == 1 and len(plan.edges) == 1 and len(plan.operations) == 1
    assert len(plan.events) == PipelineEvent.objects.count() == 2  # the pin's event and the extraction's

    done, record = forget.forget(target="fact", target_id=gone, user="op", expected_digest=plan.digest())
    assert done.counts() == plan.counts() == record.counts
    assert not Fact.objects.filter(pk=gone).exists() and Fact.objects.filter(pk=kept).exists()
    assert _docs("facts_fts", "车牌") == 0 and _docs("facts_fts", "乌龙茶") == 1
    assert not FactOperation.objects.filter(fact_id=gone).exists()
    assert MemoryNode.objects.count() == 1 and not MemoryEdge.objects.exists()
    assert not PipelineEvent.objects.exists()
    stored = ForgetRecord.objects.get()
    assert (stored.user, stored.target, stored.target_id) == ("op", "fact", gone)
    assert "车牌" not in json.dumps(stored.counts, ensure_ascii=False)


def test_forgetting_a_message_redacts_its_episode_and_removes_what_was_extracted(person, other_person, group_stream):
    secret = _msg(group_stream, "我住在杭州西湖边的梧桐小院", person.pk)
    other = _msg(group_stream, "周末一起去爬山吧", other_person.pk)
    reply = _msg(group_stream, "好的，记住了：我住在杭州西湖边的梧桐小院", role="assistant")
    episode = services.add_episode(
        stream_id=group_stream.pk, summary="凌白说我住在杭州西湖边的梧桐小院；大家约爬山", cues=["梧桐小院", "爬山"],
        started_at=NOW, ended_at=NOW, message_ids=[secret.pk, other.pk, reply.pk], at=NOW,
    )
    extracted = services.add_fact(person_id=person.pk, content="住在杭州西湖边", kind="身份", at=NOW).fact_id
    unrelated = services.add_fact(person_id=other_person.pk, content="住在杭州", kind="身份", at=NOW).fact_id

    plan = forget.plan_forget(target="message", target_id=secret.pk)
    assert plan.messages == [secret.pk] and plan.facts == [extracted]
    assert plan.redacted_messages == [reply.pk] and plan.redacted_episodes == [episode.pk] and plan.episodes == []
    assert len(plan.cues) == 2

    forget.forget(target="message", target_id=secret.pk, user="op")
    assert not Message.objects.filter(pk=secret.pk).exists()
    assert Message.objects.get(pk=reply.pk).content == f"好的，记住了：{forget.REDACTED}"
    redacted = Episode.objects.get(pk=episode.pk)
    assert redacted.summary == forget.REDACTED_SUMMARY and redacted.is_placeholder
    assert not EpisodeCue.objects.exists() and _docs("cues_fts", "梧桐") == 0
    assert Message.objects.get(pk=other.pk).episode_id == episode.pk  # the rest stays archived in it
    assert _docs("messages_fts", "梧桐") == 0 and _docs("messages_fts", "爬山") == 1
    assert list(Fact.objects.values_list("id", flat=True)) == [unrelated]


def test_a_cascade_that_changed_since_the_preview_is_refused(person, group_stream):
    secret = _msg(group_stream, "我的银行卡密码是七七八八", person.pk)
    plan = forget.plan_forget(target="message", target_id=secret.pk)
    _msg(group_stream, "有人说：我的银行卡密码是七七八八", role="assistant")
    with pytest.raises(forget.ForgetPlanChanged):
        forget.forget(target="message", target_id=secret.pk, user="op", expected_digest=plan.digest())
    assert Message.objects.filter(pk=secret.pk).exists() and not ForgetRecord.objects.exists()


def test_a_fact_superseded_by_a_forgotten_one_stays_invalid(person):
    old = services.add_fact(person_id=person.pk, content="住在上海", kind="身份", slot="住址", at=NOW).fact_id
    new = services.add_fact(person_id=person.pk, content="搬到了苏州园区", kind="身份", slot="住址", supersedes=old,
                            at=NOW).fact_id
    plan = forget.plan_forget(target="fact", target_id=new)
    assert plan.invalidated_facts == [old]
    forget.forget(target="fact", target_id=new, user="op")
    assert Fact.objects.get(pk=old).superseded_by_id == old  # invalidated, not revived


def test_forgetting_a_stream_removes_its_messages_episodes_and_extracted_facts(person, group_stream, direct_stream):
    first = _msg(group_stream, "群里的悄悄话一号", person.pk)
    _msg(direct_stream, "私聊里的另一件事", person.pk)
    services.add_episode(stream_id=group_stream.pk, summary="悄悄话", cues=["悄悄话"], started_at=NOW, ended_at=NOW,
                         message_ids=[first.pk], at=NOW)
    heard = services.add_fact(person_id=person.pk, content="会说悄悄话", source=f"extract:stream{group_stream.pk}",
                              at=NOW).fact_id
    plan = forget.plan_forget(target="stream", target_id=group_stream.pk)
    assert plan.facts == [heard] and plan.streams == [group_stream.pk] and len(plan.episodes) == 1
    forget.forget(target="stream", target_id=group_stream.pk, user="op")
    assert not Stream.objects.filter(pk=group_stream.pk).exists()
    assert list(Message.objects.values_list("content", flat=True)) == ["私聊里的另一件事"]
    assert not Fact.objects.exists() and not Episode.objects.exists()


def test_an_unknown_target_is_reported(db):
    with pytest.raises(forget.ForgetTargetNotFound):
        forget.plan_forget(target="person", target_id=99999)
    with pytest.raises(ValueError):
        forget.plan_forget(target="everything", target_id=1)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_resident_indexes_see_the_forgetting(settings):
    """Outside a transaction the resident BM25, knowledge vectors and node texts answer: they must reload."""
    from memory import selectors
    from memory.search import lexical_index
    from memory.search.vector_index import knowledge_index
    from memory.selectors import graph as graph_selectors

    settings.LEXICAL_RESIDENT_INDEX = True
    lexical_index.reset_all()
    graph_selectors._node_texts.reset()
    alice = services.resolve_person(platform="qq", external_id="res-a", name="A", at=NOW)
    group = services.resolve_stream(platform="qq", kind="group", external_id="res-g", name="g")
    said = _msg(group, "我最喜欢的乐队是银河漫游者乐团", alice.pk)
    reply = _msg(group, "记下了：我最喜欢的乐队是银河漫游者乐团", role="assistant")
    episode = services.add_episode(stream_id=group.pk, summary="聊到银河漫游者乐团", cues=["乐队"], started_at=NOW,
                                   ended_at=NOW, message_ids=[said.pk, reply.pk], at=NOW)
    fact = services.add_fact(person_id=alice.pk, content="喜欢银河漫游者乐团", kind="偏好", at=NOW).fact_id
    kid = services.add_knowledge(content="我最喜欢的乐队是银河漫游者乐团", source="import", at=NOW)
    services.store_knowledge_vector(knowledge_id=kid, vector=np.ones(8, dtype=np.float32) / np.sqrt(8))
    services.link_together(refs=[("fact", fact), ("episode", episode.pk), ("knowledge", kid)], at=NOW)

    def facts():
        return [f.id for f in selectors.recall_facts_across_persons(query="银河漫游者", now=NOW, stream_kind="group")]

    assert facts() == [fact]
    assert [h.id for h in selectors.search_knowledge(query="银河漫游者")] == [kid]
    assert knowledge_index().top_k(np.ones(8, dtype=np.float32) / np.sqrt(8), 5)
    assert graph_selectors._nodes_containing({"银河"})["银河"]

    forget.forget(target="person", target_id=alice.pk, user="op")
    assert facts() == []
    assert selectors.search_knowledge(query="银河漫游者") == []
    assert not knowledge_index().top_k(np.ones(8, dtype=np.float32) / np.sqrt(8), 5)
    assert graph_selectors._nodes_containing({"银河"})["银河"] == []  # the redacted summary no longer holds it


def test_the_owner_person_cannot_be_forgotten(db):
    from memory.models import Person

    with pytest.raises(forget.ForgetRefused, match="owner"):
        forget.plan_forget(target="person", target_id=Person.objects.get(kind="owner").pk)


def test_turn_traces_lose_the_forgotten_fact_but_stay(person, group_stream):
    from memory.models import Turn

    kept = services.add_fact(person_id=person.pk, content="喜欢围棋", kind="偏好", at=NOW).fact_id
    gone = services.add_fact(person_id=person.pk, content="住在鼓楼区", kind="身份", at=NOW).fact_id
    turn = Turn.objects.create(stream=group_stream, speaker=person, at=NOW, text="周末干什么", stream_kind="group",
                               pool=[{"factId": gone, "score": 1.0}, {"factId": kept, "score": 0.5}],
                               prompt_fact_ids=[gone, kept], reinforced_fact_ids=[gone])
    plan = forget.plan_forget(target="fact", target_id=gone)
    assert plan.trimmed_turns == [turn.pk] and plan.turns == []
    forget.forget(target="fact", target_id=gone, user="op")
    turn.refresh_from_db()
    assert [e["factId"] for e in turn.pool] == [kept]
    assert turn.prompt_fact_ids == [kept] and turn.reinforced_fact_ids == []
