"""The time a query names: "in October 2023", "on 13 October, 2023", "2023年10月13日".

A question that names a date asks about what happened then (time-aware query expansion, as
LongMemEval calls it): facts dated inside that window are boosted in the ranking
(:func:`memory.engine.scoring.rank`, ``time_boost``). Only dates with an explicit year are read —
"5月18日" or "May 18" alone is as often an attribute of the thing asked about (a birthday, an
appointment) as the time it happened — and relative phrases ("last week", "上周") are left out:
they name a time relative to a "now" the question does not share with the memory.

Forms (English month names in full or three letters; a Chinese day may end in 日 or 号):

* a day: ``13 October 2023``, ``13th of October, 2023``, ``October 13, 2023``, ``2023年10月13日``,
  ``2023-10-13``;
* a month: ``October 2023``, ``2023年10月``;
* a year: ``in 2023`` / ``during 2023`` / ``of 2023``, ``2023年``.

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


def query_window(text: str, tz: tzinfo) -> tuple[int, int] | None:
    """``(start, end)`` in epoch ms of the first date ``text`` names (the most specific form found
    first), widened by :data:`SLACK_MS`; ``None`` when it names none. Dates are read in ``tz``."""
    if not text or _ANY_YEAR.search(text) is None:
        return None
    for pattern, kind in _FORMS:
        for match in pattern.finditer(text):
            span = _span(kind, match.groups())
            if span is not None:
                start, end = (int(t.replace(tzinfo=tz).timestamp() * 1000) for t in span)
                return start - SLACK_MS, end + SLACK_MS
    return None
