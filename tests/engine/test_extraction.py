"""Parsing of extraction and summary output — docs/REFERENCE.md §14, docs/REFERENCE.md §15."""

from __future__ import annotations

from typing import Any

import pytest

from memory.engine.extraction import (
    KNOWN_FACT_LIMIT,
    KNOWN_FACT_PER_PERSON,
    MIN_DIALOGUE_CHARS,
    EpisodeDraft,
    ExtractedFact,
    Extraction,
    parse_episode,
    parse_extraction,
)


class Events:
    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        self.items.append((kind, payload))


def test_constants() -> None:
    assert (KNOWN_FACT_LIMIT, KNOWN_FACT_PER_PERSON, MIN_DIALOGUE_CHARS) == (30, 6, 40)


def test_empty_results() -> None:  # 103
    assert parse_extraction('{"facts": [], "knowledge": []}') == Extraction([], [])
    assert parse_extraction('{"facts": []}') == Extraction([], [])
    assert parse_extraction('{"knowledge": null, "facts": null}') == Extraction([], [])


def test_fenced_json() -> None:  # 103
    raw = '好的：\n```json\n{"facts": [{"person": "900000001", "kind": "偏好", "content": "他喜欢喝冰美式"}]}\n```'
    result = parse_extraction(raw)
    assert result == Extraction([ExtractedFact("900000001", "偏好", "他喜欢喝冰美式")], [])


def test_kind_normalisation_events() -> None:  # 103
    events = Events()
    raw = (
        '{"facts": [{"person": "1", "content": "a"}, {"person": "2", "kind": "喜好", "content": "b"},'
        ' {"person": "3", "kind": " 状态 ", "content": "c"}, {"person": "4", "kind": "习惯", "content": "d"}]}'
    )
    result = parse_extraction(raw, emit=events)
    assert result is not None
    assert [f.kind for f in result.facts] == ["事件", "事件", "状态", "习惯"]
    assert events.items == [
        ("memory_fact_kind_normalized", {"rawKind": "<空>", "normalizedKind": "事件"}),
        ("memory_fact_kind_normalized", {"rawKind": "喜好", "normalizedKind": "事件"}),
    ]


def test_knowledge_filtering() -> None:  # 103
    result = parse_extraction('{"knowledge": [123, "", null, "  月球没有全球性磁场  ", ["x"]]}')
    assert result == Extraction([], ["月球没有全球性磁场"])


@pytest.mark.parametrize(
    "raw",
    [
        "我觉得这段对话没什么可记的。",
        '[{"person": "1", "kind": "偏好", "content": "他喜欢猫"}]',
        '{"facts": {"person": "1"}}',
        '{"facts": [], "knowledge": "x"}',
        '{"facts": [{"kind": "偏好", "content": "他喜欢猫"}]}',
        '{"facts": [{"person": "1", "kind": "偏好", "content": "   "}]}',
        '{"facts": [{"person": "  ", "content": "x"}]}',
        '{"facts": [{"person": 1, "content": "x"}]}',
        '{"facts": ["他喜欢猫"]}',
        '{"other": []}',
        '{"facts": [}',
        "",
        None,
        "{" * 5000 + "}" * 5000,
    ],
)
def test_whole_batch_rejected(raw: str | None) -> None:  # 104
    assert parse_extraction(raw) is None


def test_rejected_batch_emits_nothing() -> None:
    events = Events()
    assert parse_extraction('{"facts": [{"person": "1", "content": "a"}, {"content": "b"}]}', emit=events) is None
    assert events.items == []


def test_slot_and_supersedes() -> None:  # 105
    events = Events()
    raw = """{"facts": [
      {"person": "1", "kind": "关系", "content": "他搬到了杭州", "slot": " 居住地 ", "supersedes": "#12"},
      {"person": "1", "kind": "关系", "content": "b", "supersedes": 12},
      {"person": "1", "kind": "关系", "content": "c", "supersedes": "#999"},
      {"person": "1", "kind": "关系", "content": "d", "supersedes": "不是编号"},
      {"person": "1", "kind": "关系", "content": "e", "slot": "他喜欢喝的东西"},
      {"person": "1", "kind": "关系", "content": "f", "slot": "猫", "supersedes": true},
      {"person": "1", "kind": "关系", "content": "g", "supersedes": 12.0},
      {"person": "1", "kind": "关系", "content": "h", "supersedes": "12"},
      {"person": "1", "kind": "关系", "content": "i", "supersedes": -3},
      {"person": "1", "kind": "关系", "content": "j", "supersedes": "²"}
    ]}"""
    result = parse_extraction(raw, known_fact_ids={12}, emit=events)
    assert result is not None
    facts = result.facts
    assert facts[0] == ExtractedFact("1", "关系", "他搬到了杭州", slot="居住地", supersedes=12)
    assert facts[1].supersedes == 12
    assert facts[2].supersedes == 0
    assert facts[3].supersedes == 0
    assert facts[4].slot == ""
    assert facts[5].slot == "" and facts[5].supersedes == 0
    assert facts[6].supersedes == 0
    assert facts[7].supersedes == 12
    assert facts[8].supersedes == 0 and facts[9].supersedes == 0
    assert events.items == [
        ("memory_fact_supersede_dropped", {"supersededId": 999, "reason": "not_in_known_list"}),
    ]


def test_supersedes_without_known_list_is_dropped() -> None:
    events = Events()
    result = parse_extraction(
        '{"facts": [{"person": "1", "kind": "偏好", "content": "x", "supersedes": 5}]}', emit=events
    )
    assert result is not None and result.facts[0].supersedes == 0
    assert events.items == [("memory_fact_supersede_dropped", {"supersededId": 5, "reason": "not_in_known_list"})]


def test_parse_episode() -> None:
    raw = '```json\n{"summary": " 他们约了周末烧烤 ", "recall_cues": [" 烧烤 ", "", 3, "周末", "烧烤"]}\n```'
    assert parse_episode(raw) == EpisodeDraft(summary="他们约了周末烧烤", cues=["烧烤", "周末"])
    assert parse_episode('{"summary": "只有摘要", "recall_cues": ["  ", null]}') == EpisodeDraft(
        "只有摘要", ["只有摘要"]
    )
    assert parse_episode('{"summary": "只有摘要"}') == EpisodeDraft("只有摘要", ["只有摘要"])
    assert parse_episode('{"summary": "s", "recall_cues": "一条"}') == EpisodeDraft("s", ["一条"])
    assert parse_episode('{"summary": "s", "recall_cues": 5}') == EpisodeDraft("s", ["s"])
    for bad in ('{"summary": "  "}', '{"summary": 3}', "no json", "[1]", "", None, '{"recall_cues": ["a"]}'):
        assert parse_episode(bad) is None
