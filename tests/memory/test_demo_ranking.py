"""Issue 16: in the demo data, 我最近想去杭州玩 used to bring 主人最近在学做菜, 小林最近在学日语
and 主人最近在学书法 into the prompt on 最近 alone (relevance 0.74 each). The relevance gate
(issue 30) does not let a generic chat word carry a fact; the built-in reference profile still shows
the old behaviour. Small talk brings nothing."""
from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from memory import recall
from memory.models import Person, Stream
from memory.overrides import overrides_scope

pytestmark = pytest.mark.django_db

NOISE = {"主人最近在学做菜", "小林最近在学日语", "主人最近在学书法"}


@pytest.fixture(scope="module")
def _seeded(django_db_setup, django_db_blocker):
    """``seed_demo`` once for the module (it embeds every fact with the local model: ~2 s), in a transaction
    rolled back when the module ends; each test runs in a savepoint inside it and rolls its own writes back."""
    from django.db import transaction
    from django.test import override_settings

    from memory.providers import config

    with django_db_blocker.unblock(), override_settings(EMBEDDING_PROVIDER="local"), transaction.atomic():
        config.reset_cache()
        call_command("seed_demo", "--if-empty", stdout=io.StringIO(), stderr=io.StringIO())
        yield
        transaction.set_rollback(True)
    config.reset_cache()


@pytest.fixture
def demo(_seeded, settings):
    from memory.providers import config

    settings.EMBEDDING_PROVIDER = "local"  # the real local model (USE), vectors for every fact
    config.reset_cache()
    owner = Person.objects.get(display_name="主人")
    return {"owner": owner, "lin": Stream.objects.get(external_id="lin")}


def _confirm(demo, text):
    ctx = recall.prepare_turn(stream_id=demo["lin"].pk, speaker_id=demo["owner"].pk, text=text)
    result = recall.confirm_turn(turn_id=ctx.turn_id)
    assert result.used_vector is True
    return ctx, result


def _turn(demo, text):
    return [p.fact.content for p in _confirm(demo, text)[1].facts]


def test_a_turn_sharing_one_common_word_brings_no_lexical_noise(demo):
    with overrides_scope({"reference_blend": 1}):
        multiplied = _turn(demo, "我最近想去杭州玩")
    assert NOISE <= set(multiplied)  # the reference ranking: noise fills the prompt on 最近
    ctx, result = _confirm(demo, "我最近想去杭州玩")
    noise = [f for f in ctx.pool if f.content in NOISE]
    # in the pool on 最近, which is a generic chat word: they cover nothing of the query, the gate holds them
    assert len(noise) == 3 and all(f.coverage == 0.0 and not f.eligible for f in noise)
    assert ctx.facts == []  # before confirm (no cosine yet) nothing passes
    # whatever enters at confirm does so on its cosine against the query's background, never on 最近
    for p in result.facts:
        assert p.fact.gate in ("dense", "leads_dense") and p.fact.margin is not None


@pytest.mark.parametrize("text", ["哈哈哈", "早上好呀", "在吗？"])
def test_small_talk_brings_nothing(demo, text):
    from memory import services

    stream = services.resolve_stream(platform="qq", kind="direct", external_id=f"fresh-{text}", name="新对话")
    ctx = recall.prepare_turn(stream_id=stream.pk, speaker_id=demo["owner"].pk, text=text)
    result = recall.confirm_turn(turn_id=ctx.turn_id)
    assert result.used_vector is True and len(result.facts) <= 1  # at most a clear leader of a channel


def test_a_relevant_turn_still_recalls(demo):
    facts = _turn(demo, "小林最近在忙什么")
    assert facts[0] == "小林最近在学日语"
    assert "主人最近在学做菜" not in facts
