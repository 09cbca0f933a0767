"""The turn pages' part of the tour (:mod:`tests.browser.tour`): labelled turns, an inspected turn, a fit.

Three people talk in their own private streams about ten topics each; every question is a real
turn (``prepare_turn`` + ``confirm_turn``) labelled with the fact that answers it, so a fit has
the 30 turns it needs (whole streams held out). Memory text follows the tour's rule: no Chinese
characters in the English seed, no Latin letters in the Chinese one.
"""
from __future__ import annotations

from django.urls import reverse

MINUTE = 60_000
TEXT = {
    "en": {
        "names": ["Carol", "Dave", "Erin"],
        "topics": [("tea", "drinks green tea every morning"), ("hiking", "goes hiking on weekends"),
                   ("guitar", "practises the guitar at night"), ("Japanese", "is learning Japanese"),
                   ("cat", "has an orange cat called Mochi"), ("coffee", "gave up coffee last month"),
                   ("swimming", "swims before work"), ("garden", "grows tomatoes in the garden"),
                   ("bakery", "works at a bakery"), ("piano", "took piano lessons as a child")],
        "ask": "how is the {topic} going", "say": "let us talk about {topic}", "extra": "{name} dislikes crowded trains",
        "kind": "preference",
    },
    "zh-hans": {
        "names": ["小周", "小吴", "小郑"],
        "topics": [("绿茶", "每天早上喝绿茶"), ("爬山", "周末喜欢去爬山"), ("吉他", "晚上在练吉他"),
                   ("日语", "最近在学日语"), ("橘猫", "养了一只橘猫叫年糕"), ("咖啡", "上个月戒了咖啡"),
                   ("游泳", "上班前去游泳"), ("番茄", "在院子里种番茄"), ("面包店", "在面包店上班"),
                   ("钢琴", "小时候学过钢琴")],
        "ask": "最近{topic}怎么样", "say": "说说{topic}吧", "extra": "{name}不喜欢挤地铁", "kind": "偏好",
    },
}


def seed(language: str, *, now: int) -> dict:
    """Thirty labelled turns, one of them labelled by hand (a "not relevant" and an added fact), and a finished fit."""
    from memory import recall, services
    from memory.models import Turn
    from tuning import fit, relevance
    from tuning.evaluation import QueryVectors

    t = TEXT[language]
    at = now - 30 * 60 * MINUTE
    turns: list[int] = []
    answers: dict[int, int] = {}
    extras: dict[int, int] = {}
    for i, name in enumerate(t["names"]):
        person = services.resolve_person(platform="qq", external_id=f"3000{i}", name=name, at=at)
        stream = services.resolve_stream(platform="qq", kind="direct", external_id=f"3000{i}", name=name)
        facts = {topic: services.add_fact(person_id=person.pk, content=f"{name} {phrase}", kind=t["kind"],
                                          origin_kind="direct", at=at).fact_id for topic, phrase in t["topics"]}
        extras[person.pk] = services.add_fact(person_id=person.pk, content=t["extra"].format(name=name), kind=t["kind"],
                                              origin_kind="direct", at=at).fact_id
        for topic, _phrase in t["topics"]:
            at += MINUTE
            services.append_message(stream_id=stream.pk, role="user", content=t["say"].format(topic=topic),
                                    sender_person_id=person.pk, at=at)
            ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=person.pk, text=t["ask"].format(topic=topic),
                                      at=at + 1000)
            recall.confirm_turn(turn_id=ctx.turn_id, at=at + 2000)
            relevance.set_label(turn_id=ctx.turn_id, fact_id=facts[topic], relevant=True, user="reviewer", at=at + 3000)
            turns.append(ctx.turn_id)
            answers[ctx.turn_id] = person.pk
    inspected = turns[0]
    turn = Turn.objects.get(pk=inspected)
    wrong = next((e["factId"] for e in turn.pool if e["factId"] not in turn.prompt_fact_ids), None)
    if wrong is not None:
        relevance.set_label(turn_id=inspected, fact_id=wrong, relevant=False, user="reviewer", at=now - MINUTE)
    relevance.set_label(turn_id=inspected, fact_id=extras[answers[inspected]], relevant=True, user="reviewer",
                        at=now - MINUTE)
    job = fit.submit_fit(budget=2, user="staff")
    fit.run_fit_job(job.pk, vectors=QueryVectors(None))
    return {"turn": inspected, "fit": job.pk}


def pages(ids: dict) -> list:
    """The turn pages, the labels page and the fit report, as :class:`tests.browser.tour.Page` rows."""
    from tests.browser.tour import Page

    turns = ids["turns"]
    return [
        Page("turns", reverse("console:turns"), "memory.view_turn"),
        Page("turns-labelled", reverse("console:turns") + "?labelled=yes", "memory.view_turn"),
        Page("turn", reverse("console:turn", args=[turns["turn"]]) + "?profile=reference", "memory.view_turn"),
        Page("labels", reverse("tuning:labels"), "tuning.label_relevance"),
        Page("tuning-fit", reverse("tuning:job", args=[turns["fit"]]), "tuning.tune_retrieval"),
    ]
