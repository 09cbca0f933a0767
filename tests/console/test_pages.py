"""Every console page renders its data; list pages run a fixed number of queries (no N+1).

Query counts of a request by a group member always start with the same four:
the session, the user, and the user's own and group permissions (read once and
cached on the user for the rest of the request, templates included).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from curation import services as curation
from memory import meta, services
from memory.fields import PAGE_SIZE
from memory.models import Fact
from tests.console.conftest import HOUR, NOW

pytestmark = pytest.mark.django_db

AUTH = 4  # session, user, user permissions, group permissions


CITIES = ["北京", "上海", "广州", "深圳", "成都", "重庆", "西安", "南京", "武汉", "长沙"]
ITEMS = ["茶叶", "围巾", "雨伞", "相机", "手表", "书包", "台灯"]


def _more_rows(memory_set, n=8):
    """Extra rows in every layer (distinct enough not to be merged as duplicates), so a
    per-row query would change the counts."""
    for i in range(n):
        content = f"阿杰在{CITIES[i % 10]}买了{ITEMS[i // 10 % 7]}"
        fid = services.add_fact(person_id=memory_set["bob"].pk, content=content, kind="事件",
                                origin_kind="group", at=NOW - i * HOUR).fact_id
        services.link_together(refs=[("fact", fid), ("fact", memory_set["facts"][0])], at=NOW - i * HOUR)
        services.append_message(stream_id=memory_set["group"].pk, role="user", content=f"第{i}条群消息",
                                sender_person_id=memory_set["bob"].pk, at=NOW - i * HOUR)


def test_dashboard_shows_layers_queues_vectors_edges_and_events(operator, memory_set, frozen_now,
                                                                django_assert_num_queries, monkeypatch):
    meta.meta_set("fact_extract_cursor", {str(memory_set["direct"].pk): memory_set["messages"][1].pk})
    services.emit_event("memory_ppr_timeout", {"graph": "memory"}, at=NOW)
    services.decay_edges(at=NOW)
    _more_rows(memory_set)
    # AUTH + 7 layer counts (facts and episodes aggregated, persons, streams, messages,
    # knowledge, nodes) + streams + pending counts + the cursor meta row + lag counts
    # (one statement, a range count per stream) + 2 × 3 vector coverage counts (total, without a vector, SQ8
    # pending: each answered by an index) + edge aggregate + last decay event + recent
    # events = AUTH + 20; the at-a-glance row: facts learnt today, conflict groups, jobs = 3 more
    # (its messages waiting are the queues' pending counts, added up).
    with django_assert_num_queries(AUTH + 23):
        response = operator.get(reverse("console:dashboard"))
    html = response.content.decode()
    assert response.status_code == 200
    assert ">memory_ppr_timeout<" not in html and "联想扩散超时" in html  # events in an operator's words
    assert "最近一次衰减" in html and "还没有运行过" not in html
    # The direct stream: cursor after the second of its 4 messages → lag 2; no cursor → every message.
    queues = {q["stream"].pk: q for q in response.context["queues"]}
    assert queues[memory_set["direct"].pk]["lag"] == 2
    assert queues[memory_set["group"].pk]["lag"] == 9
    assert queues[memory_set["direct"].pk]["pending"] == 2  # two of its messages were archived in the episode
    from memory.selectors import overview

    monkeypatch.setattr(overview, "LAG_BATCH", 1)  # a statement per stream: the same counts
    assert {q["stream"].pk: q["lag"] for q in overview.stream_queues()} == {pk: q["lag"] for pk, q in queues.items()}
    assert response.context["layers"]["facts_frozen"] == 1


def test_worker_health_is_unknown_without_a_broker_answer(operator, monkeypatch):
    monkeypatch.setattr("console.presenters.ping_workers", lambda timeout=0.5: {"status": "unknown", "workers": [],
                                                                          "error": "boom"})
    response = operator.get(reverse("console:worker_health"), headers={"HX-Request": "true"})
    assert "未知" in response.content.decode() and "<html" not in response.content.decode()
    page = operator.get(reverse("console:worker_health"))
    assert "<html" in page.content.decode()


def test_ping_workers_reports_unknown_on_broker_errors(monkeypatch, settings):
    from console import presenters
    from tests.redis_url import TEST_REDIS_URL

    settings.REDIS_URL = TEST_REDIS_URL  # asked (PING) before the workers are

    def boom(timeout):
        raise ConnectionError("no broker")

    monkeypatch.setattr("config.celery.app.control.ping", boom)
    assert presenters.ping_workers()["status"] == "unknown"
    monkeypatch.setattr("config.celery.app.control.ping", lambda timeout: [{"celery@host": {"ok": "pong"}}])
    assert presenters.ping_workers() == {"status": "ok", "workers": ["celery@host"], "error": ""}
    monkeypatch.setattr("config.celery.app.control.ping", lambda timeout: [])
    assert presenters.ping_workers()["status"] == "down"


def test_streams_list(operator, memory_set, django_assert_num_queries):
    _more_rows(memory_set)
    # AUTH + streams with subquery counts + pending counts.
    with django_assert_num_queries(AUTH + 2):
        response = operator.get(reverse("console:streams"))
    assert "小林私聊" in response.content.decode() and "读书群" in response.content.decode()


def test_stream_page_shows_working_memory_batches_and_search(operator, memory_set, django_assert_num_queries):
    url = reverse("console:stream", args=[memory_set["direct"].pk])
    # AUTH + stream + batch count + working memory + their senders (one query) + batch page
    # + the message browser: speaker options, message count, message page, its senders.
    with django_assert_num_queries(AUTH + 9):
        response = operator.get(url)
    html = response.content.decode()
    assert "我对花生过敏" in html  # pending → working memory
    episode = memory_set["episode"].pk
    assert f'<tr><td><a href="{reverse("console:episode", args=[episode])}">#{episode}</a>' in html  # the archived batch links its episode
    hits = operator.get(url, {"q": "过敏"}, headers={"HX-Request": "true"})
    assert "我对花生过敏" in hits.content.decode() and "<html" not in hits.content.decode()


def test_stream_message_browser_pages_by_mpage_and_keeps_the_other_parameters(operator, memory_set):
    stream = memory_set["group"]
    for i in range(60):  # more than a page of messages
        services.append_message(stream_id=stream.pk, role="user", content=f"翻页消息{i}",
                                sender_person_id=memory_set["bob"].pk, at=NOW - i)
    url = reverse("console:stream", args=[stream.pk])
    first = operator.get(url, {"archived": "no"}).content.decode()
    assert 'href="?archived=no&amp;mpage=2"' in first and "mpage=0" not in first
    second = operator.get(url, {"archived": "no", "mpage": 2})
    assert second.context["messages_page"].number == 2
    assert 'href="?archived=no&amp;mpage=1"' in second.content.decode()


def test_episodes_list_and_cue_search(operator, memory_set, django_assert_num_queries):
    placeholder = services.add_episode(
        stream_id=memory_set["group"].pk, summary="这一批对话未能生成摘要：超时", cues=[], started_at=NOW - HOUR,
        ended_at=NOW, message_ids=[], kind="unsummarized", at=NOW,
    )
    services.emit_event("summary_batch_skipped", {"episodeId": placeholder.pk, "reason": "模型超时"},
                        stream_id=memory_set["group"].pk, at=NOW)
    # AUTH + count + page (with message counts) + cues + skip events of the placeholders + stream options.
    with django_assert_num_queries(AUTH + 5):
        response = operator.get(reverse("console:episodes"))
    html = response.content.decode()
    assert "小林聊到住处和猫" in html and "未能总结的占位" in html and "模型超时" in html
    found = operator.get(reverse("console:episodes"), {"q": "杭州"}).content.decode()
    assert "小林聊到住处和猫" in found
    assert "小林聊到住处和猫" not in operator.get(reverse("console:episodes"), {"q": "杭州", "stream": memory_set["group"].pk}).content.decode()


def test_fact_list_filters_and_states(operator, memory_set, frozen_now, django_assert_num_queries):
    _more_rows(memory_set)
    f1, f2, f3, f4, f5 = memory_set["facts"]
    curation.pin_fact(fact_id=f3, at=NOW)
    curation.invalidate_fact(fact_id=f5, at=NOW)
    # AUTH + count + page (person joined) + conflicted slots of the page + person options + kind options
    # + stream options (the "extracted from" filter).
    with django_assert_num_queries(AUTH + 6):
        response = operator.get(reverse("console:facts"))
    html = response.content.decode()
    assert "小林住在杭州" in html and "已冻结" in html and "永久保留" in html and "已失效" in html
    assert f'id="fact-row-{f1}" class="conflicted' in html

    def ids(**params):
        return {f.pk for f in operator.get(reverse("console:facts"), params).context["page"].object_list}

    assert ids(state="frozen") == {f4}
    assert ids(state="pinned") == {f3}
    assert ids(state="invalid") == {f5}
    assert ids(person=memory_set["alice"].pk) == {f1, f2, f3}
    assert ids(slot="住址") == {f1, f2}
    assert ids(kind="偏好") == {f3}
    assert f4 in ids(origin="group") and f1 not in ids(origin="group")
    assert ids(state="active", person=memory_set["alice"].pk) == {f1, f2, f3}


def test_fact_list_paginates(operator, memory_set):
    _more_rows(memory_set, n=60)
    page1 = operator.get(reverse("console:facts")).context["page"]
    assert len(page1.object_list) == 50 and page1.has_next()
    page2 = operator.get(reverse("console:facts"), {"page": 2}).context["page"]
    assert len(page2.object_list) == 15


def test_fact_search_shows_every_score_term(operator, memory_set, frozen_now, django_assert_num_queries):
    operator.get(reverse("console:facts"), {"q": "住在哪里"})  # warms the lexical layer's cached row count
    # AUTH + FTS match + the query terms' document frequencies + the hits' tokens (IDF coverage,
    # the ranking's relevance floor) + "any vectors?" + the hits the filters let through + how many
    # other facts match the text + rows of the page + conflicted slots + person options + kinds + stream options.
    # PostgreSQL ranks a person's facts in three reads (statistics, document frequencies, postings; FTS5: one)
    extra = 3 if connection.vendor == "postgresql" else 0
    with django_assert_num_queries(AUTH + 11 + extra):
        response = operator.get(reverse("console:facts"), {"q": "住在哪里"})
    html = response.content.decode()
    assert "小林住在杭州" in html and "小林喜欢猫" not in html
    for term in ("BM25", "相关度", "词面覆盖", "校准相关度", "留存项", "得分"):  # the ranking's own terms
        assert term in html
    assert "余弦" not in html  # no vectors yet


def _facts_built() -> Callable[[], int]:
    """A counter of the Fact instances built from here on (every row read as a model)."""
    from django.db.models.signals import post_init

    built = []

    def count(sender, instance, **kwargs):
        built.append(instance.pk)

    post_init.connect(count, sender=Fact, weak=False)
    return lambda: (post_init.disconnect(count, sender=Fact), len(built))[1]


def test_fact_search_reads_whole_rows_for_its_page_alone(operator, memory_set, frozen_now,
                                                       django_assert_max_num_queries):
    """A search matching many facts reads the rows of the page it shows, and its queries do not grow
    with the matches: ranked hits fill the first page, the text matches behind them are counted, and
    their order is settled only for a page that shows them."""
    for who, name in (("alice", "小林"), ("bob", "阿杰")):
        for i in range(70):  # 140 facts holding a query term, distinct enough not to be merged
            services.add_fact(person_id=memory_set[who].pk, content=f"{name}在{CITIES[i % 10]}住过，买了{ITEMS[i // 10]}",
                              kind="事件", origin_kind="direct", at=NOW - (i + 1) * HOUR)
    url = reverse("console:facts")
    operator.get(url, {"q": "住在哪里"})  # warms the lexical layer's cached row count
    extra = 3 if connection.vendor == "postgresql" else 0
    built = _facts_built()
    with django_assert_max_num_queries(AUTH + 11 + extra):  # as many as for a handful of matches
        response = operator.get(url, {"q": "住在哪里"})
    assert built() <= PAGE_SIZE
    page = response.context["page"]
    hits = [f.pk for f in page.object_list if f.breakdown]
    assert hits and len(page.object_list) == PAGE_SIZE and page.paginator.count > 2 * PAGE_SIZE


def test_fact_search_pages_through_text_matches_most_terms_first(operator, memory_set, frozen_now):
    """Behind the ranked hits (none here: recall never sees invalidated facts), the facts whose text
    holds the query's terms: most terms first, newest on ties, page after page."""
    bob = memory_set["bob"]
    both, one = [], []
    for i in range(35):  # older facts holding both terms, newer ones holding one (distinct enough not to be merged)
        city, item = CITIES[i % 10], ITEMS[i // 10]
        both.append(services.add_fact(person_id=bob.pk, content=f"阿杰在{city}买了{item}和猫粮", kind="事件",
                                      origin_kind="group", at=NOW - (200 - i) * HOUR).fact_id)
        one.append(services.add_fact(person_id=bob.pk, content=f"阿杰在{city}的{item}店看见猫", kind="事件",
                                     origin_kind="group", at=NOW - (100 - i) * HOUR).fact_id)
    for fact_id in both + one:
        curation.invalidate_fact(fact_id=fact_id, at=NOW)

    def newest(ids):
        return list(Fact.objects.filter(pk__in=ids).order_by("-updated_at", "-id").values_list("pk", flat=True))

    expected = newest(both) + newest(one)
    url = reverse("console:facts")
    pages = {}
    for number in (2, 1):  # the later page first: each page settles what it shows on its own
        page = operator.get(url, {"q": "猫粮", "state": "invalid", "page": number}).context["page"]
        assert page.paginator.count == 70 and page.paginator.num_pages == 2
        pages[number] = [f.pk for f in page.object_list]
    assert len(set(both + one)) == 70 and pages[1] + pages[2] == expected


def test_fact_search_adds_cosine_and_fused_when_vectors_exist(operator, memory_set, frozen_now, monkeypatch):
    import numpy as np

    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    for fid in memory_set["facts"]:
        services.store_fact_vector(fact_id=fid, vector=vector)
    monkeypatch.setattr("memory.recall.embed_query", lambda text: vector)
    html = operator.get(reverse("console:facts"), {"q": "住在哪里"}).content.decode()
    assert "余弦" in html and "融合相关度" in html and "1.000" in html


def test_fact_detail(operator, memory_set, frozen_now, django_assert_num_queries):
    f1, f2 = memory_set["facts"][:2]
    write = curation.replace_fact(fact_id=f2, content="小林住在苏州", at=NOW)
    # AUTH + fact + conflicted slots + older facts in the chain (none; f1 replaced nothing
    # and nothing replaced it) + operations + node + edges + neighbour nodes + neighbour
    # facts + neighbour episodes.
    with django_assert_num_queries(AUTH + 9):
        response = operator.get(reverse("console:fact", args=[f1]))
    html = response.content.decode()
    assert 'class="past"' in html and 'class="projected"' in html and "冻结线 0.1" in html and "复苏线 0.15" in html
    assert 'class="due-at"' in html
    assert "小林喜欢猫" in html  # a neighbour
    chain = operator.get(reverse("console:fact", args=[f2])).content.decode()
    newer = f'<a href="{reverse("console:fact", args=[write.fact_id])}">#{write.fact_id}</a> <span class="content">小林住在苏州</span>'
    assert newer + ' <span class="chip active">新</span>' in chain and "人工取代" in chain


def test_frozen_fact_is_shown_as_frozen_not_deleted(operator, memory_set, frozen_now):
    html = operator.get(reverse("console:fact", args=[memory_set["facts"][3]])).content.decode()
    assert "已冻结" in html and "删除" not in html


def test_knowledge_list_and_search(operator, memory_set, django_assert_num_queries):
    # AUTH + count + page (import batch joined).
    with django_assert_num_queries(AUTH + 2):
        response = operator.get(reverse("console:knowledge"))
    assert "猫是肉食动物" in response.content.decode()
    found = operator.get(reverse("console:knowledge"), {"q": "肉食"})
    assert "猫是肉食动物" in found.content.decode()
    assert services.Knowledge.objects.get(pk=memory_set["knowledge"][0]).hit_count == 0  # a console search is read-only


def test_conflicts_queue(operator, memory_set, frozen_now, django_assert_num_queries):
    _more_rows(memory_set)
    # AUTH + conflicted pairs + their members + identities + persons (names) + person options.
    with django_assert_num_queries(AUTH + 5):
        response = operator.get(reverse("curation:conflicts"))
    html = response.content.decode()
    assert "小林住在杭州" in html and "小林住在上海" in html and "槽位 住址" in html and "保留这条" in html


def test_operations_log_filters(reviewer, memory_set, frozen_now, django_assert_num_queries):
    f1, f2, f3 = memory_set["facts"][:3]
    pin = curation.pin_fact(fact_id=f3, user="op", at=NOW)
    curation.invalidate_fact(fact_id=f1, user="op", at=NOW + 1)
    curation.undo_operation(operation_id=pin.pk, user="rev", at=NOW + 2)
    # AUTH + count + page (fact, related fact and person joined) + the person picker's options.
    with django_assert_num_queries(AUTH + 3):
        response = reviewer.get(reverse("curation:operations"))
    html = response.content.decode()
    assert "已撤销" in html and "撤销条目" in html and html.count('data-undo="') == 1

    def ops(**params):
        return [o.op for o in reviewer.get(reverse("curation:operations"), params).context["page"].object_list]

    assert ops(op="pin") == ["pin"]
    assert ops(fact=f1) == ["invalidate"]
    assert ops(person=memory_set["bob"].pk) == []
    assert ops(actor="manual") == ["undo", "invalidate", "pin"]


def test_imports_page(staff, memory_set, django_assert_num_queries):
    # AUTH + recent import jobs + batches with live counts.
    with django_assert_num_queries(AUTH + 2):
        response = staff.get(reverse("console:imports"))
    assert response.status_code == 200


def test_graph_page(staff, memory_set, frozen_now, django_assert_num_queries):
    _more_rows(memory_set)
    # AUTH + edge totals + degrees (SQL) + edges among the chosen nodes + node total and spread runs
    # (one query) + kept nodes + facts + episodes + knowledge of those nodes.
    with django_assert_num_queries(AUTH + 8):
        response = staff.get(reverse("console:graph"))
    html = response.content.decode()
    assert '<svg class="graph"' in html and "小林住在杭州" in html


def test_jobs_page(staff, django_assert_num_queries):
    from memory.models import Job

    Job.objects.create(kind="import", status="running", progress=3, total=10)
    Job.objects.create(kind="import", status="done", progress=10, total=10)
    # AUTH + jobs.
    with django_assert_num_queries(AUTH + 1):
        response = staff.get(reverse("console:jobs"))
    assert response.content.decode().count('hx-trigger="every 2s"') == 1


def test_a_history_restore_gets_the_whole_page(operator, memory_set):
    page = operator.get(reverse("console:facts")).content.decode()
    assert '"historyRestoreAsHxRequest":false' in page  # htmx sends a restore without HX-Request: true
    headers = {"HX-History-Restore-Request": "true"}
    assert "<html" in operator.get(reverse("console:facts"), headers=headers).content.decode()
    assert "<html" not in operator.get(reverse("console:facts"), headers={"HX-Request": "true"}).content.decode()


def test_the_dashboard_says_why_messages_wait_and_links_todays_facts(operator, memory_set, frozen_now, settings):
    settings.SUMMARIZE_TRIGGER_MESSAGES = 48
    html = operator.get(reverse("console:dashboard")).content.decode()
    # three messages wait (two direct, one group): each stream is below its trigger of 48, and it says so
    assert "一个会话流攒满 48 条未总结的消息才总结一批" in html and 'data-pending="2"' in html and "/ 48" in html
    assert "SQ8" not in html and "待写入检索索引" in html
    today = "?since=" + str(timezone.localtime(dt.datetime.fromtimestamp(NOW / 1000, tz=dt.UTC)).date())
    assert f'href="{reverse("console:facts")}{today}"' in html
    learnt = operator.get(reverse("console:facts") + today).context["page"].paginator.count
    glance = operator.get(reverse("console:dashboard")).context["glance"]
    assert learnt == glance["learnt_today"] and glance["pending"] == 3
    settings.SUMMARIZE_TRIGGER_MESSAGES = 2
    assert "个会话流已攒够一批" in operator.get(reverse("console:dashboard")).content.decode()


def test_the_worker_page_names_the_workers_and_what_waits(operator, monkeypatch):
    monkeypatch.setattr("console.presenters.ping_workers",
                        lambda timeout=0.5: {"status": "ok", "workers": ["celery@web-1"], "error": ""})
    monkeypatch.setattr("console.presenters.broker_queue_length", lambda: 7)
    html = operator.get(reverse("console:worker_health")).content.decode()
    assert "celery@web-1" in html and 'id="broker-queue">7<' in html and "1 个工作进程" in html


def test_facts_filter_by_learnt_dates_and_source_stream(operator, memory_set):
    direct = memory_set["direct"]
    heard = services.add_fact(person_id=memory_set["alice"].pk, content="小林对花生过敏", kind="身份",
                              source=f"extract:stream{direct.pk}", at=NOW - HOUR).fact_id

    def ids(**params):
        return {f.pk for f in operator.get(reverse("console:facts"), params).context["page"].object_list}

    day = timezone.localtime(dt.datetime.fromtimestamp((NOW - HOUR) / 1000, tz=dt.UTC)).date()
    assert ids(stream=direct.pk) == {heard}
    assert heard in ids(since=str(day), until=str(day))
    assert heard not in ids(until=str(day - dt.timedelta(days=1)))


def test_a_fact_says_where_it_was_heard_and_links_its_likely_source_message(operator, memory_set, frozen_now):
    direct = memory_set["direct"]
    fact = services.add_fact(person_id=memory_set["alice"].pk, content="小林对花生过敏", kind="身份",
                             source=f"extract:stream{direct.pk}", at=NOW - HOUR).fact_id
    response = operator.get(reverse("console:fact", args=[fact]))
    html = response.content.decode()
    assert f"从会话流 #{direct.pk} 的消息抽取" in html and "extract:stream" not in html
    sources = response.context["sources"]
    assert sources and sources[0].content == "我对花生过敏"  # the line it was taken from, by text
    assert 'id="fact-sources"' in html and "最可能的原话" in html


def test_a_fact_that_recorded_its_message_shows_that_message_and_no_guess(operator, memory_set, frozen_now):
    from memory.models import Message

    direct = memory_set["direct"]
    said = Message.objects.get(stream=direct, content="我对花生过敏")
    fact = services.add_fact(person_id=memory_set["alice"].pk, content="小林对花生过敏", kind="身份",
                             source=f"extract:stream{direct.pk}", at=NOW - HOUR, source_message_id=said.pk).fact_id
    response = operator.get(reverse("console:fact", args=[fact]))
    html = response.content.decode()
    assert response.context["heard_in"].pk == said.pk and response.context["sources"] == []
    assert 'id="fact-heard-in"' in html and "听到这条的消息" in html and f"#{said.pk}" in html
    assert 'id="fact-sources"' not in html
    said.delete()  # the message is forgotten: back to the best guess, which finds nothing of it
    html = operator.get(reverse("console:fact", args=[fact])).content.decode()
    assert 'id="fact-heard-in"' not in html


def test_an_episode_labels_its_cues_and_links_the_facts_of_its_time(operator, memory_set):
    episode = memory_set["episode"]
    html = operator.get(reverse("console:episode", args=[episode.pk])).content.decode()
    assert "回忆线索" in html and f"?stream={episode.stream_id}&amp;since=" in html
