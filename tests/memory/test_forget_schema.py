"""Forgetting leaves none of the forgotten words, nor their index tokens, in any table of the schema.

The check reads the schema itself (:mod:`tests.forget_scan`: every table and every column,
FTS5 shadow and vocab tables included on SQLite, every base table on PostgreSQL), so a table
added later is read too. The store is built the way a deployment fills it: messages, a
quote of them by another person and by the bot, summaries and extraction (the heuristic
providers), facts, turns through the API, relevance labels, an evaluation job's report, an
admin history entry. It runs on the suite's backend (PostgreSQL when ``DATABASE_URL`` is set).
"""
from __future__ import annotations

import json

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import Client

from memory import pipeline
from memory.api.auth import clear_token_cache, issue_token
from memory.models import Fact, Message, Person, Stream, Turn
from memory.privacy import forget
from memory.providers.heuristic import HeuristicExtractor, HeuristicSummariser
from tests import forget_scan

T0 = 1_700_000_000_000
NAME, EXTERNAL = "琥珀鹦鹉", "amber-parrot-913"
SECRETS = ["我住在麒麟巷饕餮楼七号", "我的暗号是鹦鹉螺吞琥珀", "我每天凌晨三点吃榴莲馄饨"]
FACT = "住在麒麟巷饕餮楼"
BOB_LINES = ["今天天气不错，我们去公园散步吧", "周末一起去湖边钓鱼怎么样"]
BOT_REPLY = "好的，我记住了："
BOB_QUOTE = "她说过{}，好有趣"
KEPT = [*BOB_LINES, BOT_REPLY, BOB_QUOTE.format(""), "喜欢去公园散步", "周末去哪里玩", forget.REDACTED,
        forget.REDACTED_SUMMARY, "隐私测试群", "鲍勃", "bob-12", "g-privacy"]


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.MEMORY_ENQUEUE_TASKS = False
    settings.EMBEDDING_PROVIDER = "none"
    settings.SUMMARIZE_TRIGGER_MESSAGES = 8
    settings.SUMMARIZE_BATCH_MESSAGES = 8
    settings.FACT_EXTRACT_TRIGGER_MESSAGES = 6
    settings.FACT_EXTRACT_BATCH_MESSAGES = 12
    clear_token_cache()
    yield
    clear_token_cache()


class World:
    """The API with an admin token, and the store built by :meth:`fill`."""

    S = {"platform": "qq", "kind": "group", "external_id": "g-privacy", "name": "隐私测试群"}
    ALICE = {"platform": "qq", "external_id": EXTERNAL, "name": NAME}
    BOB = {"platform": "qq", "external_id": "bob-12", "name": "鲍勃"}

    def __init__(self) -> None:
        _, token = issue_token("forget-scan", ["admin"])
        self.client, self.headers = Client(), {"Authorization": f"Bearer {token}"}
        self.at = T0

    def post(self, path: str, body: dict) -> dict:
        r = self.client.post(f"/api/v1/{path}", json.dumps(body), content_type="application/json", headers=self.headers)
        assert r.status_code < 300, (path, r.status_code, r.content)
        return r.json()

    def say(self, who: dict | None, text: str) -> dict:
        self.at += 60_000
        body = {"stream": self.S, "role": "user" if who else "assistant", "content": text, "at": self.at}
        if who:
            body["sender"] = who
        return self.post("messages", body)

    def fill(self) -> dict[str, int]:
        from tuning import evaluation, relevance

        alice = message = None
        for round_ in range(2):
            for secret in SECRETS:
                said = self.say(self.ALICE, f"{secret}。真的{round_}")
                alice, message = said["person_id"], message or said["id"]
                self.say(self.BOB, BOB_LINES[round_])
                self.say(None, f"{BOT_REPLY}{secret}")
        self.say(self.BOB, BOB_QUOTE.format(SECRETS[1]))
        fact = self.post("facts", {"person": self.ALICE, "content": FACT, "kind": "身份", "at": self.at})["fact_id"]
        self.post("facts", {"person": self.BOB, "content": "喜欢去公园散步", "kind": "偏好", "at": self.at})
        stream = Stream.objects.get(external_id="g-privacy").pk
        for _ in range(4):
            pipeline.summarize_stream(stream_id=stream, summariser=HeuristicSummariser(), at=self.at)
            pipeline.extract_stream(stream_id=stream, extractor=HeuristicExtractor(), at=self.at)
        turn = self.post("turns", {"stream": self.S, "speaker": self.ALICE, "text": SECRETS[2], "impression": SECRETS[0],
                                   "at": self.at})["turn_id"]
        bob_turn = self.post("turns", {"stream": self.S, "speaker": self.BOB, "text": "周末去哪里玩", "at": self.at})
        self.post(f"turns/{bob_turn['turn_id']}/confirm", {"at": self.at})
        relevance.set_label(turn_id=turn, fact_id=fact, relevant=True, user="reviewer", at=self.at)
        job = evaluation.submit_evaluation(evaluation.resolve_target(params={}), max_turns=10)
        assert evaluation.run_job(job.pk, vectors=evaluation.QueryVectors(None)) is True
        user = get_user_model().objects.create_user("admin-op")
        for model, pk, text in ((Person, alice, NAME), (Fact, fact, FACT), (Message, message, SECRETS[0])):
            LogEntry.objects.create(user=user, content_type=ContentType.objects.get_for_model(model), object_id=str(pk),
                                    object_repr=text, action_flag=CHANGE,
                                    change_message=json.dumps([{"changed": {"fields": ["content"]}}]))
        return {"alice": alice, "fact": fact, "turn": turn, "message": message, "stream": stream}


def _where(hits) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for table, column, needle in hits:
        out.setdefault(f"{table}.{column}", []).append(needle)
    return out


@pytest.mark.django_db
def test_forgetting_a_person_leaves_none_of_their_words_or_tokens_in_any_table(django_capture_on_commit_callbacks):
    world = World()
    ids = world.fill()
    forget.refresh_statistics()  # as autovacuum's analyse would have (PostgreSQL)
    looked_for = forget_scan.needles([*SECRETS, FACT, NAME, EXTERNAL], KEPT)
    assert len(looked_for) > 30  # the sentences, the name and their distinctive words and character pairs
    before = _where(forget_scan.scan(looked_for))
    # the scan finds them where a deployment keeps them: the point of reading the whole schema
    for place in ("messages.content", "messages.tokens", "facts.content", "facts.tokens", "episodes.summary",
                  "turns.text", "jobs.result", "django_admin_log.object_repr", "identities.external_id"):
        assert place in before, (place, sorted(before))
    lexical = [p for p in before if p.startswith(("messages_fts", "lexical_postings"))]
    assert lexical, sorted(before)  # the index's terms (FTS5 vocab and shadow tables / PostgreSQL postings)
    if connection.vendor == "postgresql":
        assert "pg_stats.histogram_bounds" in before  # the planner's samples of the columns

    with django_capture_on_commit_callbacks(execute=True):  # what runs after the commit runs too
        forget.forget(target="person", target_id=ids["alice"], user="op")

    assert _where(forget_scan.scan(looked_for)) == {}
    # what is not theirs stays
    assert Message.objects.filter(content=BOB_LINES[0]).exists()
    assert Fact.objects.filter(content="喜欢去公园散步").exists()
    assert Turn.objects.filter(text="周末去哪里玩").exists()


@pytest.mark.django_db
def test_the_scan_finds_the_change_log_when_forget_leaves_it(monkeypatch):
    """The change log is where the tokens of deleted messages used to stay: without its scrub the scan says so."""
    world = World()
    ids = world.fill()
    looked_for = forget_scan.needles(SECRETS, KEPT)
    monkeypatch.setattr(forget, "scrub_message_changes", lambda ids: 0)
    forget.forget(target="person", target_id=ids["alice"], user="op")
    assert set(_where(forget_scan.scan(looked_for))) == {"memory_changes.old_tokens"}


@pytest.mark.django_db
def test_forgetting_one_message_leaves_none_of_its_words_or_tokens(django_capture_on_commit_callbacks):
    world = World()
    world.fill()
    secret = "我的备用钥匙藏在蟋蟀罐底下"
    said = world.say(world.BOB, secret)
    world.say(None, f"{BOT_REPLY}{secret}")
    forget.refresh_statistics()
    looked_for = forget_scan.needles([secret], [*KEPT, *SECRETS, FACT, NAME])
    assert "messages.tokens" in _where(forget_scan.scan(looked_for))

    with django_capture_on_commit_callbacks(execute=True):
        forget.forget(target="message", target_id=said["id"], user="op")

    assert _where(forget_scan.scan(looked_for)) == {}
    assert Message.objects.filter(content=BOB_LINES[1]).exists()
    assert Message.objects.filter(content__contains=SECRETS[0]).exists()  # the rest of the store stays


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_resident_message_statistics_of_another_reader_drop_the_forgotten_rows():
    """A reader that loaded the statistics before the forgetting (another process's) ends where a fresh load does:
    the change-log rows holding the tokens are gone, the revision bump makes it reload."""
    from memory.search.lexical_index import ResidentMessages

    world = World()
    ids = world.fill()
    query = ["公园", "麒麟", "鹦鹉", "琥珀", "天气"]
    other = ResidentMessages()
    other.refresh()
    warm = other.scores(ids["stream"], query)
    assert warm is not None and len(warm[0]) > 3

    forget.forget(target="person", target_id=ids["alice"], user="op")

    other.refresh()
    fresh = ResidentMessages()
    fresh.refresh()
    assert (other._rows, other._total_tokens, other._df) == (fresh._rows, fresh._total_tokens, fresh._df)
    assert "麒麟" not in other._df and "鹦鹉" not in other._df
    got, want = other.scores(ids["stream"], query), fresh.scores(ids["stream"], query)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == pytest.approx(want[1].tolist())
    assert set(got[0].tolist()) < set(warm[0].tolist())


@pytest.mark.django_db
def test_forgetting_a_stream_leaves_none_of_its_words_or_tokens(django_capture_on_commit_callbacks):
    world = World()
    ids = world.fill()
    forget.refresh_statistics()
    said = [*SECRETS, *BOB_LINES]
    kept = [forget.REDACTED, forget.REDACTED_SUMMARY, NAME, EXTERNAL, "鲍勃", "bob-12", "喜欢去公园散步"]
    looked_for = forget_scan.needles([*said, FACT], kept)
    assert "turns.text" in _where(forget_scan.scan(looked_for))

    with django_capture_on_commit_callbacks(execute=True):
        forget.forget(target="stream", target_id=ids["stream"], user="op")

    assert _where(forget_scan.scan(looked_for)) == {}
    assert Person.objects.filter(pk=ids["alice"]).exists()  # the persons stay, with the facts not from its messages
    assert Fact.objects.filter(content="喜欢去公园散步").exists()
