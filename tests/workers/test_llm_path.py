"""The pipeline over the LLM providers, against the local OpenAI-compatible server."""
from __future__ import annotations

import json

import pytest

from memory import pipeline
from memory.dispatch import triggers
from memory.models import Episode, EpisodeCue, Fact, Knowledge, PipelineEvent
from memory.providers import config
from tests.providers.conftest import Reply
from tests.workers.conftest import make_person, make_stream, post_messages

pytestmark = pytest.mark.django_db


@pytest.fixture
def llm(settings, fake_openai):
    settings.LLM_BASE_URL = fake_openai.base_url
    settings.LLM_MODEL = "test-chat"
    settings.LLM_TIMEOUT = 5.0
    yield fake_openai
    config.reset_cache()


def test_llm_extraction_reports_normalised_kinds_and_dropped_supersedes(llm):
    stream = make_stream()
    post_messages(stream, 32, speakers=[make_person("a1", "小红")])
    llm.chat_reply = json.dumps({
        "facts": [{"person": "a1", "content": "小红住在上海", "kind": "喜好", "slot": "居住地", "supersedes": "#999"}],
        "knowledge": ["月球没有全球性磁场", 123, ""],
    }, ensure_ascii=False)

    outcome = pipeline.extract_stream(stream_id=stream.pk)

    assert outcome.status == "written"
    assert Fact.objects.get().kind == "事件" and Knowledge.objects.count() == 1
    by_kind = {e.kind: e for e in PipelineEvent.objects.all()}
    assert by_kind["memory_fact_kind_normalized"].payload == {"rawKind": "喜好", "normalizedKind": "事件"}
    assert by_kind["memory_fact_supersede_dropped"].payload == {"supersededId": 999, "reason": "not_in_known_list"}
    assert by_kind["memory_fact_kind_normalized"].stream_id == stream.pk
    prompt = llm.calls("/chat/completions")[0].json["messages"][-1]["content"]
    assert "[a1] 小红" in prompt


def test_llm_prose_counts_as_a_failed_extraction(llm):
    stream = make_stream()
    post_messages(stream, 32, speakers=[make_person("a1", "小红")])
    llm.chat_reply = "抱歉，我无法完成这个任务。"

    assert pipeline.extract_stream(stream_id=stream.pk).status == "failed"
    assert triggers.read_cursor(stream.pk) == 0


def test_llm_summary_and_server_errors(llm):
    stream = make_stream()
    post_messages(stream, 48)
    llm.chat_reply = json.dumps({"summary": "小明聊了杭州的生活", "recall_cues": ["杭州", " 骑车 "]}, ensure_ascii=False)

    assert pipeline.summarize_stream(stream_id=stream.pk).status == "written"
    assert sorted(EpisodeCue.objects.values_list("cue", flat=True)) == ["杭州", "骑车"]

    post_messages(stream, 16, start=48)
    llm.push("/chat/completions", Reply(400, json={"error": {"message": "bad request"}}))
    outcome = pipeline.summarize_stream(stream_id=stream.pk)
    assert outcome.status == "failed" and "400" in outcome.error
    assert Episode.objects.count() == 1
