from __future__ import annotations

import json

import pytest

from memory.engine.extraction import ExtractedFact
from memory.providers import DialogueLine, KnownFact, Participant
from memory.providers.chat import OpenAIChatModel, ProviderError
from memory.providers.llm import LLMExtractor, LLMSummariser, render_known_facts
from tests.providers.conftest import Reply

MING = Participant("u1001", "小明", 1)
HONG = Participant("u1002", "小红", 2)
PEOPLE = [MING, HONG]
LINES = [
    DialogueLine("user", "u1001", "小明", "我上个月搬到杭州了，\n新工作是产品经理。"),
    DialogueLine("assistant", None, "小悦", "<mood>开心</mood><say>恭喜！杭州很适合生活。</say>"),
    DialogueLine("user", "u1002", "小红", "我周末想去吃火锅，你们谁一起？"),
    DialogueLine("user", None, "路人", "好"),
]
KNOWN = [
    KnownFact(7, "u1001", "小明住在北京", "居住地"),
    KnownFact(8, "u1002", "小红喜欢火锅"),
    KnownFact(9, "u9999", "陌生人的事实"),
]


@pytest.fixture
def chat(fake_openai):
    return OpenAIChatModel(fake_openai.base_url, "qwen-test", timeout=2.0, max_retries=0, backoff=0.01)


def prompt(fake_openai) -> tuple[str, str]:
    (request,) = fake_openai.calls("/chat/completions")
    system, user = request.json["messages"]
    assert (system["role"], user["role"]) == ("system", "user")
    return system["content"], user["content"]


def test_extractor_prompt_has_participants_known_facts_and_dialogue(fake_openai, chat):
    fake_openai.chat_reply = '{"facts": [], "knowledge": []}'

    LLMExtractor(chat).extract(LINES, PEOPLE, KNOWN)

    system, user = prompt(fake_openai)
    assert "小悦" in system and '"supersedes"' in system
    assert "在场的人：\n  [u1001] 小明\n  [u1002] 小红" in user
    assert "  [u1001] #7 小明住在北京\n  [u1002] #8 小红喜欢火锅" in user
    assert "#9" not in user  # not a participant
    assert "[u1001] 小明：我上个月搬到杭州了， 新工作是产品经理。" in user
    assert "小悦：恭喜！杭州很适合生活。" in user
    assert "某人：好" in user
    assert "<mood>" not in user and "<say>" not in user


def test_extractor_parses_the_reply_and_keeps_only_shown_supersedes(fake_openai, chat):
    fake_openai.chat_reply = (
        "```json\n"
        + json.dumps(
            {
                "facts": [
                    {
                        "person": "u1001",
                        "kind": "身份",
                        "content": "小明住在杭州",
                        "slot": "居住地",
                        "supersedes": "#7",
                    },
                    {"person": "u1001", "kind": "身份", "content": "小明是产品经理", "slot": "职业", "supersedes": 9},
                ],
                "knowledge": ["杭州是浙江的省会"],
            },
            ensure_ascii=False,
        )
        + "\n```"
    )
    events = []

    extraction = LLMExtractor(chat).extract(
        LINES, PEOPLE, KNOWN, emit=lambda kind, payload: events.append((kind, payload))
    )

    assert extraction.facts == [
        ExtractedFact("u1001", "身份", "小明住在杭州", "居住地", 7),
        ExtractedFact("u1001", "身份", "小明是产品经理", "职业", 0),
    ]
    assert extraction.knowledge == ["杭州是浙江的省会"]
    assert events == [("memory_fact_supersede_dropped", {"supersededId": 9, "reason": "not_in_known_list"})]


def test_extractor_returns_none_for_an_unusable_reply(fake_openai, chat):
    fake_openai.chat_reply = "抱歉，我无法完成这个任务。"

    assert LLMExtractor(chat).extract(LINES, PEOPLE, KNOWN) is None


def test_extractor_propagates_model_failure(fake_openai, chat):
    fake_openai.push("/chat/completions", Reply(500, body="boom"))

    with pytest.raises(ProviderError):
        LLMExtractor(chat).extract(LINES, PEOPLE, KNOWN)


def test_extractor_wraps_foreign_chat_failures():
    class Broken:
        label = "llm:broken"

        def complete(self, messages, *, temperature=0.2, max_tokens=1024):
            raise RuntimeError("socket on fire")

    with pytest.raises(ProviderError, match="socket on fire"):
        LLMExtractor(Broken()).extract(LINES, PEOPLE)


def test_extractor_skips_short_dialogue_and_no_participants(fake_openai, chat):
    short = [DialogueLine("user", "u1001", "小明", "在吗")]

    assert LLMExtractor(chat).extract(short, PEOPLE) is None
    assert LLMExtractor(chat).extract(LINES, []) is None
    assert fake_openai.requests == []


def test_known_facts_are_capped_per_person_and_in_total():
    people = [Participant(f"u{i}", f"人{i}") for i in range(8)]
    known = [KnownFact(i * 100 + j, f"u{i}", f"事实{i}-{j}") for i in range(8) for j in range(10)]

    text, ids = render_known_facts(known, people)

    lines = text.splitlines()
    assert len(lines) == 30 and len(ids) == 30
    assert sum(1 for line in lines if line.startswith("  [u0] ")) == 6
    assert lines[0] == "  [u0] #0 事实0-0"


def test_summariser_renders_the_body_and_parses_the_reply(fake_openai, chat):
    fake_openai.chat_reply = (
        '{"summary": "小明搬到杭州当产品经理，小红约大家周末吃火锅。", "recall_cues": ["杭州", " 火锅 ", ""]}'
    )

    draft = LLMSummariser(chat).summarise(LINES, PEOPLE)

    assert draft.summary == "小明搬到杭州当产品经理，小红约大家周末吃火锅。"
    assert draft.cues == ["杭州", "火锅"]
    system, user = prompt(fake_openai)
    assert "小悦" in system and "recall_cues" in system
    assert "小明：我上个月搬到杭州了， 新工作是产品经理。" in user
    assert "我：恭喜！杭州很适合生活。" in user
    assert "：好" not in user  # lines of ≤ 3 characters are dropped


def test_summariser_skips_a_short_body_without_calling_the_model(fake_openai, chat):
    assert LLMSummariser(chat).summarise(LINES[3:], PEOPLE) is None
    assert fake_openai.requests == []


def test_summariser_returns_none_for_an_unusable_reply_and_raises_on_failure(fake_openai, chat):
    fake_openai.chat_reply = '{"recall_cues": ["x"]}'
    assert LLMSummariser(chat).summarise(LINES, PEOPLE) is None

    fake_openai.push("/chat/completions", Reply(429, json={}, headers={"Retry-After": "60"}))
    with pytest.raises(ProviderError):
        LLMSummariser(chat).summarise(LINES, PEOPLE)


def test_labels_name_the_model(chat):
    assert LLMSummariser(chat).label == LLMExtractor(chat).label == "llm:qwen-test"
