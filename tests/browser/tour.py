"""Every page of the console, with memory data to show on it: shared by the translation
test and ``make screenshots``.

``seed(language)`` writes memory whose text cannot be mistaken for interface text in that
language: English UI → memory without Chinese characters; Chinese UI → memory without
Latin letters. ``pages(ids)`` lists ``(name, path, permission)`` of every console page.
"""
from __future__ import annotations

from django.urls import reverse

from tests.browser import tour_turns

HOUR = 3_600_000

TEXT = {
    # language of the UI → memory text written in the *other* script (or none)
    "en": {
        "desktop": "Desktop", "owner": "Owner", "alice": "Alice", "bob": "Bob", "direct": "Alice DM", "group": "Book club",
        "messages": ["I live in Hangzhou", "I like cats", "I am allergic to peanuts", "see you tomorrow"],
        "group_message": "hello everyone", "summary": "Alice talked about her home and her cat",
        "cues": ["Hangzhou", "cat"], "facts": ["Alice lives in Hangzhou", "Alice lives in Shanghai",
                                                "Alice likes cats", "Bob is in a good mood", "Bob moved away"],
        "kinds": ["identity", "identity", "preference", "state", "event"], "slot": "home",
        "knowledge": ["Cats are carnivores", "Green tea is a tea"], "query": "where do you live",
        "import": "Corgis were bred to herd cattle.\n\nShiba Inu come from Japan.", "origin": "trivia",
    },
    "zh-hans": {
        "desktop": "桌面", "owner": "主人", "alice": "小林", "bob": "阿杰", "direct": "小林私聊", "group": "读书群",
        "messages": ["我住在杭州", "我喜欢猫", "我对花生过敏", "明天见"],
        "group_message": "大家好", "summary": "小林聊到住处和猫",
        "cues": ["杭州", "猫"], "facts": ["小林住在杭州", "小林住在上海", "小林喜欢猫", "阿杰心情不错", "阿杰搬走了"],
        "kinds": ["身份", "身份", "偏好", "状态", "事件"], "slot": "住址",
        "knowledge": ["猫是肉食动物", "龙井茶是一种绿茶"], "query": "你住在哪里",
        "import": "柯基原本是牧牛犬。\n\n柴犬原产于日本。", "origin": "小知识",
    },
}


def seed(language: str, *, now: int) -> dict:
    """Memory in every layer plus finished jobs (import, evaluation, comparison) and an operation."""
    from curation import services as curation
    from memory import pipeline, services
    from memory.models import Turn
    from tuning import evaluation
    from tuning.evaluation import QueryVectors

    t = TEXT[language]
    from memory.models import Person, Stream

    # The rows every database starts with (the owner, the desktop stream) get names in the memory's script.
    Stream.objects.filter(display_name="桌面").update(display_name=t["desktop"])
    Person.objects.filter(display_name="主人").update(display_name=t["owner"])
    alice = services.resolve_person(platform="qq", external_id="alice", name=t["alice"], at=now - 100 * HOUR)
    bob = services.resolve_person(platform="qq", external_id="bob", name=t["bob"], at=now - 100 * HOUR)
    direct = services.resolve_stream(platform="qq", kind="direct", external_id="alice", name=t["direct"])
    group = services.resolve_stream(platform="qq", kind="group", external_id="g1", name=t["group"])
    messages = []
    for i, text in enumerate(t["messages"]):
        m, _ = services.append_message(stream_id=direct.pk, role="user" if i % 2 == 0 else "assistant", content=text,
                                       sender_person_id=alice.pk if i % 2 == 0 else None, at=now - (50 - i) * HOUR)
        messages.append(m)
    services.append_message(stream_id=group.pk, role="user", content=t["group_message"], sender_person_id=bob.pk,
                            at=now - 10 * HOUR)
    episode = services.add_episode(stream_id=direct.pk, summary=t["summary"], cues=t["cues"], started_at=now - 50 * HOUR,
                                   ended_at=now - 48 * HOUR, message_ids=[m.pk for m in messages[:2]],
                                   at=now - 47 * HOUR)
    facts = []
    for i, (content, kind) in enumerate(zip(t["facts"], t["kinds"], strict=True)):
        person = alice if i < 3 else bob
        facts.append(services.add_fact(person_id=person.pk, content=content, kind=kind,
                                       slot=t["slot"] if i < 2 else "", origin_kind="direct" if i < 3 else "group",
                                       at=now - (40 - 5 * i) * HOUR).fact_id)
    curation.pin_fact(fact_id=facts[2], user="operator", at=now - 2 * HOUR)
    curation.invalidate_fact(fact_id=facts[4], user="operator", at=now - HOUR)
    knowledge = [services.add_knowledge(content=k, source="import", at=now - 10 * HOUR) for k in t["knowledge"]]
    services.link_together(refs=[("fact", facts[0]), ("fact", facts[2]), ("episode", episode.pk)], at=now - 30 * HOUR)
    services.link_together(refs=[("fact", facts[2]), ("knowledge", knowledge[0])], at=now - 30 * HOUR)
    services.sweep(at=now)
    Turn.objects.create(stream=direct, speaker=alice, at=now - HOUR, text=t["query"], stream_kind="direct",
                        present_person_ids=[alice.pk], pool=[], prompt_fact_ids=[facts[0]], confirmed_at=now - HOUR)
    imported = pipeline.start_import(text=t["import"], origin_name=t["origin"], user="staff", enqueue=False)
    pipeline.run_import(job_id=imported.pk, embed=False)
    evaluate = evaluation.submit_evaluation(evaluation.resolve_target(), max_turns=10, user="staff")
    evaluation.run_job(evaluate.pk, vectors=QueryVectors(None))
    compare = evaluation.submit_comparison(evaluation.resolve_target(),
                                           evaluation.resolve_target(params={"fact_recall_limit": 3}), max_turns=10)
    evaluation.run_job(compare.pk, vectors=QueryVectors(None))
    return {"alice": alice, "direct": direct, "group": group, "episode": episode, "facts": facts,
            "knowledge": knowledge, "jobs": [imported.pk, evaluate.pk, compare.pk], "query": t["query"],
            "turns": tour_turns.seed(language, now=now)}


def pages(ids: dict) -> list[tuple[str, str, str]]:
    """``(name, path, permission)`` of every console page (the permission its view checks)."""
    view = "memory.view_fact"
    imported, evaluate, compare = ids["jobs"]
    return [
        ("dashboard", reverse("console:dashboard"), view),
        ("streams", reverse("console:streams"), "memory.view_message"),
        ("stream", reverse("console:stream", args=[ids["direct"].pk]), "memory.view_message"),
        ("episodes", reverse("console:episodes"), "memory.view_episode"),
        ("facts", reverse("console:facts"), view),
        ("facts-search", reverse("console:facts") + f"?q={ids['query']}", view),
        ("fact", reverse("console:fact", args=[ids["facts"][0]]), view),
        ("fact-invalid", reverse("console:fact", args=[ids["facts"][4]]), view),
        ("conflicts", reverse("curation:conflicts"), view),
        ("operations", reverse("curation:operations"), "curation.view_factoperation"),
        ("knowledge", reverse("console:knowledge"), "memory.view_knowledge"),
        ("imports", reverse("console:imports"), "memory.import_knowledge"),
        ("graph", reverse("console:graph"), "memory.preview_association"),
        ("playground", reverse("console:playground")
         + f"?stream={ids['direct'].pk}&speaker={ids['alice'].pk}&text={ids['query']}", "memory.preview_recall"),
        ("jobs", reverse("console:jobs"), "memory.view_job"),
        ("job", reverse("console:job", args=[imported]), "memory.view_job"),
        ("tuning", reverse("tuning:index"), "tuning.tune_retrieval"),
        ("tuning-report", reverse("tuning:job", args=[evaluate]), "tuning.tune_retrieval"),
        ("tuning-compare", reverse("tuning:job", args=[compare]), "tuning.tune_retrieval"),
        ("help", reverse("console:help"), view),
        *tour_turns.pages(ids),
    ]


#: Page text that is not interface text: the language switch lists every language by its own name.
VISIBLE_TEXT_JS = """() => {
  document.querySelectorAll('select[name=language], .who > span, code').forEach(e => e.remove());
  return document.body.innerText;
}"""
