"""The relevance gate through the API, with the real local model: small talk brings (almost) nothing,
a line about a memory brings it — the same default profile for both, no constant per line."""
from __future__ import annotations

import pytest

from memory import pipeline
from memory.providers import config
from memory.search import background

from .conftest import T0, person, stream

pytestmark = pytest.mark.django_db

DAY = 86_400_000
FACTS = [
    "喜欢喝乌龙茶", "养了一只橘猫叫年糕", "每天早上六点去跑步", "在一家做在线教育的公司当产品经理", "对花生过敏",
    "去年在杭州西湖边住过一个星期", "周末喜欢打篮球", "妈妈是中学老师", "最近在学日语", "生日是三月十四日",
]
#: small talk that names no memory (none of these is a line of the gate's bank)
SMALL_TALK = ["哈哈哈", "在不在", "早上好呀", "晚安", "嗯嗯", "你好", "好无聊啊", "谢谢", "hello", "lol"]


@pytest.fixture
def seeded(api, settings):
    settings.EMBEDDING_PROVIDER = "local"
    config.reset_cache()
    background.reset()
    ids = {}
    for n, content in enumerate(FACTS):
        r = api.post("facts", {"person": person(), "kind": "偏好", "content": content, "at": T0 - (n + 1) * 30 * DAY,
                               "stream_kind": "direct"})
        ids[content] = r.json()["fact_id"]
    pipeline.backfill_vectors()
    yield ids
    config.reset_cache()
    background.reset()


def _turn(api, text, ext, at=T0):
    ref = stream(ext, kind="direct")
    turn = api.post("turns", {"stream": ref, "speaker": person(), "text": text, "at": at}).json()
    confirmed = api.post(f"turns/{turn['turn_id']}/confirm", {"at": at + 1000}).json()
    assert confirmed["used_vector"] is True
    return [f["content"] for f in confirmed["facts"]]


def test_small_talk_in_a_fresh_stream_brings_at_most_a_fact_a_turn(api, seeded):
    brought = [len(_turn(api, line, f"fresh{n}", at=T0 + n * 60_000)) for n, line in enumerate(SMALL_TALK)]
    assert max(brought) <= 1 and sum(brought) / len(brought) <= 0.3, brought


@pytest.mark.parametrize(("line", "fact"), [
    ("下个月想再去杭州玩几天", "去年在杭州西湖边住过一个星期"),
    ("晚上吃点什么好呢，花生酱拌面怎么样", "对花生过敏"),
    ("这周末约了朋友去球场", "周末喜欢打篮球"),
    ("我妈今天在学校监考了一整天", "妈妈是中学老师"),
])
def test_a_line_about_a_memory_brings_it(api, seeded, line, fact):
    facts = _turn(api, line, "about")
    assert fact in facts[:3], facts


def test_a_pasted_history_is_judged_by_the_same_rule(api, seeded):
    history = "\n".join([
        "今天下班好晚", "路过一家咖啡店，闻着好香", "不过我还是更想喝点茶", "你说我明天带什么茶去公司好呢",
    ])
    facts = _turn(api, history, "history")
    assert "喜欢喝乌龙茶" in facts[:3], facts
