"""A small labelled world for the label, inspector and fit tests: persons with facts on the same
topics, one private stream each, turns asking about a topic through the real recall path
(``prepare_turn`` + ``confirm_turn``), and the fact that answers each turn labelled relevant."""
from __future__ import annotations

from dataclasses import dataclass, field

from memory import recall
from memory import services as memory_services
from memory.models import Stream, Turn
from tuning import relevance

T0 = 1_700_000_000_000
HOUR = 3_600_000
TOPICS = [
    ("橘猫", "养了一只橘猫叫团子"),
    ("咖啡", "每天早上喝手冲咖啡"),
    ("爬山", "周末喜欢去爬山"),
    ("日语", "最近在学日语"),
    ("火锅", "最爱吃重庆火锅"),
    ("吉他", "晚上在练吉他"),
]
NAMES = ["阿青", "小白", "老周", "米娅", "大雨", "阿杰"]


@dataclass
class World:
    persons: dict[str, int] = field(default_factory=dict)
    streams: dict[str, Stream] = field(default_factory=dict)
    facts: dict[tuple[str, str], int] = field(default_factory=dict)  # (name, topic) → fact id
    turns: list[tuple[int, str, str]] = field(default_factory=list)  # (turn id, name, topic)


def build(names: list[str] = NAMES, *, label: bool = True, user: str = "reviewer") -> World:
    """Every person × every topic: a fact, and a turn asking about it (labelled when ``label``)."""
    world = World()
    for i, name in enumerate(names):
        person = memory_services.resolve_person(platform="qq", external_id=name, name=name, at=T0)
        world.persons[name] = person.pk
        stream = memory_services.resolve_stream(platform="qq", kind="direct", external_id=name, name=f"{name}私聊")
        world.streams[name] = stream
        for j, (topic, phrase) in enumerate(TOPICS):
            world.facts[(name, topic)] = memory_services.add_fact(
                person_id=person.pk, content=f"{name}{phrase}", kind="偏好", origin_kind="direct",
                at=T0 + (i * len(TOPICS) + j) * HOUR,
            ).fact_id
    at = T0 + 200 * HOUR
    for name in names:
        stream = world.streams[name]
        for topic, _phrase in TOPICS:
            at += 60_000
            memory_services.append_message(stream_id=stream.pk, role="user", content=f"说说{topic}吧",
                                           sender_person_id=world.persons[name], at=at)
            ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=world.persons[name], text=f"最近{topic}怎么样",
                                      at=at + 1000)
            recall.confirm_turn(turn_id=ctx.turn_id, at=at + 2000)
            world.turns.append((ctx.turn_id, name, topic))
            if label:
                relevance.set_label(turn_id=ctx.turn_id, fact_id=world.facts[(name, topic)], relevant=True, user=user,
                                    at=at + 3000)
    return world


def turn(world: World, index: int = 0) -> Turn:
    return Turn.objects.get(pk=world.turns[index][0])
