"""Association graph, spreading preview and the recall playground (read-only)."""
from __future__ import annotations

import pytest
from django.urls import reverse

from memory import services
from memory.models import Fact, MemoryEdge, PipelineEvent, Turn
from tests.console.conftest import HOUR, NOW

pytestmark = pytest.mark.django_db


def test_frozen_edges_are_hidden_unless_asked(staff, memory_set, frozen_now):
    MemoryEdge.objects.filter(pk=MemoryEdge.objects.order_by("id").first().pk).update(active=False)
    default = staff.get(reverse("console:graph"))
    assert default.context["graph"].stats["frozen_edges"] == 1
    assert 'stroke-dasharray="5 4" class="frozen"' not in default.content.decode()
    shown = staff.get(reverse("console:graph"), {"include_frozen": "on"})
    assert 'stroke-dasharray="5 4" class="frozen"' in shown.content.decode()
    assert len(shown.context["graph"].edges) == len(default.context["graph"].edges) + 1


def test_frozen_fact_node_is_drawn_frozen_and_its_panel_says_so(staff, memory_set, frozen_now):
    frozen = memory_set["facts"][3]
    services.link_together(refs=[("fact", frozen), ("fact", memory_set["facts"][4])], at=NOW - HOUR)
    html = staff.get(reverse("console:graph")).content.decode()
    assert "node fact frozen" in html
    panel = staff.get(reverse("console:graph"), {"node": f"fact:{frozen}"}).content.decode()
    assert "这条事实已冻结" in panel and "已被删除" not in panel


def test_densest_nodes_only_when_large(staff, memory_set, frozen_now):
    for i in range(12):
        fid = services.add_fact(person_id=memory_set["bob"].pk, content=f"阿杰收藏第{'一二三四五六七八九十甲乙'[i]}号藏品",
                                kind="事件", at=NOW).fact_id
        services.link_together(refs=[("fact", fid), ("fact", memory_set["facts"][4])], at=NOW)
    response = staff.get(reverse("console:graph"), {"max_nodes": 10})
    graph = response.context["graph"]
    assert graph.stats["truncated"] and len(graph.nodes) == 10
    assert "只显示连边最多的 10 个节点" in response.content.decode()


def test_spreading_preview_from_a_node_lists_seeds_and_hits_apart(staff, memory_set, frozen_now):
    f3 = memory_set["facts"][2]
    response = staff.get(reverse("console:graph"), {"node": f"fact:{f3}", "kind": "fact", "ref": f3, "hops": 2})
    html = response.content.decode()
    preview = response.context["preview"]
    assert [s.ref_id for s in preview.seeds] == [f3]
    hit_keys = {h.key for h in preview.hits}
    assert f"knowledge:{memory_set['knowledge'][0]}" in hit_keys and f"fact:{f3}" not in hit_keys
    assert "起点" in html and "顺带想起来的" in html and "联想扩散用时" in html and "跳 ·" in html
    assert 'class="ring-seed"' in html or "ring-seed" in html
    assert not PipelineEvent.objects.filter(kind="memory_spread").exists()  # a preview is not a recall


def test_node_selection_survives_a_spreading_preview(staff, memory_set, frozen_now):
    f3 = memory_set["facts"][2]
    response = staff.get(reverse("console:graph"), {"q": "猫", "hops": 2, "limit": 8, "node": f"fact:{f3}"})
    assert response.context["selected"]["node"].ref_id == f3 and response.context["preview"] is not None


def test_spreading_preview_from_a_free_query_and_controls(staff, memory_set, frozen_now):
    response = staff.get(reverse("console:graph"), {"q": "猫", "hops": 1, "alpha": 0.5})
    preview = response.context["preview"]
    assert preview.hops == 1 and preview.alpha == 0.5
    assert {s.kind for s in preview.seeds} >= {"fact"}
    bad = staff.get(reverse("console:graph"), {"q": "", "hops": 9})
    assert bad.context["preview"] is None and "errorlist" in bad.content.decode()


def test_spreading_preview_shows_the_fallback(staff, memory_set, frozen_now, monkeypatch):
    from memory import selectors

    def timed_out(**kwargs):
        return selectors.Spreading(seeds=[], hits=[], fell_back=True, timed_out_graph="memory", elapsed_ms=101.0,
                                   hops=2, alpha=0.85)

    monkeypatch.setattr("console.presenters.selectors.spread", timed_out)
    html = staff.get(reverse("console:graph"), {"q": "猫"}).content.decode()
    assert "联想扩散超时，已改用固定跳数扩散" in html and "101.0 ms" in html


def test_playground_shows_the_turn_without_writing_anything(staff, memory_set, frozen_now):
    alice, direct = memory_set["alice"], memory_set["direct"]
    facts_before = list(Fact.objects.order_by("id").values_list("strength", "updated_at", "active", "hit_count"))
    events_before = PipelineEvent.objects.count()
    response = staff.get(reverse("console:playground"), {"stream": direct.pk, "speaker": alice.pk, "text": "你住在哪里"})
    html = response.content.decode()
    assert "小林住在杭州" in html and "小林住在上海" in html
    for term in ("BM25", "相关度", "词面覆盖", "余弦", "校准相关度", "留存项", "得分", "进入提示词", "为什么"):
        assert term in html
    verdicts = {row["fact"].content: row["verdict"] for row in response.context["result"]["pool"]}
    assert all(v.reason for v in verdicts.values())  # every candidate says why, in words
    assert Turn.objects.count() == 0
    assert PipelineEvent.objects.count() == events_before
    assert list(Fact.objects.order_by("id").values_list("strength", "updated_at", "active", "hit_count")) == facts_before


def test_playground_counts_visibility_blocks_in_a_group(staff, memory_set, frozen_now):
    bob, group = memory_set["bob"], memory_set["group"]
    services.append_message(stream_id=group.pk, role="user", content="小林也在", sender_person_id=memory_set["alice"].pk,
                            at=NOW - HOUR)
    response = staff.get(reverse("console:playground"), {"stream": group.pk, "speaker": bob.pk, "text": "小林住在哪里"})
    result = response.context["result"]
    assert result["ctx"].blocked >= 1  # 小林's direct facts stay out of the group
    assert all(row["fact"].origin_kind != "direct" for row in result["pool"])


def test_playground_names_the_facts_the_conversation_shows(staff, memory_set, frozen_now):
    """A fact whose words the conversation holds already is no candidate: the playground says so and which."""
    alice, direct = memory_set["alice"], memory_set["direct"]
    said = Fact.objects.get(content="小林喜欢猫")
    services.append_message(stream_id=direct.pk, role="user", content="小林喜欢猫", sender_person_id=alice.pk,
                            at=NOW - 60_000)
    response = staff.get(reverse("console:playground"), {"stream": direct.pk, "speaker": alice.pk, "text": "猫"})
    result = response.context["result"]
    assert [f.pk for f in result["shown"]] == [said.pk]
    assert said.pk not in {row["fact"].id for row in result["pool"]}
    html = response.content.decode()
    assert 'id="shown-note"' in html and "机器人已经看得到" in html and f"#{said.pk}" in html


def test_playground_shows_conflict_completion(staff, memory_set, frozen_now):
    alice, direct = memory_set["alice"], memory_set["direct"]
    response = staff.get(reverse("console:playground"), {"stream": direct.pk, "speaker": alice.pk, "text": "杭州"})
    html = response.content.decode()
    assert "冲突补全" in html and "小林住在上海" in html  # the other member of the 住址 group
    assert response.context["result"]["completed"]


def test_playground_htmx_returns_the_result_fragment(staff, memory_set, frozen_now):
    response = staff.get(reverse("console:playground"),
                         {"stream": memory_set["direct"].pk, "speaker": memory_set["alice"].pk, "text": "猫"},
                         headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="playground-result">') and "小林喜欢猫" in html


def test_playground_shows_the_confirmed_ranking_the_bot_would_get(staff, memory_set, frozen_now, settings):
    """With an embedder the playground runs the confirm step's ranking (dense channel, cosines,
    fused re-rank): the prompt and every score equal what prepare + confirm give the bot."""
    from memory import recall
    from memory.providers import config

    settings.EMBEDDING_PROVIDER = "local"
    config.reset_cache()
    alice, direct = memory_set["alice"], memory_set["direct"]
    embedder = config.get_embedder()
    for fid in memory_set["facts"]:
        row = Fact.objects.get(pk=fid)
        services.store_fact_vector(fact_id=fid, vector=embedder.embed([row.content])[0])
    text = "小林住在哪个城市"
    response = staff.get(reverse("console:playground"), {"stream": direct.pk, "speaker": alice.pk, "text": text})
    result = response.context["result"]
    assert result["used_vector"] is True
    shown = [(row["fact"].id, row["fact"].score) for row in result["pool"] if row["in_prompt"]]
    assert all(row["fact"].cosine is not None for row in result["pool"])
    ctx = recall.prepare_turn(stream_id=direct.pk, speaker_id=alice.pk, text=text, at=NOW)
    confirmed = recall.confirm_turn(turn_id=ctx.turn_id, at=NOW)
    assert shown == [(p.fact.id, p.fact.score) for p in confirmed.facts]
    html = response.content.decode()
    assert "向量" in html or "词面" in html  # the channel, in the interface language
    assert f"{result['pool'][0]['fact'].cosine:.3f}" in html


def test_playground_says_why_a_whitespace_only_text_shows_nothing(staff, memory_set, frozen_now):
    direct, alice = memory_set["direct"], memory_set["alice"]
    response = staff.get(reverse("console:playground"), {"stream": direct.pk, "speaker": alice.pk, "text": "   "},
                         HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="playground-errors"' in body and "只有空白不算" in body


def test_playground_with_an_empty_prompt_numbers_nothing(staff, memory_set, frozen_now):
    direct, alice = memory_set["direct"], memory_set["alice"]
    response = staff.get(reverse("console:playground"), {"stream": direct.pk, "speaker": alice.pk, "text": "量子色动力学"})
    body = response.content.decode()
    assert 'id="playground-no-facts"' in body
    assert '<li class="muted">' not in body


def test_playground_leads_with_a_verdict_and_a_reason_for_every_candidate(staff, memory_set, frozen_now, settings):
    alice, direct = memory_set["alice"], memory_set["direct"]
    response = staff.get(reverse("console:playground"), {"stream": direct.pk, "speaker": alice.pk, "text": "你住在哪里"})
    result = response.context["result"]
    assert "prompt" in {row["verdict"].code for row in result["pool"]}
    for row in result["pool"]:
        verdict = row["verdict"]
        assert verdict.code == ("prompt" if row["in_prompt"] else "forgetting" if row["held_back"]
                                else "limit" if row["fact"].eligible else "gate")  # the ranking's own verdict
        assert verdict.reason and verdict.label
    html = response.content.decode()
    assert 'data-verdict="prompt"' in html and "每一项得分" in html  # numbers on demand
    # one place in the prompt: the others are out of places, and say which rank they had
    settings.FACT_RECALL_LIMIT = 1
    limited = staff.get(reverse("console:playground"), {"stream": direct.pk, "speaker": alice.pk, "text": "小林"})
    outside = [r for r in limited.context["result"]["pool"] if r["verdict"].code == "limit"]
    assert outside and "名额" in outside[0]["verdict"].reason


def test_the_gate_s_reason_is_said_in_words():
    from console.presenters import verdict_of
    from memory.engine.scoring import Gate
    from memory.selectors import ScopedFact

    fact = ScopedFact(id=1, person_id=1, kind="身份", content="x", slot="", origin_kind="direct", retention=1.0,
                      score=2.0, lexical_relevance=0.3, bm25=-1.0, half_life_hours=1.0, active=True, cosine=0.1,
                      coverage=0.2, eligible=False, margin=-0.35, gate=Gate.HELD)
    held = verdict_of(fact, code="gate", rank=1, limit=6)
    assert held.code == "gate" and "0.10" in held.reason and "-0.35" in held.reason and "闲聊" in held.reason
    fact.__dict__.update(gate=Gate.LEADS_DENSE, eligible=True)
    assert "明显最接近" in verdict_of(fact, code="prompt", rank=1, limit=6).reason


def test_playground_says_what_visibility_held_back(staff, memory_set, frozen_now):
    bob, group = memory_set["bob"], memory_set["group"]
    services.append_message(stream_id=group.pk, role="user", content="小林也在", sender_person_id=memory_set["alice"].pk,
                            at=NOW - HOUR)
    html = staff.get(reverse("console:playground"), {"stream": group.pk, "speaker": bob.pk, "text": "小林住在哪里"}).content.decode()
    assert 'id="visibility-note"' in html and "私聊里学到的" in html
    assert f"?person={memory_set['alice'].pk}&amp;origin=direct" in html


def test_graph_labels_never_overlap_and_the_selected_node_keeps_its_own():
    from console.presenters import GraphView, NodeInfo

    nodes = [NodeInfo(node_id=i, kind="fact", ref_id=i, text=f"事实{i}号", x=100 + 3 * i, y=100, degree=i) for i in range(4)]
    nodes.append(NodeInfo(node_id=9, kind="fact", ref_id=9, text="远处的事实", x=400, y=300))
    view = GraphView(nodes=nodes, edges=[], stats={})
    view.place_labels()
    assert [n.node_id for n in nodes if n.labelled] == [3, 9]  # the best connected of the crowded four, and the far one
    view.place_labels(selected="fact:0")
    assert [n.node_id for n in nodes if n.labelled] == [0, 9]
