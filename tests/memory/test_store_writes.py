"""Store writes, L1/L2, slot conflicts and supersede — docs/REFERENCE.md §1, §3 and §9."""
from __future__ import annotations

import pytest

from memory import selectors, services
from memory.models import Episode, EpisodeCue, Fact, Message
from tests.memory.conftest import DAY, NOW, fact_row


def _msg(stream, content, role="user", sender=None, at=NOW, **kw):
    return services.append_message(
        stream_id=stream.pk, role=role, content=content, sender_person_id=sender, at=at, **kw
    )[0]


def _fact(person, content, slot="", **kw):
    kw.setdefault("at", NOW)
    return services.add_fact(person_id=person.pk, content=content, slot=slot, **kw)


def _ids(person, query, stream_kind="direct"):
    return [f.id for f in selectors.recall_facts_in_scope(person_ids=[person.pk], query=query, now=NOW,
                                                           stream_kind=stream_kind)]


class TestWorkingMemory:
    def test_working_memory_and_pending(self, person, direct_stream):
        _msg(direct_stream, "第一句", sender=person.pk)
        _msg(direct_stream, "第二句", role="assistant")
        assert [m.content for m in selectors.working_memory(stream_id=direct_stream.pk)] == ["第一句", "第二句"]
        assert selectors.pending_count(stream_id=direct_stream.pk) == 2

    def test_add_episode_archives_its_batch(self, person, direct_stream):
        a = _msg(direct_stream, "甲", sender=person.pk, at=1000)
        b = _msg(direct_stream, "乙", role="assistant", at=2000)
        _msg(direct_stream, "丙", sender=person.pk, at=3000)
        ep = services.add_episode(
            stream_id=direct_stream.pk, summary="聊了甲和乙", cues=["关于甲的对话"], started_at=1000, ended_at=2000,
            message_ids=[a.pk, b.pk], at=NOW,
        )
        assert selectors.pending_count(stream_id=direct_stream.pk) == 1
        assert [m.content for m in selectors.working_memory(stream_id=direct_stream.pk)] == ["丙"]
        assert set(Message.objects.filter(episode=ep).values_list("id", flat=True)) == {a.pk, b.pk}
        assert selectors.pending_counts() == {direct_stream.pk: 1}
        assert [m.content for m in selectors.oldest_pending(stream_id=direct_stream.pk, n=5)] == ["丙"]

    def test_add_episode_never_archives_other_streams(self, person, direct_stream, group_stream):
        other = _msg(group_stream, "别的会话", sender=person.pk)
        services.add_episode(
            stream_id=direct_stream.pk, summary="x", cues=[], started_at=0, ended_at=0, message_ids=[other.pk], at=NOW
        )
        assert Message.objects.get(pk=other.pk).episode_id is None

    def test_watermark_fixes_the_snapshot(self, person, direct_stream):
        u1 = _msg(direct_stream, "问题一", sender=person.pk)
        _msg(direct_stream, "回答", role="assistant")
        _msg(direct_stream, "问题二", sender=person.pk)
        _msg(direct_stream, "再答", role="assistant")
        got = selectors.working_memory(stream_id=direct_stream.pk, watermark=u1.pk)
        assert [m.content for m in got] == ["问题一", "回答", "再答"]
        assert [m.content for m in selectors.working_memory(stream_id=direct_stream.pk, limit=2)] == ["问题二", "再答"]

    def test_append_is_idempotent_on_external_id(self, person, direct_stream):
        m1, c1 = services.append_message(stream_id=direct_stream.pk, role="user", content="你好",
                                         sender_person_id=person.pk, external_message_id="x1", at=NOW)
        m2, c2 = services.append_message(stream_id=direct_stream.pk, role="user", content="你好",
                                         sender_person_id=person.pk, external_message_id="x1", at=NOW + 5)
        assert (c1, c2) == (True, False) and m1.pk == m2.pk
        assert Message.objects.count() == 1

    def test_append_validates(self, person, direct_stream):
        with pytest.raises(services.MemoryInputError):
            services.append_message(stream_id=direct_stream.pk, role="system", content="x")
        with pytest.raises(services.MemoryInputError):
            services.append_message(stream_id=direct_stream.pk, role="user", content="x")

    def test_update_message_content_keeps_timestamp(self, person, direct_stream):
        m = _msg(direct_stream, "[图片]", sender=person.pk, at=1234)
        updated = services.update_message_content(message_id=m.pk, content="一张猫的照片")
        assert updated.content == "一张猫的照片" and updated.created_at == 1234
        with pytest.raises(services.NotFound):
            services.update_message_content(message_id=99999, content="x")

    def test_messages_after_ignores_archiving(self, person, direct_stream):
        ids = [_msg(direct_stream, f"消息{i}", sender=person.pk).pk for i in range(6)]
        services.add_episode(stream_id=direct_stream.pk, summary="六条", cues=[], started_at=0, ended_at=0,
                             message_ids=ids, at=NOW)
        assert selectors.pending_count(stream_id=direct_stream.pk) == 0
        assert [m.pk for m in selectors.messages_after(stream_id=direct_stream.pk, since_id=0, limit=10)] == ids
        assert selectors.message_count_after(stream_id=direct_stream.pk, since_id=ids[2]) == 3
        assert [m.pk for m in selectors.messages_after(stream_id=direct_stream.pk, since_id=ids[2], limit=2)] == ids[3:5]

    def test_recent_speakers(self, person, other_person, group_stream):
        _msg(group_stream, "a", sender=person.pk)
        _msg(group_stream, "b", sender=other_person.pk)
        last = _msg(group_stream, "c", sender=person.pk)
        _msg(group_stream, "d", role="assistant")
        assert selectors.recent_speakers(stream_id=group_stream.pk, before_id=last.pk) == [person.pk, other_person.pk]


class TestEpisodes:
    def test_only_cues_are_indexed(self, direct_stream):
        services.add_episode(
            stream_id=direct_stream.pk, summary="他说了很多关于工作压力的事",
            cues=["他提到加班和熬夜的时候", "需要安慰他的时候"], started_at=1000, ended_at=2000, message_ids=[], at=NOW,
        )
        assert len(selectors.recall_episodes(stream_id=direct_stream.pk, query="熬夜")) == 1
        assert selectors.recall_episodes(stream_id=direct_stream.pk, query="压力") == []

    def test_blank_cues_are_skipped_and_rowids_align(self, direct_stream):
        ep = services.add_episode(stream_id=direct_stream.pk, summary="s", cues=["  ", "想起烧烤的时候", ""],
                                  started_at=0, ended_at=0, message_ids=[], at=NOW)
        assert list(EpisodeCue.objects.filter(episode=ep).values_list("cue", flat=True)) == ["想起烧烤的时候"]
        hit = selectors.recall_episodes(stream_id=direct_stream.pk, query="烧烤")
        assert [e.id for e in hit] == [ep.pk] and 0 < hit[0].score < 1

    def test_placeholders_hidden_from_recall_and_recent(self, direct_stream):
        # a cue on the placeholder too: recall must skip it by its kind, not only because the pipeline gives none
        ep = services.add_episode(stream_id=direct_stream.pk, summary="这一批对话未能生成摘要：超时", cues=["模型超时"],
                                  started_at=0, ended_at=10, message_ids=[], kind=Episode.Kind.UNSUMMARIZED, at=NOW)
        real = services.add_episode(stream_id=direct_stream.pk, summary="正常", cues=["正常的时候"],
                                    started_at=0, ended_at=5, message_ids=[], at=NOW)
        assert [e.id for e in selectors.recent_episodes(stream_id=direct_stream.pk)] == [real.pk]
        for cue in ("周末去爬山", "晚饭吃火锅", "新买了吉他"):  # other rows: bm25 ranks a term by its rarity
            services.add_episode(stream_id=direct_stream.pk, summary=cue, cues=[cue], started_at=0, ended_at=1,
                                 message_ids=[], at=NOW)
        assert [e.id for e in selectors.recall_episodes(stream_id=direct_stream.pk, query="模型超时")] == []
        assert [e.id for e in selectors.recall_episodes(stream_id=None, query="模型超时")] == []
        assert [e.id for e in selectors.recall_episodes(stream_id=direct_stream.pk, query="正常的时候")] == [real.pk]
        assert Episode.objects.filter(pk=ep.pk).exists()


class TestFacts:
    def test_same_content_two_persons_two_rows(self, person, other_person):
        a = _fact(person, "喜欢咖啡", kind="偏好").fact_id
        b = _fact(other_person, "喜欢咖啡", kind="偏好").fact_id
        assert a != b
        assert _ids(person, "咖啡") == [a]
        assert _ids(other_person, "咖啡") == [b]

    def test_slot_conflicts_are_reported_and_kept(self, person):
        chengdu = _fact(person, "他现在住在成都", slot="居住地")
        assert chengdu.conflict_with == []
        hangzhou = _fact(person, "他现在住在杭州", slot="居住地")
        assert hangzhou.conflict_with == [chengdu.fact_id]
        shenzhen = _fact(person, "他现在住在深圳", slot="居住地")
        assert shenzhen.conflict_with == [chengdu.fact_id, hangzhou.fact_id]
        members = [(chengdu.fact_id, "他现在住在成都"), (hangzhou.fact_id, "他现在住在杭州"),
                   (shenzhen.fact_id, "他现在住在深圳")]
        assert selectors.conflict_group_keys(person_ids=[person.pk]) == [(person.pk, "居住地")]
        assert selectors.conflict_members([(person.pk, "居住地")]) == {(person.pk, "居住地"): members}
        assert Fact.objects.filter(person=person, superseded_by__isnull=True).count() == 3

    def test_empty_slot_never_conflicts(self, person):
        _fact(person, "他喜欢喝美式")
        assert _fact(person, "他喜欢喝拿铁").conflict_with == []

    def test_frozen_fact_never_conflicts(self, person):
        old = _fact(person, "他现在住在成都", slot="居住地", kind="事件", at=0)
        services.sweep(at=10_000 * DAY)
        assert fact_row(old.fact_id).active is False
        assert _fact(person, "他现在住在杭州", slot="居住地", at=10_000 * DAY).conflict_with == []
        assert selectors.conflict_groups(now=10_000 * DAY) == []

    def test_exact_duplicate_with_slot(self, person):
        a = _fact(person, "他现在住在成都", slot="居住地")
        b = _fact(person, "他现在住在成都", slot="居住地")
        assert b.fact_id == a.fact_id and b.created is False and b.conflict_with == []
        assert Fact.objects.count() == 1

    def test_explicit_supersede(self, person):
        old = _fact(person, "他现在住在成都", slot="居住地").fact_id
        new = _fact(person, "他现在住在杭州", slot="居住地", supersedes=old)
        assert new.superseded == old and new.conflict_with == []
        assert fact_row(old).superseded_by_id == new.fact_id
        assert _ids(person, "杭州") == [new.fact_id]
        assert _ids(person, "成都") == []
        assert [f.id for f in selectors.recall_facts_across_persons(query="成都", now=NOW, stream_kind="direct")] == []
        assert [f.id for f in selectors.top_facts(person_id=person.pk, now=NOW, stream_kind="direct")] == [new.fact_id]
        from memory.models import FactOperation

        op = FactOperation.objects.get(pk=new.operation_id)
        assert (op.op, op.actor, op.fact_id, op.related_fact_id) == ("supersede", "auto", old, new.fact_id)
        assert op.prev == {"superseded_by": None, "new_row_created": True}

    def test_supersede_refused_for_another_persons_fact(self, person, other_person):
        mine = _fact(person, "他现在住在成都", slot="居住地").fact_id
        theirs = _fact(other_person, "他现在住在广州", slot="居住地").fact_id
        write = _fact(person, "他现在住在杭州", slot="居住地", supersedes=theirs)
        assert write.superseded == 0 and write.operation_id == 0
        assert fact_row(theirs).superseded_by_id is None
        assert write.conflict_with == [mine]

    def test_supersede_refused_when_target_already_superseded(self, person):
        a = _fact(person, "他现在住在成都", slot="居住地").fact_id
        b = _fact(person, "他现在住在杭州", slot="居住地", supersedes=a).fact_id
        c = _fact(person, "他现在住在深圳", slot="居住地", supersedes=a)
        assert c.superseded == 0
        assert fact_row(a).superseded_by_id == b  # the chain does not fork

    def test_supersede_refused_for_itself(self, person):
        a = _fact(person, "他现在住在成都", slot="居住地").fact_id
        again = _fact(person, "他现在住在成都", slot="居住地", supersedes=a)
        assert again.fact_id == a and again.superseded == 0
        assert fact_row(a).superseded_by_id is None

    def test_unknown_or_bad_supersede_target_is_ignored(self, person):
        assert _fact(person, "他现在住在成都", supersedes=99999).superseded == 0
        assert _fact(person, "他现在住在杭州", supersedes=-3).superseded == 0
        assert _fact(person, "他现在住在深圳", supersedes="7").superseded == 0

    def test_reinforce_and_supersede(self, person):
        existing = _fact(person, "他现在住在杭州", slot="居住地").fact_id
        old = _fact(person, "他现在住在成都", slot="居住地").fact_id
        write = _fact(person, "他现在住在杭州", slot="居住地", supersedes=old, at=NOW + 1000)
        assert write.fact_id == existing and write.created is False
        assert write.superseded == old
        assert fact_row(old).superseded_by_id == existing
        assert fact_row(existing).hit_count == 1 and fact_row(existing).updated_at == NOW + 1000
        from memory.models import FactOperation

        assert FactOperation.objects.get(pk=write.operation_id).prev == {
            "superseded_by": None, "new_row_created": False,
        }

    @pytest.mark.parametrize("content", ["", "   ", "！！", "？。，", None])
    def test_empty_or_punctuation_facts_write_nothing(self, person, content):
        write = services.add_fact(person_id=person.pk, content=content, at=NOW)
        assert write.fact_id == 0 and write.created is False
        assert Fact.objects.count() == 0

    def test_new_fact_defaults(self, person):
        fid = _fact(person, "  他喜欢喝冰美式  ", kind="偏好", source="x" * 200, origin_kind="group").fact_id
        row = fact_row(fid)
        assert row.content == "他喜欢喝冰美式"
        assert (row.strength, row.half_life_hours, row.updated_at, row.created_at) == (1.0, 2160, NOW, NOW)
        assert row.active and row.origin_kind == "group" and len(row.source) == 120
        assert row.content_key == "他喜欢喝冰美式"

    def test_conflict_groups(self, person, other_person):
        a = _fact(person, "他现在住在成都", slot="居住地").fact_id
        b = _fact(person, "他现在住在杭州", slot="居住地").fact_id
        _fact(other_person, "她住在上海", slot="居住地")
        groups = selectors.conflict_groups(now=NOW)
        assert len(groups) == 1
        g = groups[0]
        assert (g.person_id, g.slot, g.person_name) == (person.pk, "居住地", "凌白")
        assert [m["id"] for m in g.members] == [a, b]
        assert g.members[0]["retention"] == 1.0
        assert selectors.conflict_groups(person_id=other_person.pk, now=NOW) == []
        assert selectors.conflict_group_keys() == [(person.pk, "居住地")]
        assert selectors.conflict_group_keys(person_ids=[other_person.pk]) == []
        assert selectors.conflict_group_keys(person_ids=[]) == []  # no person: no group, not every group
        assert selectors.conflict_members([(person.pk, "居住地"), (other_person.pk, "居住地")]) == {
            (person.pk, "居住地"): [(a, "他现在住在成都"), (b, "他现在住在杭州")]
        }
