"""Every page of the console, with memory data to show on it: shared by the two-language and
phone test and ``make screenshots``.

``seed(language)`` writes memory whose text cannot be mistaken for interface text in that
language: English UI → memory without Chinese characters; Chinese UI → memory without
Latin letters. What the system itself names — fact kinds, operations, jobs, platforms —
is stored as the system stores it, so an English page that shows one untranslated fails.
The seed holds a journal entry of every operation, a job of every kind and an API token,
so their titles are checked too. ``pages(ids)`` lists every console page as a :class:`Page`;
``open_page`` opens one (a no-JavaScript confirmation page is the answer to a POST).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.urls import reverse

from tests.browser import tour_turns

HOUR = 3_600_000

TEXT = {
    # language of the UI → memory text written in the *other* script (or none)
    "en": {
        "desktop": "Desktop", "owner": "Owner", "alice": "Alice", "bob": "Bob", "direct": "Alice DM", "group": "Book club",
        "messages": ["I live in Hangzhou", "I like cats", "I am allergic to peanuts", "see you tomorrow"],
        "group_message": "hello everyone", "summary": "Alice talked about her home and her cat",
        "cues": ["Hangzhou", "cat"],
        "facts": ["Alice lives in Hangzhou", "Alice lives in Shanghai", "Alice likes cats", "Bob is in a good mood",
                  "Bob moved away", "Bob works at a bakery", "Bob works at a bank", "Alice drinks tea",
                  "Alice was born on May 1", "Alice and Bob are friends", "Bob keeps a diary"],
        "slots": ["home", "job"], "rewrite": "Alice drinks coffee", "mood": "Bob is in a great mood",
        "knowledge": ["Cats are carnivores", "Green tea is a tea"], "query": "where do you live",
        "import": "Corgis were bred to herd cattle.\n\nShiba Inu come from Japan.", "origin": "trivia",
        "token": "reading-bot", "profile": "narrow",
    },
    "zh-hans": {
        "desktop": "桌面", "owner": "主人", "alice": "小林", "bob": "阿杰", "direct": "小林私聊", "group": "读书群",
        "messages": ["我住在杭州", "我喜欢猫", "我对花生过敏", "明天见"],
        "group_message": "大家好", "summary": "小林聊到住处和猫",
        "cues": ["杭州", "猫"],
        "facts": ["小林住在杭州", "小林住在上海", "小林喜欢猫", "阿杰心情不错", "阿杰搬走了", "阿杰在面包店上班",
                  "阿杰在银行上班", "小林爱喝茶", "小林五月一日出生", "小林和阿杰是朋友", "阿杰每天写日记"],
        "slots": ["住址", "工作"], "rewrite": "小林爱喝咖啡", "mood": "阿杰心情很好",
        "knowledge": ["猫是肉食动物", "龙井茶是一种绿茶"], "query": "你住在哪里",
        "import": "柯基原本是牧牛犬。\n\n柴犬原产于日本。", "origin": "小知识",
        "token": "读书机器人", "profile": "窄一点",
    },
}
#: The kinds of the facts above, as the system stores them (memory.engine.decay; "未分类" = none given).
KINDS = ["身份", "身份", "偏好", "状态", "事件", "身份", "身份", "习惯", "日期", "关系", "未分类"]


def seed(language: str, *, now: int) -> dict:
    """Memory in every layer, a journal entry of every operation, a job of every kind, a token and a profile."""
    from curation import services as curation
    from memory import pipeline, services
    from memory.api.auth import issue_token
    from memory.models import Job, Person, Stream, Turn
    from tuning import evaluation
    from tuning import services as tuning
    from tuning.evaluation import QueryVectors

    t = TEXT[language]
    # The rows every database starts with (the owner, the desktop stream) get names in the memory's script.
    Stream.objects.filter(display_name="桌面").update(display_name=t["desktop"])
    Person.objects.filter(display_name="主人").update(display_name=t["owner"])
    alice = services.resolve_person(platform="qq", external_id="10001", name=t["alice"], at=now - 100 * HOUR)
    bob = services.resolve_person(platform="qq", external_id="10002", name=t["bob"], at=now - 100 * HOUR)
    direct = services.resolve_stream(platform="qq", kind="direct", external_id="10001", name=t["direct"])
    group = services.resolve_stream(platform="qq", kind="group", external_id="20001", name=t["group"])
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
    home, job = t["slots"]
    slots = [home, home, "", "", "", job, job, "", "", "", ""]
    facts = []
    for i, (content, kind, slot) in enumerate(zip(t["facts"], KINDS, slots, strict=True)):
        person = bob if i in (3, 4, 5, 6, 10) else alice
        facts.append(services.add_fact(person_id=person.pk, content=content, kind=kind, slot=slot,
                                       origin_kind="group" if person == bob else "direct",
                                       source=f"extract:stream{direct.pk}" if i == 0 else "api",
                                       at=now - (40 - 2 * i) * HOUR).fact_id)
    # one journal entry of every operation: pin, invalidate, unpin, restore, replace, adjudicate, undo, supersede
    pinned = curation.pin_fact(fact_id=facts[2], user="operator", at=now - 9 * HOUR)
    curation.invalidate_fact(fact_id=facts[4], user="operator", at=now - 8 * HOUR)
    curation.pin_fact(fact_id=facts[8], user="operator", at=now - 7 * HOUR)
    curation.unpin_fact(fact_id=facts[8], user="operator", at=now - 6 * HOUR)
    curation.invalidate_fact(fact_id=facts[9], user="operator", at=now - 5 * HOUR)
    curation.restore_fact(fact_id=facts[9], user="operator", at=now - 4 * HOUR)
    curation.replace_fact(fact_id=facts[7], content=t["rewrite"], user="operator", at=now - 3 * HOUR)
    curation.keep_only(keep_fact_id=facts[5], user="operator", at=now - 2 * HOUR)
    undone = curation.invalidate_fact(fact_id=facts[10], user="operator", at=now - 2 * HOUR)
    curation.undo_operation(operation_id=undone.pk, user="reviewer", at=now - HOUR)
    services.add_fact(person_id=bob.pk, content=t["mood"], kind="状态", supersedes=facts[3], origin_kind="group",
                      actor="auto", at=now - HOUR)
    knowledge = [services.add_knowledge(content=k, source="import", at=now - 10 * HOUR) for k in t["knowledge"]]
    services.link_together(refs=[("fact", facts[0]), ("fact", facts[2]), ("episode", episode.pk)], at=now - 30 * HOUR)
    services.link_together(refs=[("fact", facts[2]), ("knowledge", knowledge[0])], at=now - 30 * HOUR)
    services.sweep(at=now)
    Turn.objects.create(stream=direct, speaker=alice, at=now - HOUR, text=t["query"], stream_kind="direct",
                        present_person_ids=[alice.pk], pool=[], prompt_fact_ids=[facts[0]], confirmed_at=now - HOUR)
    imported = pipeline.start_import(text=t["import"], origin_name=t["origin"], user="staff", enqueue=False)
    pipeline.run_import(job_id=imported.pk, embed=False)
    tuning.save_profile(t["profile"], {"fact_recall_limit": 3})
    evaluate = evaluation.submit_evaluation(evaluation.resolve_target(), max_turns=10, user="staff")
    evaluation.run_job(evaluate.pk, vectors=QueryVectors(None))
    compare = evaluation.submit_comparison(evaluation.resolve_target(profile=t["profile"]),
                                           evaluation.resolve_target(params={"fact_recall_limit": 3}), max_turns=10)
    evaluation.run_job(compare.pk, vectors=QueryVectors(None))
    # the job kinds no page starts (a worker's diagnostics, older backfills), finished, and a failed one
    Job.objects.create(kind="backfill", status="done", progress=1, total=1, result={"facts": 2, "knowledge": 1, "messages": 4})
    Job.objects.create(kind="decay", status="done", progress=1, total=1, result={"frozen": 3})
    Job.objects.create(kind="tuning_probe", status="done", result={"profile": "default", "overrides": {}, "pid": 42})
    Job.objects.create(kind="import", status="failed", error="", params={"origin_name": t["origin"]})
    token, _secret = issue_token(t["token"], ["bot", "curation"])
    return {"alice": alice, "bob": bob, "owner": Person.objects.get(kind="owner"), "direct": direct, "group": group,
            "episode": episode, "facts": facts, "operation": pinned.pk, "messages": messages, "knowledge": knowledge, "token": token,
            "batch": imported.params["batch_id"],
            "jobs": [imported.pk, evaluate.pk, compare.pk], "query": t["query"],
            "turns": tour_turns.seed(language, now=now)}


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    perm: str  # the permission its view checks
    post: dict[str, str] = field(default_factory=dict)  # a confirmation page: the answer to this POST
    status: int = 200


def pages(ids: dict) -> list[Page]:
    """Every console page (the permission its view checks, the status it answers with)."""
    view = "memory.view_fact"
    imported, evaluate, compare = ids["jobs"]
    facts = ids["facts"]
    return [
        Page("dashboard", reverse("console:dashboard"), view),
        Page("workers", reverse("console:worker_health"), view),
        Page("streams", reverse("console:streams"), "memory.view_message"),
        Page("stream", reverse("console:stream", args=[ids["direct"].pk]) + "?q=" + ids["query"], "memory.view_message"),
        Page("episodes", reverse("console:episodes"), "memory.view_episode"),
        Page("episode", reverse("console:episode", args=[ids["episode"].pk]), "memory.view_episode"),
        Page("facts", reverse("console:facts"), view),
        Page("facts-search", reverse("console:facts") + f"?q={ids['query']}", view),
        Page("fact", reverse("console:fact", args=[facts[0]]), view),
        Page("fact-invalid", reverse("console:fact", args=[facts[4]]), view),
        Page("conflicts", reverse("curation:conflicts"), view),
        Page("operations", reverse("curation:operations"), "curation.view_factoperation"),
        Page("persons", reverse("console:persons"), "memory.view_person"),
        Page("person-export", reverse("console:person_export", args=[ids["alice"].pk]), "memory.export_person"),
        Page("owner-export", reverse("console:person_export", args=[ids["owner"].pk]), "memory.export_person"),
        Page("knowledge", reverse("console:knowledge"), "memory.view_knowledge"),
        Page("knowledge-search", reverse("console:knowledge") + "?q=" + TEXT_QUERY_KNOWLEDGE, "memory.view_knowledge"),
        Page("imports", reverse("console:imports"), "memory.import_knowledge"),
        Page("import-delete", reverse("console:import_delete", args=[ids["batch"]]), "memory.import_knowledge"),
        Page("graph", reverse("console:graph"), "memory.preview_association"),
        Page("graph-node", reverse("console:graph") + f"?node=fact:{facts[2]}&kind=fact&ref={facts[2]}",
             "memory.preview_association"),
        Page("playground", reverse("console:playground")
             + f"?stream={ids['direct'].pk}&speaker={ids['alice'].pk}&text={ids['query']}", "memory.preview_recall"),
        Page("playground-group", reverse("console:playground")
             + f"?stream={ids['group'].pk}&speaker={ids['bob'].pk}&text={ids['query']}", "memory.preview_recall"),
        Page("jobs", reverse("console:jobs"), "memory.view_job"),
        Page("job", reverse("console:job", args=[imported]), "memory.view_job"),
        Page("tuning", reverse("tuning:index"), "tuning.tune_retrieval"),
        Page("tuning-report", reverse("tuning:job", args=[evaluate]), "tuning.tune_retrieval"),
        Page("tuning-compare", reverse("tuning:job", args=[compare]), "tuning.tune_retrieval"),
        Page("tokens", reverse("console:tokens"), "memory.manage_api_tokens"),
        Page("help", reverse("console:help"), view),
        # forgetting: the preview of every kind of target, and the owner's refusal
        *(Page(f"forget-{target}", reverse("console:forget", args=[target, pk]), "memory.forget_memory")
          for target, pk in (("message", ids["messages"][2].pk), ("fact", facts[1]), ("episode", ids["episode"].pk),
                             ("person", ids["bob"].pk), ("stream", ids["group"].pk))),
        Page("forget-owner", reverse("console:forget", args=["person", ids["owner"].pk]), "memory.forget_memory",
             status=409),
        # the no-JavaScript confirmation pages
        Page("confirm-pin", reverse("curation:fact_action", args=[facts[0], "pin"]), "curation.curate_fact",
             post={"next": reverse("console:facts")}),
        Page("confirm-bulk", reverse("curation:bulk_action"), "curation.curate_fact",
             post={"action": "invalidate", "ids": str(facts[0])}),
        Page("confirm-keep", reverse("curation:keep", args=[facts[0]]), "curation.curate_fact",
             post={"next": reverse("curation:conflicts")}),
        Page("confirm-undo", reverse("curation:undo", args=[ids["operation"]]), "curation.undo_operation",
             post={"next": reverse("curation:operations")}),
        Page("confirm-revoke", reverse("console:token_revoke", args=[ids["token"].pk]), "memory.manage_api_tokens",
             post={"next": reverse("console:tokens")}),
        *tour_turns.pages(ids),
    ]


TEXT_QUERY_KNOWLEDGE = "%E7%8C%AB"  # 猫 (the English seed has no match: the empty result is a page too)


def open_page(page, base: str, target: Page):
    """Open ``target`` in a Playwright page: a GET, or the POST (with the page's CSRF token) whose answer it is."""
    if not target.post:
        return page.goto(f"{base}{target.path}")
    page.goto(f"{base}{reverse('console:help')}")  # any console page: its form carries the CSRF token
    with page.expect_navigation() as navigation:
        page.evaluate(
            """([action, fields]) => {
              const form = document.createElement("form");
              form.method = "post"; form.action = action;
              const token = document.querySelector("input[name=csrfmiddlewaretoken]").value;
              for (const [name, value] of Object.entries({...fields, csrfmiddlewaretoken: token})) {
                const input = document.createElement("input");
                input.type = "hidden"; input.name = name; input.value = value; form.appendChild(input);
              }
              document.body.appendChild(form); form.submit();
            }""",
            [target.path, target.post],
        )
    return navigation.value


#: Every interface text of the page, hidden or not (a phone layout hides table headers; a dialog's question
#: lives in hx-confirm): the title, each text node and the attributes people read or hear. Left out: code,
#: the language switch (each language by its own name) and the user name.
INTERFACE_TEXT_JS = """() => {
  const skip = 'script, style, noscript, code, select[name=language], .who > span';
  const out = [document.title];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.parentElement.closest(skip) && node.textContent.trim()) out.push(node.textContent.trim());
  }
  for (const el of document.body.querySelectorAll('[title], [placeholder], [aria-label], [hx-confirm], [data-label]')) {
    if (el.closest(skip)) continue;
    for (const name of ['title', 'placeholder', 'aria-label', 'hx-confirm', 'data-label']) {
      if (el.getAttribute(name)) out.push(el.getAttribute(name));
    }
  }
  return out.join('\\n');
}"""
#: How much wider than the window the page is (0 = fits; the page itself never scrolls sideways).
OVERFLOW_JS = "() => document.documentElement.scrollWidth - window.innerWidth"
#: True once the panels that load themselves (``hx-trigger="load"``: the worker card) have been swapped in.
SETTLED_JS = "() => !document.querySelector('[hx-trigger=load]')"
