"""Summarisation queue (docs/REFERENCE.md §15)."""
from __future__ import annotations

import pytest

from memory import pipeline, selectors, services
from memory.engine.extraction import EpisodeDraft
from memory.models import Episode, EpisodeCue, Message, PipelineEvent, QueueFailure
from memory.providers.chat import ProviderTimeout
from memory.providers.heuristic import HeuristicSummariser
from tests.workers.conftest import T0, ScriptedSummariser, make_stream, post_messages

pytestmark = pytest.mark.django_db


def test_it_waits_for_the_trigger():
    stream = make_stream()
    post_messages(stream, 47)
    summariser = ScriptedSummariser()

    outcome = pipeline.summarize_stream(stream_id=stream.pk, summariser=summariser)

    assert outcome.status == "idle"
    assert summariser.calls == []
    assert not Episode.objects.exists()


def test_it_writes_one_episode_per_batch_and_a_rerun_writes_nothing():
    stream = make_stream()
    ids = post_messages(stream, 48)
    summariser = ScriptedSummariser()

    first = pipeline.summarize_stream(stream_id=stream.pk, summariser=summariser, at=T0 + 99)
    second = pipeline.summarize_stream(stream_id=stream.pk, summariser=summariser, at=T0 + 99)

    assert (first.status, second.status) == ("written", "idle")
    episode = Episode.objects.get()
    assert episode.kind == Episode.Kind.CONVERSATION and episode.source == "scripted"
    assert list(Message.objects.filter(episode=episode).order_by("id").values_list("id", flat=True)) == ids[:16]
    assert (episode.started_at, episode.ended_at) == (T0, T0 + 15_000)
    assert sorted(EpisodeCue.objects.values_list("cue", flat=True)) == ["工作", "杭州"]
    assert selectors.pending_count(stream_id=stream.pk) == 32
    assert len(summariser.calls[0]) == 16


def test_it_keeps_summarising_while_the_stream_is_due():
    stream = make_stream()
    post_messages(stream, 80)
    outcomes = []
    while True:
        outcome = pipeline.summarize_stream(stream_id=stream.pk, summariser=ScriptedSummariser())
        outcomes.append(outcome)
        if not outcome.more:
            break
    # 80 → 64 → 48 → 32: three batches, then below the trigger of 48.
    assert [o.status for o in outcomes] == ["written", "written", "written"]
    assert selectors.pending_count(stream_id=stream.pk) == 32


def test_the_summary_becomes_the_cue_when_there_is_none():
    stream = make_stream()
    post_messages(stream, 48)
    pipeline.summarize_stream(stream_id=stream.pk, summariser=ScriptedSummariser(EpisodeDraft("只有摘要", [])))
    assert list(EpisodeCue.objects.values_list("cue", flat=True)) == ["只有摘要"]


def test_the_heuristic_summariser_writes_an_episode_with_cues():
    stream = make_stream()
    post_messages(stream, 60)

    outcome = pipeline.summarize_stream(stream_id=stream.pk, summariser=HeuristicSummariser())

    episode = Episode.objects.get(pk=outcome.episode_id)
    assert episode.source == "heuristic" and episode.summary
    assert EpisodeCue.objects.filter(episode=episode).count() >= 1
    assert selectors.recall_episodes(stream_id=stream.pk, query=EpisodeCue.objects.first().cue, limit=3)


def test_a_batch_of_fewer_than_four_is_never_summarised(settings):
    settings.SUMMARIZE_TRIGGER_MESSAGES = 3
    stream = make_stream()
    post_messages(stream, 3)
    summariser = ScriptedSummariser()

    assert pipeline.summarize_stream(stream_id=stream.pk, summariser=summariser).status == "too_few"
    assert summariser.calls == [] and not Episode.objects.exists()


def test_three_failures_of_the_same_batch_write_the_placeholder():
    stream = make_stream()
    ids = post_messages(stream, 48)
    failing = ScriptedSummariser()
    failing.result = None  # "no valid JSON"

    statuses = []
    for _ in range(2):
        statuses.append(pipeline.summarize_stream(stream_id=stream.pk, summariser=failing).status)
        assert not Episode.objects.exists()
    row = QueueFailure.objects.get(stream=stream, queue="summarize")
    assert (row.head_message_id, row.failures) == (ids[0], 2)

    third = pipeline.summarize_stream(stream_id=stream.pk, summariser=failing)

    assert statuses == ["failed", "failed"] and third.status == "skipped"
    placeholder = Episode.objects.get()
    assert placeholder.kind == Episode.Kind.UNSUMMARIZED
    assert placeholder.summary == "这一批对话未能生成摘要：模型未返回合法的摘要 JSON"
    assert not EpisodeCue.objects.exists()
    assert list(Message.objects.filter(episode=placeholder).order_by("id").values_list("id", flat=True)) == ids[:16]
    assert not QueueFailure.objects.exists()
    assert PipelineEvent.objects.filter(kind="summary_batch_skipped").count() == 1
    assert PipelineEvent.objects.filter(kind="summary_failed").count() == 3
    assert selectors.recent_episodes(stream_id=stream.pk, limit=4) == []


def test_model_exceptions_are_counted_and_named_in_the_placeholder():
    stream = make_stream()
    post_messages(stream, 48)
    failing = ScriptedSummariser(ProviderTimeout("read timed out"))

    for _ in range(3):
        pipeline.summarize_stream(stream_id=stream.pk, summariser=failing)

    assert Episode.objects.get().summary == "这一批对话未能生成摘要：ProviderTimeout: read timed out"


def test_failure_counts_survive_between_calls_and_a_new_head_restarts_them():
    stream = make_stream()
    ids = post_messages(stream, 64)
    failing = ScriptedSummariser()
    failing.result = None
    pipeline.summarize_stream(stream_id=stream.pk, summariser=failing)
    pipeline.summarize_stream(stream_id=stream.pk, summariser=failing)
    # Another writer archives the head batch; the next failure is of a different head.
    services.add_episode(stream_id=stream.pk, summary="别处写的", cues=["别处"], started_at=T0, ended_at=T0,
                         message_ids=ids[:16])

    outcome = pipeline.summarize_stream(stream_id=stream.pk, summariser=failing)

    row = QueueFailure.objects.get()
    assert outcome.status == "failed" and (row.head_message_id, row.failures) == (ids[16], 1)


def test_a_batch_archived_while_the_model_ran_is_not_written_twice():
    stream = make_stream()
    ids = post_messages(stream, 48)

    class Racing(ScriptedSummariser):
        def summarise(self, lines, participants=()):
            services.add_episode(stream_id=stream.pk, summary="另一个进程", cues=["另一个"], started_at=T0,
                                 ended_at=T0, message_ids=ids[:16])
            return super().summarise(lines, participants)

    outcome = pipeline.summarize_stream(stream_id=stream.pk, summariser=Racing())

    assert outcome.status == "raced"
    assert Episode.objects.count() == 1


def test_a_missing_stream_is_a_no_op():
    assert pipeline.summarize_stream(stream_id=999_999, summariser=ScriptedSummariser()).status == "missing"
