"""The time of day a caller said, put back where the model wrote another.

A small model reads "seven thirty" and writes ``10:30 pm``; "this Thursday at six thirty"
comes out as ``12:30 PM``. The made-up value check (``confirmation.unheard_fields``) then
asks "What time should I use?" of a caller who said it, and a time the model took from
another number the caller said ("a table for eight at seven" written as ``8 pm``) passes
that check and runs. When the caller's words of the turn name exactly one time, a
time-shaped value that differs from it is written again as that time, in the form the model
used (``7:30 pm``, ``19:30``), and the tool's own validation has the last word. A spoken
twelve with no am or pm is noon.

Only a clock time with its context is read as one: "at seven", "seven thirty", "7:30",
"half past six", "twenty to eight", "half seven", "8 pm", "eight o'clock", "noon"; "a table
for seven" is a party, not a time, and "5821" is a reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from voxpipe.engines.call_grounding import NUMBER_WORDS

_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}
_BEFORE_A_TIME = frozenset({"at", "around", "about", "by", "until", "till", "from", "after"})
_TO = frozenset({"to", "til", "till"})
_PAST_TO = frozenset({"past", "after", *_TO})
_RANGE_FROM = frozenset({"from", "between", "for"})  # "from five to eight": a range;
# "a table for five to eight": a party, as likely as a time
_LOOSE = frozenset({"around", "about"})  # "for around 8": a party as likely as a time
_NOT_A_TIME_AFTER = frozenset(
    "people persons person guests of us adults children kids minutes hours nights days "
    "rooms tickets pounds dollars euros percent reservations bookings tables seats more "
    "things".split()
)
_NOT_A_TIME_BEFORE = frozenset(
    "number extension order reference room flight code pin account card ticket booking "
    "table platform gate bus route apartment flat suite unit version".split()
)  # "extension four twelve", "room seven fifteen"
_AFTER_AN_HOUR = frozenset(
    "tonight today tomorrow this next on for please then and or if sharp instead with so "
    "but is works would will okay ok monday tuesday wednesday thursday friday saturday "
    "sunday".split()
)  # what may follow a bare "at eight": not "at 5 Main Street"
_TOKEN = re.compile(r"\d{1,2}:\d{2}|\d+|[a-z]+")
_TIME_VALUE = re.compile(r"^\s*(\d{1,2})(?::(\d{2}))?(\s*)([ap]\.?m\.?)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class SaidTime:
    """A clock time as said: ``hour`` 1-12 unless said on the 24-hour clock (13-23, 0),
    ``meridiem`` "am", "pm" or None when the caller left it to be understood."""

    hour: int
    minute: int
    meridiem: str | None = None

    @property
    def on_the_dial(self) -> tuple[int, int]:
        """Hour (1-12) and minute: what "seven thirty" and 19:30 share."""
        return (self.hour - 1) % 12 + 1, self.minute


def times_said(text: str) -> list[SaidTime]:
    """The clock times in a caller's words, in order."""
    text = text.lower().replace("p.m.", "pm").replace("a.m.", "am").replace("o'clock", "oclock")
    text = re.sub(r"\b(\d{1,2})\.(\d{2})\b", r"\1:\2", text)  # "7.30"
    words = _TOKEN.findall(text)
    found: list[SaidTime] = []
    i = 0
    while i < len(words):
        said, used = _time_at(words, i)
        if said is not None:
            found.append(said)
            i += used
        else:
            i += 1
    return found


def _time_at(words: list[str], i: int) -> tuple[SaidTime | None, int]:
    """A time starting at ``words[i]`` and how many words it takes."""
    word = words[i]
    if word in ("noon", "midday"):
        return SaidTime(12, 0, "pm"), 1
    if word == "midnight":
        return SaidTime(12, 0, "am"), 1
    around = _around_an_hour(words, i)
    if around is not None:
        return around
    if ":" in word:
        clock_hour, clock_minute = (int(part) for part in word.split(":"))
        if clock_hour > 23 or clock_minute > 59:
            return None, 0
        meridiem, extra = _meridiem(words, i + 1)
        return SaidTime(clock_hour, clock_minute, meridiem), 1 + extra
    before = words[i - 1] if i > 0 else ""
    context = before in _BEFORE_A_TIME and not (
        before in _LOOSE and i > 1 and words[i - 2] == "for"
    )
    if word.isdigit() and len(word) in (3, 4):  # "at 730", "1930"
        hour, minute = int(word[:-2]), int(word[-2:])
        meridiem, extra = _meridiem(words, i + 1)
        if hour > 23 or minute > 59 or not (context or meridiem):
            return None, 0
        return SaidTime(hour, minute, meridiem), 1 + extra
    said_hour = _hour(word)
    if said_hour is None or before in _NOT_A_TIME_BEFORE:
        return None, 0
    minute, taken = _minutes(words, i + 1)
    meridiem, extra = _meridiem(words, i + 1 + taken)
    after = words[i + 1 + taken + extra] if i + 1 + taken + extra < len(words) else ""
    if after in _NOT_A_TIME_AFTER:
        return None, 0
    said_so = taken or (meridiem is not None and extra > 0)  # "tonight" alone says less
    if not said_so and not (context and (not after or after in _AFTER_AN_HOUR)):
        return None, 0  # a bare number: "at eight" only before what may follow a time
    return SaidTime(said_hour, minute, meridiem), 1 + taken + extra


def _around_an_hour(words: list[str], i: int) -> tuple[SaidTime | None, int] | None:
    """A time said from the hour: "twenty past seven", "ten to eight", "quarter after six",
    "twenty-five minutes past nine", and the British "half seven" (7:30); None when the
    words at ``i`` are none of these. "From five to eight" and "two to four" are ranges,
    and "for five to eight" or "ten to twelve people" a party: none is a time."""
    before = words[i - 1] if i > 0 else ""
    minute, taken = _minutes_of_an_hour(words, i)
    if not taken:
        return None
    j = i + taken
    if j < len(words) and words[j] in ("minute", "minutes"):
        j += 1
    elif minute % 5:  # "two to four" is a range; "two minutes to four" a time
        return None
    if j + 1 < len(words) and words[j] in _PAST_TO:
        hour = _hour(words[j + 1])
        before_the_hour = words[j] in _TO
        if hour is None or (before_the_hour and (before in _RANGE_FROM or minute == 30)):
            return None
        if before_the_hour:
            hour, minute = (hour - 2) % 12 + 1, 60 - minute
        end = j + 2
    elif words[i] == "half" and j == i + 1 < len(words):
        hour = _hour(words[j])  # "half seven": half past, as said in Britain
        if hour is None:
            return None
        end = j + 1
    else:
        return None
    meridiem, extra = _meridiem(words, end)
    after = words[end + extra] if end + extra < len(words) else ""
    if after in _NOT_A_TIME_AFTER:
        return None, 0
    return SaidTime(hour, minute, meridiem), end + extra - i


def _minutes_of_an_hour(words: list[str], i: int) -> tuple[int, int]:
    """The minutes said before "past" or "to" ("half", "a quarter", "ten", "twenty five",
    "20") and the words they take; (0, 0) for none."""
    word = words[i]
    if word == "half":
        return 30, 1
    if word == "quarter":
        return 15, 1
    if word == "a" and i + 1 < len(words) and words[i + 1] == "quarter":
        return 15, 2
    if word.isdigit() and 0 < int(word) < 30 and len(word) <= 2:
        return int(word), 1
    if word == "twenty":
        if i + 1 < len(words) and words[i + 1] in NUMBER_WORDS[1:10]:
            return 20 + NUMBER_WORDS.index(words[i + 1]), 2
        return 20, 1
    if word in NUMBER_WORDS[1:20]:
        return NUMBER_WORDS.index(word), 1
    return 0, 0


def _hour(word: str) -> int | None:
    if word.isdigit():
        n = int(word)
    elif word in NUMBER_WORDS:
        n = NUMBER_WORDS.index(word)
    else:
        return None
    return n if 1 <= n <= 12 else None


def _minutes(words: list[str], i: int) -> tuple[int, int]:
    """The minutes after an hour ("thirty", "forty five", "oh five", "15", "oclock") and
    the words they take; (0, 0) for none."""
    if i >= len(words):
        return 0, 0
    word = words[i]
    if word == "oclock":
        return 0, 1
    if word.isdigit() and len(word) == 2 and int(word) < 60:
        return int(word), 1
    if word in ("oh", "o") and i + 1 < len(words) and words[i + 1] in NUMBER_WORDS[1:10]:
        return NUMBER_WORDS.index(words[i + 1]), 2
    if word in _TENS:
        tens = _TENS[word]
        if i + 1 < len(words) and words[i + 1] in NUMBER_WORDS[1:10]:
            return tens + NUMBER_WORDS.index(words[i + 1]), 2
        return tens, 1
    if word in NUMBER_WORDS[10:20]:  # "seven fifteen"; "seven ten"
        return NUMBER_WORDS.index(word), 1
    return 0, 0


def _meridiem(words: list[str], i: int) -> tuple[str | None, int]:
    if i < len(words) and words[i] in ("am", "pm"):
        return words[i], 1
    if i + 2 < len(words) and words[i : i + 2] == ["in", "the"]:
        if words[i + 2] in ("evening", "afternoon", "night"):
            return "pm", 3
        if words[i + 2] == "morning":
            return "am", 3
    if i < len(words) and words[i] == "tonight":
        return "pm", 0  # the word is the day's too: left for the next reader
    return None, 0


def the_time_said(text: str) -> SaidTime | None:
    """The one time the words name (said once or more); None for none or several."""
    times = {said.on_the_dial: said for said in times_said(text)}
    return next(iter(times.values())) if len(times) == 1 else None


def is_a_time(value: object) -> bool:
    """``value`` is written as a clock time ("7 pm", "19:30", "noon"), not a bare number."""
    if not isinstance(value, str):
        return False
    match = _TIME_VALUE.match(value)
    return value.strip().lower() == "noon" or (
        match is not None and bool(match.group(2) or match.group(4))
    )


def written_as(value: str, said: SaidTime) -> str | None:
    """``said`` in the form of the model's time ``value`` ("10:30 pm" -> "7:30 pm",
    "22:30" -> "19:30"); None when ``value`` is no time or already says it."""
    match = _TIME_VALUE.match(value)
    if match is None or value.strip().lower() == "noon":
        return None
    hour, minute = int(match.group(1)), int(match.group(2) or 0)
    space, meridiem = match.group(3), match.group(4)
    if not match.group(2) and not meridiem:
        return None  # a bare number: a count as likely as an hour
    if SaidTime(hour, minute).on_the_dial == said.on_the_dial:
        return None
    evening = said.hour >= 12 or said.meridiem == "pm"
    if said.meridiem is None and 0 < said.hour < 12:  # the model's reading of am or pm stands
        evening = hour >= 12 if meridiem is None else meridiem.lower().startswith("p")
    twelve, minutes = said.on_the_dial
    width = 2 if match.group(1).startswith("0") or not meridiem else 1  # "07:00 pm" stays
    if meridiem is None:  # the 24-hour clock
        return f"{twelve % 12 + (12 if evening else 0):0{width}d}:{minutes:02d}"
    mark = "pm" if evening else "am"
    if meridiem.isupper():
        mark = mark.upper()
    if "." in meridiem:
        mark = f"{mark[0]}.{mark[1]}."
    clock = f"{twelve:0{width}d}" + (f":{minutes:02d}" if match.group(2) or minutes else "")
    return f"{clock}{space}{mark}"


def hour_of(value: str) -> str | None:
    """The hour on the dial of a time the model wrote ("8" for "8 pm" and "20:00"), as the
    caller would have said it; None for no time."""
    match = _TIME_VALUE.match(value)
    if match is None or not is_a_time(value):
        return None
    return str(SaidTime(int(match.group(1)), 0).on_the_dial[0])
