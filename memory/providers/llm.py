"""Summariser and fact extractor backed by a chat model (docs/REFERENCE.md §14, docs/REFERENCE.md §15).

Both build a Chinese prompt, call ``chat.complete`` once and parse the reply
with the engine's validators. A model failure propagates as ``ProviderError``
(the worker counts it); an unusable reply returns ``None`` (also counted); a
batch too short to be worth a call returns ``None`` without calling the model.
"""

from __future__ import annotations

from collections.abc import Sequence

from memory.engine.extraction import (
    KNOWN_FACT_LIMIT,
    KNOWN_FACT_PER_PERSON,
    EpisodeDraft,
    Extraction,
    parse_episode,
    parse_extraction,
)
from memory.providers import (
    MIN_DIALOGUE_CHARS,
    DialogueLine,
    Emit,
    KnownFact,
    Participant,
    usable_lines,
)
from memory.providers.chat import ChatModel, ProviderError

__all__ = [
    "LLMExtractor",
    "LLMSummariser",
    "extraction_messages",
    "render_dialogue",
    "render_known_facts",
    "render_participants",
    "summary_messages",
]

PARTICIPANT_LIMIT = 12
DEFAULT_BOT_NAME = "小悦"

EXTRACT_SYSTEM = """你是{bot}的记忆整理员。阅读一段聊天记录，找出值得长期记住的、关于在场的人的事实，以及对话里出现的通用知识。

只输出一个 JSON 对象，不要输出任何其他文字：
{{"facts": [{{"person": "平台编号", "kind": "类别", "content": "事实", "slot": "槽位", "supersedes": 0}}], "knowledge": ["知识"]}}

规则：
- person 必须是“在场的人”里方括号中的平台编号，事实说的是谁就写谁。
- content 用第三人称并写出名字，一句话说清楚，例如“小明住在杭州”“小明不吃香菜”。
- kind 只能是：身份（名字、职业、住处、健康等长期属性）、日期（生日、纪念日）、偏好（喜欢或讨厌）、关系（家人、朋友、宠物）、习惯、事件（发生过或计划中的事）、状态（几小时内有效的临时状态）。
- slot 是同一时间只会有一个值的属性，2 到 6 个字，例如 居住地、职业、昵称、生日、手机号；没有就写空字符串。
- 已经记住的事实不要重复写；某条已经记住的事实不再成立时，把它的编号（# 后面的数字）写进 supersedes，否则写 0。
- 只记本人明确说出的信息；玩笑、假设、反问和对别人的猜测不要记；{bot}自己说的话不是关于在场的人的事实。
- knowledge 只收与具体的人无关的通用知识（例如“火锅起源于重庆”），没有就给空列表。
- 没有值得记住的内容时输出 {{"facts": [], "knowledge": []}}。"""

SUMMARY_SYSTEM = """你是{bot}。下面是你和别人的一段聊天记录，其中“我”就是你。把它写成一段简短的回忆：不超过 120 个字，写清楚谁说了什么、做了什么决定，提到别人时写出名字。
再给出 3 到 6 个日后回想这段对话时有用的线索词（人名、地点、事物、话题），每个不超过 8 个字。

只输出一个 JSON 对象，不要输出任何其他文字：
{{"summary": "回忆", "recall_cues": ["线索1", "线索2", "线索3"]}}"""

KNOWN_FACTS_HEADER = (
    "你已经记住的（每条以 [平台编号] #事实编号 开头；不要重复写这些；某条已经不成立时用 supersedes 取代它）："
)


def render_participants(participants: Sequence[Participant]) -> str:
    return "\n".join(f"  [{p.external_id}] {p.name}" for p in participants[:PARTICIPANT_LIMIT])


def render_known_facts(
    known_facts: Sequence[KnownFact], participants: Sequence[Participant]
) -> tuple[str, frozenset[int]]:
    """Known-fact lines, participant by participant, ≤ 6 each and ≤ 30 in all."""
    out: list[str] = []
    ids: set[int] = set()
    for participant in participants[:PARTICIPANT_LIMIT]:
        theirs = [k for k in known_facts if k.person_ref == participant.external_id][:KNOWN_FACT_PER_PERSON]
        for fact in theirs:
            if len(out) >= KNOWN_FACT_LIMIT:
                break
            out.append(f"  [{participant.external_id}] #{fact.id} {' '.join(fact.content.split())}")
            ids.add(fact.id)
    return "\n".join(out), frozenset(ids)


def render_dialogue(lines: Sequence[DialogueLine], participants: Sequence[Participant], bot_name: str) -> str:
    """``speaker：text`` lines; a user is ``[<external_id>] <name>`` (``某人`` if unknown)."""
    names = {p.external_id: p.name for p in participants}
    rendered = []
    for line, text in usable_lines(lines):
        if line.role == "assistant":
            speaker = bot_name
        elif line.speaker_ref is not None and line.speaker_ref in names:
            speaker = f"[{line.speaker_ref}] {names[line.speaker_ref]}"
        else:
            speaker = "某人"
        rendered.append(f"{speaker}：{text}")
    return "\n".join(rendered)


def render_summary_body(lines: Sequence[DialogueLine], participants: Sequence[Participant]) -> str:
    """``name：text`` / ``我：text``; lines of ≤ 3 characters are dropped (docs/REFERENCE.md §15)."""
    names = {p.external_id: p.name for p in participants}
    rendered = []
    for line, text in usable_lines(lines, min_chars=4):
        if line.role == "assistant":
            speaker = "我"
        else:
            speaker = names.get(line.speaker_ref or "") or line.speaker_name.strip() or "对方"
        rendered.append(f"{speaker}：{text}")
    return "\n".join(rendered)


def extraction_messages(
    dialogue: str, participants: Sequence[Participant], known_text: str, bot_name: str
) -> list[dict]:
    sections = [f"在场的人：\n{render_participants(participants)}"]
    if known_text:
        sections.append(f"{KNOWN_FACTS_HEADER}\n{known_text}")
    sections.append(f"对话：\n{dialogue}")
    return [
        {"role": "system", "content": EXTRACT_SYSTEM.format(bot=bot_name)},
        {"role": "user", "content": "\n\n".join(sections)},
    ]


def summary_messages(body: str, participants: Sequence[Participant], bot_name: str) -> list[dict]:
    sections = []
    if participants:
        sections.append("对话里的人：\n" + "\n".join(f"  {p.name}" for p in participants[:PARTICIPANT_LIMIT]))
    sections.append(f"对话：\n{body}")
    return [
        {"role": "system", "content": SUMMARY_SYSTEM.format(bot=bot_name)},
        {"role": "user", "content": "\n\n".join(sections)},
    ]


def _bot_name(configured: str, lines: Sequence[DialogueLine]) -> str:
    if configured:
        return configured
    for line in lines:
        if line.role == "assistant" and line.speaker_name.strip():
            return line.speaker_name.strip()
    return DEFAULT_BOT_NAME


def _complete(chat: ChatModel, messages: list[dict], temperature: float, max_tokens: int) -> str:
    try:
        return chat.complete(messages, temperature=temperature, max_tokens=max_tokens)
    except ProviderError:
        raise
    except Exception as exc:  # any other chat implementation's failure is still a model failure
        raise ProviderError(f"{type(exc).__name__}: {exc}") from exc


class LLMSummariser:
    """Episode summaries written by a chat model."""

    def __init__(self, chat: ChatModel, *, bot_name: str = "", temperature: float = 0.2, max_tokens: int = 512) -> None:
        self.chat = chat
        self.label = getattr(chat, "label", "llm")
        self.bot_name = bot_name
        self.temperature = temperature
        self.max_tokens = max_tokens

    def summarise(self, lines: Sequence[DialogueLine], participants: Sequence[Participant] = ()) -> EpisodeDraft | None:
        """EpisodeDraft, or None if the body is under 40 characters or the reply is unusable.

        Raises ProviderError when the model call fails.
        """
        body = render_summary_body(lines, participants)
        if len(body) < MIN_DIALOGUE_CHARS:
            return None
        messages = summary_messages(body, participants, _bot_name(self.bot_name, lines))
        return parse_episode(_complete(self.chat, messages, self.temperature, self.max_tokens))


class LLMExtractor:
    """Fact and knowledge extraction by a chat model."""

    def __init__(
        self, chat: ChatModel, *, bot_name: str = "", temperature: float = 0.1, max_tokens: int = 1024
    ) -> None:
        self.chat = chat
        self.label = getattr(chat, "label", "llm")
        self.bot_name = bot_name
        self.temperature = temperature
        self.max_tokens = max_tokens

    def extract(
        self,
        lines: Sequence[DialogueLine],
        participants: Sequence[Participant],
        known_facts: Sequence[KnownFact] = (),
        *,
        emit: Emit | None = None,
    ) -> Extraction | None:
        """Extraction, or None (no participants, dialogue under 40 characters, unusable reply).

        Only ids of known facts actually shown to the model are accepted as
        ``supersedes``. Raises ProviderError when the model call fails.
        """
        if not participants:
            return None
        bot_name = _bot_name(self.bot_name, lines)
        dialogue = render_dialogue(lines, participants, bot_name)
        if len(dialogue) < MIN_DIALOGUE_CHARS:
            return None
        known_text, known_ids = render_known_facts(known_facts, participants)
        messages = extraction_messages(dialogue, participants, known_text, bot_name)
        raw = _complete(self.chat, messages, self.temperature, self.max_tokens)
        return parse_extraction(raw, known_ids, emit)
