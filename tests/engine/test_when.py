"""The time a query names (memory.engine.when) and the ranking's time boost."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memory.engine.scoring import DEFAULT_TIME_BOOST, RankCandidate, rank
from memory.engine.when import SLACK_MS, query_window

SHANGHAI = timezone(timedelta(hours=8))


def _ms(*args: int, tz=SHANGHAI) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("What did Mel paint on October 13, 2023?", (2023, 10, 13), (2023, 10, 14)),
        ("the talk on 13 October, 2023", (2023, 10, 13), (2023, 10, 14)),
        ("the trip on the 31st of May 2022", (2022, 5, 31), (2022, 6, 1)),
        ("我2023年10月13日去了哪里", (2023, 10, 13), (2023, 10, 14)),
        ("2023年10月13号那天", (2023, 10, 13), (2023, 10, 14)),
        ("the 2023-10-13 meeting", (2023, 10, 13), (2023, 10, 14)),
        ("What setback did Melanie face in October 2023?", (2023, 10, 1), (2023, 11, 1)),
        ("a trip in Dec, 2022", (2022, 12, 1), (2023, 1, 1)),
        ("2023年12月的事", (2023, 12, 1), (2024, 1, 1)),
        ("How many times has she gone to the beach in 2023?", (2023, 1, 1), (2024, 1, 1)),
        ("2023年我做了什么", (2023, 1, 1), (2024, 1, 1)),
    ],
)
def test_a_named_date_is_a_window_with_slack(text: str, start: tuple, end: tuple) -> None:
    assert query_window(text, SHANGHAI) == (_ms(*start) - SLACK_MS, _ms(*end) + SLACK_MS)


@pytest.mark.parametrize(
    "text",
    [
        "", "那个生日是05月18日的人叫什么", "下周二下午两点的活动在哪", "what did she do last week?", "May 18", "I may 2023",
        "2023-02-31", "room 2023", "我想去杭州玩",
    ],
)
def test_no_year_no_window(text: str) -> None:
    assert query_window(text, SHANGHAI) is None


NOW = _ms(2023, 5, 7, 9)  # a turn on 7 May 2023, 09:00 in Shanghai


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("我在4月30号为什么会心情不好", (2023, 4, 30)),
        ("在5月2日我们聊了哪些话题", (2023, 5, 2)),
        ("5 月 7 日早上吃了什么", (2023, 5, 7)),  # today
        ("12月24日那天去了哪", (2022, 12, 24)),  # not yet this year: last year's
        ("What did we talk about on May 2?", (2023, 5, 2)),
        ("the party on the 3rd of May", (2023, 5, 3)),
        ("on 29 February", (2020, 2, 29)),  # the last leap day
        ("我2021年5月2日和5月3日去了哪", (2021, 5, 2)),  # a year named: that date first
    ],
)
def test_a_day_without_a_year_is_the_last_one_up_to_now(text: str, day: tuple) -> None:
    start = _ms(*day)
    assert query_window(text, SHANGHAI, NOW) == (start - SLACK_MS, start + 86_400_000 + SLACK_MS)


@pytest.mark.parametrize("text", ["I may 2 times go", "13月2日", "2月30号", "版本 2.5月3", "我想去杭州玩",
                                  "那个生日是05月18日的人叫什么", "截止日期为6月1日"])
def test_not_a_day_without_a_year(text: str) -> None:
    assert query_window(text, SHANGHAI, NOW) is None


def test_the_window_is_read_in_the_given_zone() -> None:
    assert query_window("on 1 March 2024", UTC) == (_ms(2024, 3, 1, tz=UTC) - SLACK_MS, _ms(2024, 3, 2, tz=UTC) + SLACK_MS)


def test_a_timed_candidate_gets_the_boost_and_the_reference_ignores_it() -> None:
    pool = [
        RankCandidate(id="strong", lexical=0.8, retention=0.5),
        RankCandidate(id="then", lexical=0.78, retention=0.5, timed=True),
    ]
    ranked = rank(pool)
    assert [r.id for r in ranked] == ["then", "strong"]
    then = ranked[0]
    assert then.timed and then.score == pytest.approx(then.calibrated + then.prior + DEFAULT_TIME_BOOST)
    assert [r.id for r in rank(pool, {"time_boost": 0.0})] == ["strong", "then"]
    assert [r.id for r in rank(pool, {"reference_blend": 1})] == ["strong", "then"]


def test_the_boost_does_not_pass_the_gate() -> None:
    ranked = rank([
        RankCandidate(id="match", lexical=0.8, retention=0.5, coverage=1.0),
        RankCandidate(id="then", lexical=0.0, retention=0.5, coverage=0.0, timed=True),
    ])
    assert [(r.id, r.eligible) for r in ranked] == [("match", True), ("then", False)]
