"""The time a query names: "in October 2023", "on 13 October, 2023", "2023年10月13日".

A question that names a date asks about what happened then (time-aware query expansion, as
LongMemEval calls it): facts dated inside that window are boosted in the ranking
(:func:`memory.engine.scoring.rank`, ``time_boost``). A day without a year ("4月30号那天", "what
did we do on May 2?") is the last such day up to the turn's time (``now``): people ask about
days they lived through, and a chat names them so ("我在4月30号为什么心情不好"). After a copula
("生日是05月18日的人") the date is an attribute of the thing asked about, not the time it
happened, and is not read. Relative phrases ("last week", "上周") are left out.

Forms (English month names in full or three letters; a Chinese day may end in 日 or 号):

* a day: ``13 October 2023``, ``13th of October, 2023``, ``October 13, 2023``, ``2023年10月13日``,
  ``2023-10-13``;
* a month: ``October 2023``, ``2023年10月``;
* a year: ``in 2023`` / ``during 2023`` / ``of 2023``, ``2023年``;
* with ``now`` given, a day without a year: ``4月30日`` / ``4月30号``, ``May 2`` / ``2 May`` /
  ``the 2nd of May`` (a lower-case "may" is the verb).

The window runs from the start of that day, month or year to its end in the given time zone, widened
by :data:`SLACK_MS` on both sides (a fact is dated when it was told, a little after it happened).
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo

__all__ = ["SLACK_MS", "query_window"]

#: How far a fact's date may lie outside the named day, month or year and still count as inside it
#: (one day: chosen on LoCoMo's dev conversations; 0, 1, 3 and 7 days were within 0.1 point of R@5).
SLACK_MS: int = 86_400_000

_MONTHS = {
    name: number
    for number, names in enumerate(
        (("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
         ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"),
         ("november", "nov"), ("december", "dec")),
        start=1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_ANY_YEAR = re.compile(r"(?:19|20)\d\d")  # every form holds one: the other patterns run only then
_FORMS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I), "dmy"),
    (re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.I), "mdy"),
    (re.compile(r"(?<!\d)((?:19|20)\d\d)\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), "ymd"),
    (re.compile(r"(?<!\d)((?:19|20)\d\d)-(\d{1,2})-(\d{1,2})(?!\d)"), "ymd"),
    (re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.I), "my"),
    (re.compile(r"(?<!\d)((?:19|20)\d\d)\s*年\s*(\d{1,2})\s*月"), "ym"),
    (re.compile(rf"\b(?:in|during|of|throughout)\s+{_YEAR}\b", re.I), "y"),
    (re.compile(r"(?<!\d)((?:19|20)\d\d)\s*年(?!\s*\d)"), "y"),
)
#: a day without a year (read only with ``now``): the last such day up to it
_DAY_FORMS: tuple[tuple[re.Pattern[str], str], ...] = (
    # not after a copula: "生日是05月18日" says what a date is, not when something happened
    (re.compile(r"(?<![\d年是为])(\d{1,2})\s*月\s*(\d{1,2})\s*[日号](?!\d)"), "md"),
    (re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?!\s*,?\s*\d)", re.I), "Md"),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b(?!\s*,?\s*\d)", re.I), "dM"),
)


def _span(kind: str, groups: tuple[str, ...]) -> tuple[datetime, datetime] | None:
    if kind in ("dmy", "mdy", "my") and "may" in groups:  # "I may 2023" is a verb; the month is capitalised
        return None
    try:
        if kind == "dmy":
            start = datetime(int(groups[2]), _MONTHS[groups[1].lower()], int(groups[0]))
        elif kind == "mdy":
            start = datetime(int(groups[2]), _MONTHS[groups[0].lower()], int(groups[1]))
        elif kind == "ymd":
            start = datetime(int(groups[0]), int(groups[1]), int(groups[2]))
        elif kind in ("my", "ym"):
            year, month = (int(groups[1]), _MONTHS[groups[0].lower()]) if kind == "my" else (int(groups[0]), int(groups[1]))
            start = datetime(year, month, 1)
            return start, datetime(year + month // 12, month % 12 + 1, 1)
        else:
            start = datetime(int(groups[0]), 1, 1)
            return start, datetime(start.year + 1, 1, 1)
    except ValueError:  # 31 February, month 13
        return None
    return start, start + timedelta(days=1)


def _last_day(kind: str, groups: tuple[str, ...], today: datetime) -> tuple[datetime, datetime] | None:
    """The last day up to ``today`` with the month and day a year-less form names."""
    if kind != "md" and "may" in groups:  # "I may 2 …" is a verb
        return None
    try:
        if kind == "md":
            month, day = int(groups[0]), int(groups[1])
        elif kind == "Md":
            month, day = _MONTHS[groups[0].lower()], int(groups[1])
        else:
            month, day = _MONTHS[groups[1].lower()], int(groups[0])
        for year in (today.year, today.year - 1, today.year - 2, today.year - 3, today.year - 4):  # 29 February
            try:
                start = datetime(year, month, day)
            except ValueError:
                if month == 2 and day == 29:
                    continue
                raise
            if start.date() <= today.date():
                return start, start + timedelta(days=1)
    except ValueError:  # 31 February, month 13
        return None
    return None


def query_window(text: str, tz: tzinfo, now: int | None = None) -> tuple[int, int] | None:
    """``(start, end)`` in epoch ms of the first date ``text`` names (the most specific form found
    first; a date with its year before one without), widened by :data:`SLACK_MS`; ``None`` when it
    names none. Dates are read in ``tz``; a day without a year only with ``now`` (epoch ms)."""
    if not text:
        return None
    found = None
    if _ANY_YEAR.search(text) is not None:
        found = next((span for pattern, kind in _FORMS for match in pattern.finditer(text)
                      if (span := _span(kind, match.groups())) is not None), None)
    if found is None and now is not None:
        today = datetime.fromtimestamp(now / 1000, tz).replace(tzinfo=None)
        found = next((span for pattern, kind in _DAY_FORMS for match in pattern.finditer(text)
                      if (span := _last_day(kind, match.groups(), today)) is not None), None)
    if found is None:
        return None
    start, end = (int(t.replace(tzinfo=tz).timestamp() * 1000) for t in found)
    return start - SLACK_MS, end + SLACK_MS
