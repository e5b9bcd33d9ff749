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
from dataclasses import dataclass

WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
MONTHS = (
    "january february march april may june july august september october november december"
).split()
_OTHER_DAYS = frozenset({"today", "tonight", "tomorrow", "yesterday", *MONTHS} - {"may"})
_WORD = re.compile(r"[a-z]+|\d+")
_DATE_SAID = re.compile(
    r"\b\d{1,2}(st|nd|rd|th)\b|\bmay \d|\d{1,2}(st|nd|rd|th)? of may\b"
)  # "the 11th", "May 4": a date said ("May I book Friday?" names no month)
_ISO = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*$")
_DAY_MONTH = re.compile(
    r"^\s*(\w+,? )?(\d{1,2})(?:st|nd|rd|th)?( of)? ([a-z]+)(,?)(?: (\d{4}))?\s*$", re.IGNORECASE
)
_MONTH_DAY = re.compile(
    r"^\s*(\w+,? )?([a-z]+) (\d{1,2})(?:st|nd|rd|th)?(,?)(?: (\d{4}))?\s*$", re.IGNORECASE
)


@dataclass(frozen=True)
class WrittenDate:
    """A date as a value writes it ("2026-12-11", "11 December", "Friday, December 11"),
    with its form, which a date written again in its place keeps."""

    day: int
    month: int
    year: int | None  # None: the value names none
    form: str  # "iso", "day month" or "month day"
    capital: bool  # the month's name begins with a capital
    plain: bool  # the date alone: two-digit parts, no weekday before, no "of", no stray comma

    def on(self, year: int) -> datetime.date | None:
        """The date in ``year`` (its own year, if it names one); None for no such day."""
        try:
            return datetime.date(self.year or year, self.month, self.day)
        except ValueError:
            return None


def written_date(value: str) -> WrittenDate | None:
    """The date ``value`` writes, or None for no date."""
    if match := _ISO.match(value):
        year, month, day = match.groups()
        plain = len(month) == len(day) == 2
        return WrittenDate(int(day), int(month), int(year), "iso", False, plain)
    if match := _DAY_MONTH.match(value):
        lead, day, of, month, comma, year = match.groups()
        form = "day month"
    elif match := _MONTH_DAY.match(value):
        lead, month, day, comma, year = match.groups()
        of, form = None, "month day"
    else:
        return None
    if month.lower() not in MONTHS:
        return None
    number = MONTHS.index(month.lower()) + 1
    plain = lead is None and of is None and not (comma and not year)
    return WrittenDate(
        int(day), number, int(year) if year else None, form, month[0].isupper(), plain
    )


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
    written = written_date(value)
    return written is not None and written.plain


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
    written = written_date(value)
    if written is None or not written.plain:
        return None
    on = written.on(date.year)
    if on is None or _same_day(on, date):  # no such day ("30 February"): left as written
        return None
    if written.form == "iso":
        return date.isoformat()
    name = MONTHS[date.month - 1]
    name = name.capitalize() if written.capital else name
    again = f"{date.day} {name}" if written.form == "day month" else f"{name} {date.day}"
    return f"{again} {date.year}" if written.year else again


def _same_day(written: datetime.date, coming: datetime.date) -> bool:
    """``written`` is the said weekday, on ``coming`` or a week or more after ("next
    Friday" is the model's to read)."""
    return written.weekday() == coming.weekday() and written >= coming
