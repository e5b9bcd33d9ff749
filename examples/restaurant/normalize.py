"""Turning what a caller said (as a small model passes it on) into dates, times, sizes, names.

A 0.5B model copies the caller's words into a tool's arguments: "tonight", "Friday",
"seven", "7pm", "half past seven", "two people", "Mr. Smith". The tools take those as they
come and normalise them here, so a loose argument still books the right table, and a value
that cannot be read is refused with a sentence the model can say back ("I could not read
'blue' as a time"). Every function raises :class:`Unreadable` (a ``ValueError``) for that.

The rules are a restaurant's: a bare hour from 1 to 11 is in the evening ("seven" is
19:00) unless the caller says "am" or "morning", since nobody books dinner at 7 a.m.
A weekday names the next such day, today included ("Friday" on a Friday is tonight);
"next Friday" on a Friday is a week on.

The evaluation (``bench/tool_eval``) scores arguments after these same functions
(:func:`normalize_arguments`), so "7pm" and "19:00" count as the same answer.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAY_SHORT = {day[:3]: i for i, day in enumerate(WEEKDAYS)} | {"tues": 1, "thur": 3, "thurs": 3}
MONTHS = (
    "january february march april may june july august september october november december"
).split()

_NUMBERS = {
    word: n
    for n, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
}
_NUMBERS |= {"a": 1, "an": 1, "single": 1, "couple": 2, "pair": 2, "both": 2}
_MINUTE_WORDS = {
    "fifteen": 15,
    "thirty": 30,
    "forty-five": 45,
    "forty five": 45,
    "o'clock": 0,
    "oclock": 0,
    "forty": 40,
    "twenty": 20,
    "ten": 10,
    "five": 5,
    "fifty": 50,
    "oh five": 5,
}
_HONORIFICS = {"mr", "mrs", "ms", "miss", "mister", "missus", "dr", "doctor", "sir", "madam"}
_NAME_FILLER = {"the", "name", "under", "for", "of", "is", "please", "its", "it's", "called"}


_TODAY = {
    "today",
    "tonight",
    "evening",
    "afternoon",
    "lunch",
    "dinner",
    "lunchtime",
    "now",
    "later",
    "later today",
    "later on",
}
_PART_OF_DAY = {
    "night",
    "evening",
    "afternoon",
    "lunch",
    "lunchtime",
    "dinner",
    "at lunch",
    "for lunch",
    "for dinner",
    "at dinner",
    "morning",
}


class Unreadable(ValueError):
    """A value the caller's words do not give; the message says what was not understood."""


def today() -> dt.date:
    """The restaurant's today (its local clock). Tests replace it."""
    return dt.date.today()


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[,!?;]", " ", str(text).lower())).strip(" .")


# -- dates -------------------------------------------------------------------------------------


def parse_date(value: Any, on: dt.date | None = None) -> dt.date:
    """``today``/``tonight``/``tomorrow``, a weekday ("Friday", "next Friday", "this Fri"),
    an ISO date, or a day and month ("14 March", "March 14th"), counted from ``on``."""
    base = on or today()
    text = _words(value)
    if not text:
        raise Unreadable("no date was given")
    text = re.sub(r"^(on|for|this coming|this|coming)\s+", "", text)
    first, _, rest = text.partition(" ")
    if text in _TODAY or (first in ("today", "tonight") and rest in _PART_OF_DAY):
        return base
    if first == "tomorrow" and (not rest or rest in _PART_OF_DAY):
        return base + dt.timedelta(days=1)
    if text in ("the day after tomorrow", "day after tomorrow"):
        return base + dt.timedelta(days=2)
    weekday = _weekday_in(text)
    if weekday is not None:
        ahead = (weekday - base.weekday()) % 7
        if text.startswith("next ") and ahead == 0:
            ahead = 7
        return base + dt.timedelta(days=ahead)
    iso = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", text)
    if iso:
        try:
            return dt.date(int(iso[1]), int(iso[2]), int(iso[3]))
        except ValueError:
            raise Unreadable(f"{value!r} is not a date on the calendar") from None
    day_month = _day_and_month(text, base)
    if day_month is not None:
        return day_month
    raise Unreadable(
        f"I could not read {str(value)!r} as a date: say today, tomorrow, a weekday or a date"
    )


def _weekday_in(text: str) -> int | None:
    words = text.replace("'s", "").split()
    if not words or len(words) > 3:
        return None
    for word in words:
        word = word.rstrip("s") if word.endswith("days") else word
        if word in WEEKDAYS:
            return WEEKDAYS.index(word)
        if word in _WEEKDAY_SHORT:
            return _WEEKDAY_SHORT[word]
    return None


def _day_and_month(text: str, base: dt.date) -> dt.date | None:
    """ "14 March", "March 14th", "the 14th of March", "14/3": the next such date; "3
    January 1999": that date, past or not (the booking refuses a past one in words)."""
    text = re.sub(r"\b(the|of)\b", " ", text)
    text = re.sub(r"(\d+)(st|nd|rd|th)\b", r"\1", text)
    month = day = year = None
    for word in text.split():
        if re.fullmatch(r"\d{4}", word) and year is None:
            year = int(word)
            continue
        if word[:3] in (m[:3] for m in MONTHS) and month is None:
            month = next(i + 1 for i, m in enumerate(MONTHS) if m.startswith(word[:3]))
        elif word.isdigit() and day is None:
            day = int(word)
    slash = re.fullmatch(r"(\d{1,2})/(\d{1,2})", text.strip())
    if slash:  # day/month, as written outside the US
        day, month = int(slash[1]), int(slash[2])
    if month is None or day is None:
        return None
    if year is not None:  # a year said is the year meant, even one gone by
        try:
            return dt.date(year, month, day)
        except ValueError:
            raise Unreadable(f"{day} {MONTHS[month - 1].title()} {year} is not a date") from None
    for year in (base.year, base.year + 1):
        try:
            candidate = dt.date(year, month, day)
        except ValueError:
            raise Unreadable(f"{day} {MONTHS[month - 1].title()} is not a date") from None
        if candidate >= base:
            return candidate
    return None


def parse_day(value: Any, on: dt.date | None = None) -> str:
    """A day of the week ("Friday"), from anything :func:`parse_date` reads."""
    return WEEKDAYS[parse_date(value, on).weekday()].title()


# -- times -------------------------------------------------------------------------------------


def parse_time(value: Any) -> dt.time:
    """ "7", "seven", "7pm", "7.30", "19:00", "half past seven", "quarter to eight",
    "noon"; a bare hour from 1 to 11 is p.m. (module docstring)."""
    text = _words(value).replace("p.m", "pm").replace("a.m", "am").replace(".", ":")
    text = re.sub(r"^(at|around|about|for|say)\s+", "", text)
    text = re.sub(r"\s*(tonight|this evening|in the evening|at night)$", " pm", text).strip()
    if not text:
        raise Unreadable("no time was given")
    if text in ("noon", "midday", "lunchtime", "12 noon", "twelve noon"):
        return dt.time(12, 0)
    meridiem = None
    found = re.search(r"\s*\b(am|pm|in the morning|in the afternoon)$", text)
    if found is None:
        found = re.search(r"(am|pm)$", text)  # "7pm"
    if found:
        meridiem = "am" if found[1] in ("am", "in the morning") else "pm"
        text = text[: found.start()].strip()
    hour, minute = _clock(text, value)
    if hour > 23 or minute > 59:
        raise Unreadable(f"{str(value)!r} is not a time of day")
    if meridiem == "pm" and hour < 12:
        hour += 12
    elif meridiem == "am" and hour == 12:
        hour = 0
    elif meridiem is None and 1 <= hour <= 11:
        hour += 12
    return dt.time(hour, minute)


def _clock(text: str, original: Any) -> tuple[int, int]:
    digits = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?(?:\s*o'?clock)?", text)
    if digits:
        return int(digits[1]), int(digits[2] or 0)
    compact = re.fullmatch(r"(\d{1,2})(\d{2})", text)  # "1930", "730"
    if compact:
        return int(compact[1]), int(compact[2])
    relative = re.fullmatch(r"(half|quarter|\w+(?: minutes?)?) (past|after|to) (.+)", text)
    if relative:
        hour = _hour_word(relative[3], original)
        amount = {"half": 30, "quarter": 15}.get(relative[1])
        if amount is None:
            amount = _number(relative[1].split()[0], original)
        if relative[2] == "to":
            return (hour - 1) % 24 or 12, 60 - amount
        return hour, amount
    words = text.replace("o'clock", "").replace("oclock", "").split()
    if (words and words[0] in _NUMBERS) or (words and words[0].isdigit()):
        hour = _hour_word(words[0], original)
        rest = " ".join(words[1:])
        if not rest:
            return hour, 0
        if rest in _MINUTE_WORDS:
            return hour, _MINUTE_WORDS[rest]
        if rest.isdigit():
            return hour, int(rest)
    raise Unreadable(f"I could not read {str(original)!r} as a time: say for example 7pm or 19:30")


def _hour_word(word: str, original: Any) -> int:
    word = word.strip()
    if word.isdigit():
        return int(word)
    if word in ("noon", "midday"):
        return 12
    return _number(word, original)


def _number(word: str, original: Any) -> int:
    if word in _NUMBERS:
        return _NUMBERS[word]
    raise Unreadable(f"I could not read {str(original)!r} as a time: say for example 7pm or 19:30")


def format_time(value: dt.time) -> str:
    return f"{value.hour:02d}:{value.minute:02d}"


# -- party size and name -----------------------------------------------------------------------


def parse_party_size(value: Any) -> int:
    """2, "2", "two", "two people", "a party of four", "a couple": the number of guests."""
    if isinstance(value, bool):
        raise Unreadable(f"{value!r} is not a number of people")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = _words(value)
    text = re.sub(r"\b(people|persons|person|guests|guest|of us|diners|adults|pax)\b", " ", text)
    text = re.sub(r"\b(party of|table for|for|just|only|us)\b", " ", text).strip()
    if text.isdigit():
        return int(text)
    for word in text.replace("-", " ").split():
        if word.isdigit():
            return int(word)
        if word in _NUMBERS and word not in ("a", "an"):
            return _NUMBERS[word]
    if text in ("a", "an", "me", "myself", "one"):
        return 1
    raise Unreadable(f"I could not read {str(value)!r} as a number of people")


def parse_name(value: Any) -> str:
    """The surname a booking is under, as written in the book: "mr. smith" is "Smith",
    "the name is jones" is "Jones"; a first name and surname keep both ("Anna Rossi")."""
    text = re.sub(r"[^\w\s'-]", " ", str(value)).strip()
    words = [w for w in text.split() if w.lower() not in _HONORIFICS]
    while words and words[0].lower() in _NAME_FILLER:
        words.pop(0)
    if not words:
        raise Unreadable(f"I could not read {str(value)!r} as a name")
    return " ".join(
        w[:1].upper() + w[1:].lower() if w.islower() or w.isupper() else w for w in words
    )


# -- arguments as a tool takes them ------------------------------------------------------------


def normalize_arguments(
    tool: str, arguments: Mapping[str, Any], on: dt.date | None = None
) -> dict[str, Any]:
    """A tool call's arguments in the one form the tool acts on: dates ISO, times HH:MM,
    party sizes int, names as booked, days as weekday names. A value that cannot be read
    is kept as given (it then matches nothing but itself)."""
    readers = {
        "date": lambda v: parse_date(v, on).isoformat(),
        "day": lambda v: parse_day(v, on),
        "time": lambda v: format_time(parse_time(v)),
        "party_size": parse_party_size,
        "name": parse_name,
    }
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        reader = readers.get(key)
        if reader is None or value is None:
            out[key] = value
            continue
        try:
            out[key] = reader(value)
        except Unreadable:
            out[key] = value
    return out
