"""The weekday a caller said, put back where the model wrote another day.

Asked for "Friday at 730", a small model writes a dated day: ``2023-10-20`` or "20 October
2023", a day that has passed, which the tool refuses or the made-up value check asks about
("What date should I use?") though the caller named the day. When the caller's words of the
turn name exactly one weekday and no other day (no "11th", month, "today" or "tomorrow"), a
date-shaped value that is not that weekday's coming date, or another weekday's name, is
written again as the said day, in the model's form: an ISO date as the coming such day's,
a weekday as the weekday, a day and month as the day and month (with the year only where
the model wrote one).
"""

from __future__ import annotations

import datetime
import re

WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_MONTHS = (
    "january february march april may june july august september october november december"
).split()
_OTHER_DAYS = frozenset({"today", "tonight", "tomorrow", "yesterday", *_MONTHS} - {"may"})
_WORD = re.compile(r"[a-z]+|\d+")
_DATE_SAID = re.compile(
    r"\b\d{1,2}(st|nd|rd|th)\b|\bmay \d|\d{1,2}(st|nd|rd|th)? of may\b"
)  # "the 11th", "May 4": a date said ("May I book Friday?" names no month)
_ISO = re.compile(r"^\s*(\d{4})-(\d{2})-(\d{2})\s*$")
_DAY_MONTH = re.compile(r"^\s*(\d{1,2})(?:st|nd|rd|th)? ([A-Za-z]+)(,? \d{4})?\s*$")
_MONTH_DAY = re.compile(r"^\s*([A-Za-z]+) (\d{1,2})(?:st|nd|rd|th)?(,? \d{4})?\s*$")


def the_day_said(text: str) -> str | None:
    """The one weekday the words name ("friday"), when they name no other day; else None."""
    words = _WORD.findall(text.lower())
    named = {w.removesuffix("s") for w in words if w.removesuffix("s") in WEEKDAYS}
    if len(named) != 1 or any(w in _OTHER_DAYS for w in words) or _DATE_SAID.search(text.lower()):
        return None
    return named.pop()


def is_a_day(value: object) -> bool:
    """``value`` is written as a day: a weekday, an ISO date, a day and month."""
    if not isinstance(value, str):
        return False
    words = value.lower().split()
    if words and all(w in WEEKDAYS or w == "next" for w in words):
        return True
    if _ISO.match(value):
        return True
    match = _DAY_MONTH.match(value) or _MONTH_DAY.match(value)
    return match is not None and any(w in _MONTHS for w in words)


def coming(weekday: str, today: datetime.date) -> datetime.date:
    """The next ``weekday`` from ``today`` on (today itself when it is that day)."""
    return today + datetime.timedelta(days=(WEEKDAYS.index(weekday) - today.weekday()) % 7)


def day_written_as(value: str, weekday: str, today: datetime.date) -> str | None:
    """``weekday`` in the form of the model's day ``value``; None when ``value`` is no day
    or already is that day (or a later one of the same name: "next Friday" stands)."""
    date = coming(weekday, today)
    words = value.lower().split()
    if words and all(w in WEEKDAYS or w == "next" for w in words):
        if words[-1] == weekday:
            return None
        named = value.split()[-1]
        day = weekday.capitalize() if named[0].isupper() else weekday
        return f"{value[: value.rindex(named)]}{day}"  # "next " stays the model's
    if match := _ISO.match(value):
        written = _date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
        return None if written is None or _same_day(written, date) else date.isoformat()
    if (match := _DAY_MONTH.match(value)) and match.group(2).lower() in _MONTHS:
        day, month, year = match.group(1), match.group(2), match.group(3)
    elif (match := _MONTH_DAY.match(value)) and match.group(1).lower() in _MONTHS:
        month, day, year = match.group(1), match.group(2), match.group(3)
    else:
        return None
    number = _MONTHS.index(month.lower()) + 1
    written = _date(int(year.strip(", ")) if year else date.year, number, int(day))
    if written is not None and _same_day(written, date):
        return None
    name = _MONTHS[date.month - 1]
    name = name.capitalize() if month[0].isupper() else name
    again = f"{date.day} {name}" if match.re is _DAY_MONTH else f"{name} {date.day}"
    return f"{again} {date.year}" if year else again


def _same_day(written: datetime.date, coming: datetime.date) -> bool:
    """``written`` is the said weekday, on ``coming`` or a week or more after ("next
    Friday" is the model's to read)."""
    return written.weekday() == coming.weekday() and written >= coming


def _date(year: int, month: int, day: int) -> datetime.date | None:
    try:
        return datetime.date(year, month, day)
    except ValueError:
        return None
