from __future__ import annotations

import re

import pytest

from memory.engine.extraction import FACT_KINDS
from memory.providers import DialogueLine, KnownFact, Participant
from memory.providers.heuristic import HeuristicExtractor, HeuristicSummariser

MING = Participant("u1001", "小明", 1)
HONG = Participant("u1002", "小红", 2)
PEOPLE = [MING, HONG]


def said(text: str, who: Participant = MING) -> DialogueLine:
    return DialogueLine("user", who.external_id, who.name, text)


def bot(text: str) -> DialogueLine:
    return DialogueLine("assistant", None, "小悦", text)


def facts_of(*lines: DialogueLine, known=()):
    return HeuristicExtractor().extract(list(lines), PEOPLE, list(known)).facts


def only_fact(text: str, known=()):
    (fact,) = facts_of(said(text), known=known)
    return fact


@pytest.mark.parametrize(
    ("text", "kind", "slot", "content"),
    [
        ("我住在杭州西湖区附近，离公司挺近的", "身份", "居住地", "小明住在杭州西湖区附近"),
        ("对了，我家住在成都", "身份", "居住地", "小明家住在成都"),
        ("我下个月要搬到深圳了", "身份", "居住地", "小明下个月要搬到深圳了"),
        ("其实我是一名前端工程师", "身份", "职业", "小明是一名前端工程师"),
        ("我现在是产品经理", "身份", "职业", "小明现在是产品经理"),
        ("我是做销售的", "身份", "职业", "小明是做销售的"),
        ("我叫阿明", "身份", "昵称", "小明的名字是阿明"),
        ("你们可以叫我明明", "身份", "昵称", "小明的昵称是明明"),
        ("我的生日是3月15号", "日期", "生日", "小明的生日是3月15号"),
        ("十月一日是我生日哦", "日期", "生日", "小明的生日是十月一日"),
        ("我对花生过敏，吃了会起疹子", "身份", "", "小明对花生过敏"),
        ("我最喜欢吃火锅了", "偏好", "", "小明最喜欢吃火锅了"),
        ("我爱吃甜的", "偏好", "", "小明爱吃甜的"),
        ("我不喜欢香菜", "偏好", "", "小明不喜欢香菜"),
        ("我真的很讨厌下雨天", "偏好", "", "小明真的很讨厌下雨天"),
        ("我手机号是 138-0013-8000，有事打给我", "身份", "手机号", "小明的手机号是13800138000"),
        ("我妈是小学老师", "身份", "妈妈职业", "小明的妈妈是小学老师"),
        ("我老婆下周来杭州看我", "关系", "", "小明的老婆下周来杭州看小明"),
        ("我有两个孩子", "关系", "", "小明有两个孩子"),
        ("我养了一只橘猫，叫咪咪", "关系", "", "小明养了一只橘猫"),
        ("我最近在学日语", "习惯", "", "小明最近在学日语"),
    ],
)
def test_each_rule_writes_a_third_person_fact(text, kind, slot, content):
    fact = only_fact(text)

    assert (fact.person_ref, fact.kind, fact.slot, fact.content) == ("u1001", kind, slot, content)
    assert fact.kind in FACT_KINDS
    assert fact.supersedes == 0
    assert "我" not in fact.content


def test_a_clause_without_subject_continues_the_speakers_sentence():
    facts = facts_of(said("我住在杭州，也喜欢吃火锅，新工作是产品经理"))

    assert [f.content for f in facts] == ["小明住在杭州", "小明也喜欢吃火锅", "小明的新工作是产品经理"]


def test_the_subject_is_whoever_spoke():
    (fact,) = facts_of(said("我不吃辣", HONG))

    assert (fact.person_ref, fact.content) == ("u1002", "小红不吃辣")


def test_moving_supersedes_the_known_residence():
    known = [KnownFact(7, "u1001", "小明住在北京", "居住地"), KnownFact(9, "u1002", "小红住在上海", "居住地")]

    fact = only_fact("我上个月搬到杭州了", known)

    assert (fact.slot, fact.supersedes) == ("居住地", 7)


def test_no_change_cue_means_no_supersedes():
    known = [KnownFact(7, "u1001", "小明住在北京", "居住地")]

    assert only_fact("我住在杭州", known).supersedes == 0


def test_a_changed_preference_supersedes_the_fact_about_the_same_thing():
    known = [KnownFact(3, "u1001", "小明喜欢香菜"), KnownFact(4, "u1001", "小明喜欢猫")]

    fact = only_fact("我现在不喜欢香菜了", known)

    assert (fact.kind, fact.supersedes) == ("偏好", 3)


def test_a_changed_job_supersedes_only_the_same_persons_slot():
    known = [KnownFact(5, "u1002", "小红是老师", "职业")]

    assert only_fact("我现在换工作了，我是设计师", known).supersedes == 0


def test_a_fact_already_known_is_not_repeated():
    known = [KnownFact(7, "u1001", "小明住在杭州", "居住地")]

    assert facts_of(said("我住在杭州"), known=known) == []


@pytest.mark.parametrize(
    "text",
    [
        "他不喜欢香菜",
        "听说老王是律师",
        "我在学校门口等你",
        "我叫了外卖",
        "我是学生会主席",
        "你喜欢吃火锅吗？",
        "我喜欢你",
        "如果我住在海边就好了",
        "哈哈",
    ],
)
def test_no_fact_from_third_person_gossip_or_non_statements(text):
    assert facts_of(said(text)) == []


def test_no_fact_from_assistant_lines_or_unknown_speakers():
    lines = [
        bot("我住在云端，我喜欢猫"),
        DialogueLine("user", None, "路人", "我住在杭州"),
        DialogueLine("user", "u9999", "陌生人", "我是医生"),
    ]

    assert facts_of(*lines) == []


def test_the_statement_half_of_a_question_sentence_is_kept():
    assert [f.content for f in facts_of(said("我喜欢火锅，你呢？"))] == ["小明喜欢火锅"]


def test_general_statements_become_knowledge():
    extraction = HeuristicExtractor().extract(
        [bot("火锅起源于重庆，是一种传统美食。"), said("我觉得杭州是一个好地方吗？"), said("北京是中国的首都")],
        PEOPLE,
        [],
    )

    assert extraction.facts == []
    assert extraction.knowledge == ["火锅起源于重庆，是一种传统美食", "北京是中国的首都"]


def test_first_person_sentences_are_not_knowledge():
    assert HeuristicExtractor().extract([said("我家位于西湖边")], PEOPLE, []).knowledge == []


def test_assistant_markup_is_ignored():
    extraction = HeuristicExtractor().extract([bot("<think>地球是一种行星</think><say>好的</say>")], PEOPLE, [])

    assert extraction.knowledge == []


# --- other people, events and plans -------------------------------------------------------


def facts_in(*texts: str, who: Participant = MING, known=()) -> list[tuple[str, str, str, str]]:
    return [(f.person_ref, f.kind, f.slot, f.content) for f in facts_of(*(said(t, who) for t in texts), known=known)]


@pytest.mark.parametrize(
    ("text", "kind", "slot", "content"),
    [
        ("我表哥今年二十九岁", "身份", "表哥年龄", "小明的表哥今年二十九岁"),
        ("我的室友在苏州上班", "身份", "室友工作地", "小明的室友在苏州上班"),
        ("我舅舅的老家是湖南长沙", "身份", "舅舅家乡", "小明的舅舅的老家是湖南长沙"),
        ("我领导的生日是11月3号", "日期", "领导生日", "小明的领导的生日是11月3号"),
        ("我室友身高有185厘米", "身份", "室友身高", "小明的室友的身高有185厘米"),
        ("我同学是做律师的", "身份", "同学职业", "小明的同学是做律师的"),
        ("我姐姐的学历是硕士", "身份", "姐姐学历", "小明的姐姐的学历是硕士"),
        ("我邻居的电话是13912345678", "身份", "邻居电话", "小明的邻居的电话是13912345678"),
        ("我老板的邮箱是boss.wang@example.com", "身份", "老板邮箱", "小明的老板的邮箱是boss.wang@example.com"),
        ("我闺蜜特别爱吃榴莲", "偏好", "", "小明的闺蜜特别爱吃榴莲"),
        ("外婆的爱好是打太极拳", "偏好", "", "小明的外婆的爱好是打太极拳"),
        ("我的下属叫赵一鸣", "关系", "", "小明的下属叫赵一鸣"),
    ],
)
def test_facts_about_the_speakers_circle_are_stored_on_the_speaker(text, kind, slot, content):
    assert facts_in(text) == [("u1001", kind, slot, content)]


def test_a_named_relative_is_a_relation_and_the_subject_of_what_follows():
    assert facts_in("刘建国是我的表弟，其家乡是江西南昌") == [
        ("u1001", "关系", "", "小明的表弟是刘建国"),
        ("u1001", "身份", "刘建国家乡", "小明的表弟刘建国的家乡是江西南昌"),
    ]


def test_a_name_introduced_earlier_in_the_batch_is_recognised_later():
    assert facts_in("周晓琳是我的同事", "周晓琳喜欢攀岩，她今年三十一岁") == [
        ("u1001", "关系", "", "小明的同事是周晓琳"),
        ("u1001", "偏好", "", "小明的同事周晓琳喜欢攀岩"),
        ("u1001", "身份", "周晓琳年龄", "小明的同事周晓琳今年三十一岁"),
    ]


def test_a_name_from_a_known_fact_is_recognised():
    known = [KnownFact(4, "u1001", "小明的表姐是孙雨桐")]

    assert facts_in("孙雨桐在成都工作", known=known) == [
        ("u1001", "身份", "孙雨桐工作地", "小明的表姐孙雨桐在成都工作"),
    ]


def test_an_unintroduced_person_is_kept_on_the_speaker_with_their_name():
    assert facts_in("郑凯文的联系电话是18600001111") == [("u1001", "身份", "郑凯文电话", "郑凯文的联系电话是18600001111")]


def test_a_statement_about_another_participant_is_theirs():
    assert facts_in("小红住在上海") == [("u1002", "身份", "居住地", "小红住在上海")]
    assert facts_in("小红是我的同学，她是护士") == [
        ("u1001", "关系", "", "小明的同学是小红"),
        ("u1002", "身份", "职业", "小红是护士"),
    ]


def test_a_clause_without_subject_continues_the_third_party():
    assert facts_in("我朋友喜欢猫，也喜欢狗") == [
        ("u1001", "偏好", "", "小明的朋友喜欢猫"),
        ("u1001", "偏好", "", "小明的朋友也喜欢狗"),
    ]


def test_a_changed_attribute_of_a_relative_supersedes_the_same_slot():
    known = [KnownFact(8, "u1001", "小明的表哥在杭州上班", "表哥工作地"), KnownFact(9, "u1001", "小明在杭州上班", "工作地")]

    (fact,) = facts_of(said("我表哥现在在南京上班了"), known=known)

    assert (fact.slot, fact.supersedes) == ("表哥工作地", 8)


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (("读书分享会的地点是西湖图书馆",), [("事件", "读书分享会的地点是西湖图书馆")]),
        (("我下周要参加公司年会",), [("事件", "小明下周要参加公司年会")]),
        (
            ("我将要参加的城市马拉松，它的时间是4月20日早上七点",),
            [("事件", "小明将要参加城市马拉松"), ("事件", "小明将要参加的城市马拉松的时间是4月20日早上七点")],
        ),
        (
            ("我打算参加摄影沙龙", "摄影沙龙的规模是三十人"),
            [("事件", "小明打算参加摄影沙龙"), ("事件", "小明打算参加的摄影沙龙的规模是三十人")],
        ),
        (("我明天要去广州出差",), [("事件", "小明明天要去广州出差")]),
        (("我刚才逛的那个商场是万象城",), [("事件", "小明刚才逛的那个商场是万象城")]),
    ],
)
def test_events_and_plans_are_the_speakers(texts, expected):
    facts = facts_of(*(said(t) for t in texts))

    assert [(f.kind, f.content) for f in facts] == expected
    assert {f.person_ref for f in facts} == {"u1001"}


@pytest.mark.parametrize(
    ("text", "kind", "slot", "content"),
    [
        ("我的手机是华为P60", "身份", "手机", "小明的手机是华为P60"),
        ("我开的车是比亚迪", "身份", "汽车", "小明开的车是比亚迪"),
        ("我家里的冰箱是海尔的", "身份", "冰箱", "小明家里的冰箱是海尔的"),
        ("我平时用的是兰蔻的粉底", "习惯", "", "小明平时用的是兰蔻的粉底"),
        ("我今年二十六岁", "身份", "年龄", "小明今年二十六岁"),
        ("我的老家是甘肃天水", "身份", "家乡", "小明的老家是甘肃天水"),
        ("我特别中意索尼的降噪耳机", "偏好", "", "小明特别中意索尼的降噪耳机"),
        ("九阳豆浆机是我很喜欢的小家电", "偏好", "", "九阳豆浆机是小明很喜欢的小家电"),
        ("这款戴尔显示器真不错，颜色很准", "偏好", "", "小明觉得这款戴尔显示器真不错"),
        ("我觉得西溪湿地真是个好地方", "偏好", "", "小明觉得西溪湿地真是个好地方"),
    ],
)
def test_possessions_ages_and_opinions_of_the_speaker(text, kind, slot, content):
    assert facts_in(text) == [("u1001", kind, slot, content)]


@pytest.mark.parametrize(
    "text",
    [
        "我表弟是医生吗？",
        "你表弟的老家是哪里",
        "我同事几岁了",
        "如果我表哥在北京上班就好了",
        "要是年会的地点是三亚就好了",
        "听说我舅舅的老家是湖南",
        "他说他表妹喜欢画画",
        "我妈说“我住在北京”",
        "我同事不是医生",
        "我同事不在上海上班",
        "他今年三十岁",
        "今天天气真不错",
        "我的意思是明天再说",
        "我的梦想是当医生",
        "这个问题的时间是不够的",
        "那边的时间是下午",
        "高明的办法是先睡一觉",
        "马上就到了",
        "我准备睡觉了",
    ],
)
def test_no_fact_from_questions_conditions_hearsay_quotes_or_negations(text):
    assert facts_of(said(text)) == []


def test_every_slot_has_two_to_six_characters():
    texts = ["我的车是特斯拉", "刘建国是我的表弟，其工作地是江苏苏州", "我的好朋友的工作地点是深圳", "欧阳明月的生日是3月3日"]

    slots = [f.slot for f in facts_of(*(said(t) for t in texts))]

    assert slots and all(s == "" or 2 <= len(s) <= 6 for s in slots)


def test_facts_of_others_never_come_from_assistant_lines():
    lines = [
        bot("张伟是我的表弟，其家乡是北京。读书会的地点是图书馆。我表哥今年三十岁。"),
        DialogueLine("user", None, "路人", "我表哥今年三十岁"),
    ]

    assert facts_of(*lines) == []


def test_an_opinion_is_read_only_at_the_head_of_a_message():
    facts = facts_in("索尼这款耳机真不错，降噪很强。就是续航有点短，不过音质真的很棒。")

    assert facts == [("u1001", "偏好", "", "小明觉得索尼这款耳机真不错")]
    assert facts_in("这类是很好玩，但是我更喜欢下棋") == [("u1001", "偏好", "", "小明更喜欢下棋")]


def test_a_time_word_before_the_relative_stays_with_the_predicate():
    assert facts_in("最近我的男朋友生病了") == [("u1001", "关系", "", "小明的男朋友最近生病了")]
    assert facts_in("这周六，我老公要去上海") == [("u1001", "关系", "", "小明的老公这周六要去上海")]


def test_a_negative_statement_about_a_relative_stays_negative():
    assert facts_in("我爸不吃香菜") == [("u1001", "偏好", "", "小明的爸爸不吃香菜")]
    assert facts_in("我表弟不是医生") == [("u1001", "关系", "", "小明的表弟不是医生")]


CHAT = [
    said("我下个月要搬到杭州了，新工作是产品经理。"),
    said("哇，恭喜！杭州的房租贵吗？", HONG),
    said("还行，我在西湖区附近找了个一居室，离公司很近。"),
    bot("<think>用户在聊搬家</think>听起来不错，搬家需要我帮忙整理清单吗？"),
    said("好的", HONG),
    said("我周末想去吃火锅，你们谁一起？", HONG),
    said("我对花生过敏，火锅蘸料要注意一下。"),
]


def test_summary_keeps_whole_sentences_in_their_original_order():
    draft = HeuristicSummariser().summarise(CHAT, PEOPLE)

    assert draft is not None
    assert 0 < len(draft.summary) <= 120
    kept = [re.sub(r"^[^：]{1,8}：", "", s) for s in re.findall(r"[^。！？]+[。！？]", draft.summary)]
    body = "".join(line.content for line in CHAT)
    positions = [body.find(s) for s in kept]
    assert len(kept) >= 3 and -1 not in positions
    assert positions == sorted(positions)
    assert draft.summary.startswith("小明：")
    assert "小红：" in draft.summary
    assert "think" not in draft.summary and "用户在聊" not in draft.summary


def test_summary_has_three_to_six_distinct_cues():
    draft = HeuristicSummariser().summarise(CHAT, PEOPLE)

    assert 3 <= len(draft.cues) <= 6
    assert len(set(draft.cues)) == len(draft.cues)
    assert "杭州" in draft.cues
    assert all(2 <= len(c) <= 8 for c in draft.cues)


def test_summary_is_deterministic():
    assert HeuristicSummariser().summarise(CHAT, PEOPLE) == HeuristicSummariser().summarise(CHAT, PEOPLE)


def test_a_short_body_has_no_summary():
    lines = [said("在吗"), said("好的"), bot("嗯嗯"), said("今天好热啊", HONG)]

    assert HeuristicSummariser().summarise(lines, PEOPLE) is None


def test_punctuation_alone_has_no_summary():
    lines = [said("！！！！！！！！！！"), said("？？？？？？？？？？？？", HONG), said("。。。。。。。。。。。。。")]

    assert HeuristicSummariser().summarise(lines, PEOPLE) is None


def test_one_long_sentence_is_cut_to_fit():
    line = said("今天" + "，".join(f"我们去了第{i}家店买了很多好吃的东西" for i in range(12)) + "。")

    draft = HeuristicSummariser().summarise([line], PEOPLE)

    assert draft is not None and len(draft.summary) <= 120
    assert draft.summary.startswith("小明：今天")
    assert draft.cues


def test_labels():
    assert HeuristicSummariser.label == HeuristicExtractor.label == "heuristic"


# --- the pipeline writes them where they belong --------------------------------------------


@pytest.mark.django_db
def test_an_extraction_batch_stores_facts_with_the_right_person_and_kind(settings):
    from memory import pipeline, services
    from memory.models import Fact

    settings.FACT_EXTRACT_TRIGGER_MESSAGES = 4
    settings.FACT_EXTRACT_BATCH_MESSAGES = 12
    ming = services.resolve_person(platform="qq", external_id="u1001", name="小明", at=1_000)
    hong = services.resolve_person(platform="qq", external_id="u1002", name="小红", at=1_000)
    stream = services.resolve_stream(platform="qq", kind="group", external_id="g1", name="g1")
    for i, (role, person, text) in enumerate([
        ("user", ming, "刘建国是我的表弟，其家乡是江西南昌。"),
        ("user", hong, "哈哈，我下周要参加读书会。"),
        ("user", ming, "小红住在上海吧？不对，小红住在苏州。"),
        ("assistant", None, "我表哥今年三十岁，读书会的地点是图书馆。"),
        ("user", hong, "读书会的地点是西湖图书馆"),
    ]):
        services.append_message(stream_id=stream.pk, role=role, content=text,
                                sender_person_id=person.pk if person else None, at=2_000 + i)

    outcome = pipeline.extract_stream(stream_id=stream.pk, extractor=HeuristicExtractor(), at=10_000)

    rows = {(f.person_id, f.kind, f.slot, f.content) for f in Fact.objects.all()}
    assert outcome.status == "written"
    assert rows == {
        (ming.pk, "关系", "", "小明的表弟是刘建国"),
        (ming.pk, "身份", "刘建国家乡", "小明的表弟刘建国的家乡是江西南昌"),
        (hong.pk, "事件", "", "小红下周要参加读书会"),
        (hong.pk, "身份", "居住地", "小红住在苏州"),
        (hong.pk, "事件", "", "小红下周要参加的读书会的地点是西湖图书馆"),
    }


@pytest.mark.django_db
def test_two_values_for_a_relatives_attribute_make_a_slot_conflict(settings):
    from memory import pipeline, selectors, services
    from memory.models import Fact

    settings.FACT_EXTRACT_TRIGGER_MESSAGES = 2
    settings.FACT_EXTRACT_BATCH_MESSAGES = 2
    ming = services.resolve_person(platform="qq", external_id="u1001", name="小明", at=1_000)
    stream = services.resolve_stream(platform="qq", kind="direct", external_id="d1", name="d1")
    for i, text in enumerate(["我上司今年37岁", "嗯嗯", "我上司今年38岁", "好的"]):
        services.append_message(stream_id=stream.pk, role="user", content=text, sender_person_id=ming.pk, at=2_000 + i)

    first = pipeline.extract_stream(stream_id=stream.pk, extractor=HeuristicExtractor(), at=10_000)
    second = pipeline.extract_stream(stream_id=stream.pk, extractor=HeuristicExtractor(), at=20_000)

    ids = [*first.fact_ids, *second.fact_ids]
    assert [Fact.objects.get(pk=i).slot for i in ids] == ["上司年龄", "上司年龄"]
    assert selectors.conflict_group_keys(person_ids=[ming.pk]) == [(ming.pk, "上司年龄")]
    members = selectors.conflict_members([(ming.pk, "上司年龄")])[(ming.pk, "上司年龄")]
    assert members == [(ids[0], "小明的上司今年37岁"), (ids[1], "小明的上司今年38岁")]
