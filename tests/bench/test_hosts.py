"""bench.hosts without root: its model answers what the LLM summariser and extractor accept, and its report."""
from __future__ import annotations

import pytest

from bench import hosts
from bench.common import SECTION_BY_MARKER, check_section
from memory.providers import DialogueLine, Participant
from memory.providers.chat import OpenAIChatModel
from memory.providers.llm import LLMExtractor, LLMSummariser


@pytest.fixture
def model():
    server = hosts.fake_llm((0.0, 0.0))
    yield OpenAIChatModel(server.base_url, "fake-chat", max_retries=0)
    server.close()


LINES = [
    DialogueLine("user", "r1-u1", "用户1", "我住在杭州，离公司不远"),
    DialogueLine("assistant", None, "小悦", "好呀，下次再聊这个"),
    DialogueLine("user", "r1-u2", "用户2", "我对花生过敏，要特别小心"),
    DialogueLine("user", "r1-u1", "用户1", "周末去爬山了，风景很好，就是人有点多"),
]
PEOPLE = [Participant("r1-u1", "用户1"), Participant("r1-u2", "用户2")]


def test_the_model_writes_a_summary_and_one_fact_per_speaker_the_providers_accept(model):
    episode = LLMSummariser(model).summarise(LINES, PEOPLE)
    extraction = LLMExtractor(model).extract(LINES, PEOPLE)

    assert episode is not None and episode.summary and episode.cues
    assert extraction is not None
    assert [(f.person_ref, f.content) for f in extraction.facts] == [
        ("r1-u1", "用户1说我住在杭州，离公司不远"), ("r1-u2", "用户2说我对花生过敏，要特别小心")]


def trial(hosts_: int, seconds: float, **extra) -> dict:
    return {"hosts": hosts_, "seconds": seconds, "completed": True, **extra}


def test_the_report_gives_medians_ranges_and_the_speedup_within_its_budget():
    result = {
        "catch_up": {
            "llm": [trial(1, 40.0), trial(2, 20.0), trial(1, 44.0), trial(2, 25.0), trial(1, 41.0), trial(2, 21.0)],
            "heuristic": [trial(1, 30.0), trial(2, 31.0), trial(1, 29.0), trial(2, 30.0)],
        },
        "ingest": [{"hosts": 1, "requests_per_s": 300.0}, {"hosts": 2, "requests_per_s": 330.0}],
        "configuration": {"rounds": 3, "cases": ["llm", "heuristic"], "messages": 1000, "threads": 4,
                          "llm_latency_s": [0.3, 0.8]},
        "calibration": {"before": {"loop_1e7_s": 0.4, "load_average": [1.0, 1.0, 1.0], "cpus": 2}},
    }
    result["summary"] = hosts.summarise(result)

    assert result["summary"]["catch_up_llm"]["speedup"] == round(41.0 / 21.0, 2)
    assert result["summary"]["catch_up_heuristic"]["speedup"] == round(29.5 / 30.5, 2)
    assert result["summary"]["ingest"]["ratio"] == 1.1
    body = hosts.render(result)
    check_section(SECTION_BY_MARKER["<!-- hosts:start -->"], body)
    assert "41.0 s (40.0–44.0) → 21.0 s (20.0–25.0), **1.95×**" in body and "2 cores" in body
