"""Whether a tool call's arguments are what the caller said.

The router (``llama_router.py``) may call a lookup on a cue too weak to trust alone: asked
without the conversation, a small model takes a read sentence or a goodbye for a request
and fills a lookup's arguments from nowhere. Such a call is kept only when every argument
it wrote can be found in the caller's words, so a value the model made up never reaches a
tool. The test is on words, loosely: a number may be said as a word ("four", "half past
seven"), an hour on the 24-hour clock as its 12-hour self, "tonight" is a day of "today".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

_WORD = re.compile(r"[a-z0-9]+")
_NUMBERS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
).split()
_TENS = {"thirty": 30, "forty": 40, "fifty": 50}
_ALSO = {"noon": ("12",), "midday": ("12",), "midnight": ("12", "0"), "tonight": ("today",)}
_FILLER = frozenset({"00", "am", "pm", "a", "an", "the", "of", "at", "on", "to", "for", "and"})
"""Parts of a value that the caller need not have said: "19:00" is "seven", "7 pm" is
"seven"; "the station" is "station"."""


def said_words(text: str) -> frozenset[str]:
    """The caller's words as the test compares them: lower case, with each number word
    also as its digits (and "half" as 30, "noon" as 12)."""
    words = set(_WORD.findall(text.lower()))
    words.update(w[:-1] for w in list(words) if len(w) > 3 and w.endswith("s"))  # "Tuesdays"
    for n, name in enumerate(_NUMBERS):
        if name in words:
            words.add(str(n))
    for name, n in _TENS.items():
        if name in words:
            words.add(str(n))
    if "half" in words:
        words.add("30")
    if "quarter" in words:
        words.update(("15", "45"))
    for word, also in _ALSO.items():
        if word in words:
            words.update(also)
    return frozenset(words)


def arguments_said(arguments: Mapping[str, Any], words: frozenset[str]) -> bool:
    """True when the call has at least one argument and every part of every value is among
    ``words`` (:func:`said_words`)."""
    parts = list(_parts(arguments.values()))
    return bool(parts) and all(_heard(part, words) for part in parts)


def values_said(arguments: Mapping[str, Any], words: frozenset[str]) -> bool:
    """True when every part of every value is among ``words`` (vacuously for none): what a
    call being written is stopped on, before its last value."""
    return all(_heard(part, words) for part in _parts(arguments.values()))


def written_so_far(arguments_json: str) -> dict[str, Any]:
    """The arguments of a JSON object still being written whose values are complete: those
    before its last top-level comma, or all of them once it is closed."""
    depth, in_string, escaped, cut = 0, False, False, -1
    for i, char in enumerate(arguments_json):
        if escaped:
            escaped = False
        elif in_string:
            escaped = char == "\\"
            in_string = char != '"'
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                cut = i + 1
                break
        elif char == "," and depth == 1:
            cut = i
    if cut < 0:
        return {}
    text = arguments_json[:cut] if arguments_json[cut - 1] == "}" else arguments_json[:cut] + "}"
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _parts(values: Iterable[Any]) -> Iterable[str]:
    for value in values:
        if value is None or value == "" or isinstance(value, bool):
            continue
        if isinstance(value, Mapping):
            yield from _parts(value.values())
        elif isinstance(value, list | tuple):
            yield from _parts(value)
        elif isinstance(value, float) and value.is_integer():
            yield str(int(value))
        else:
            yield from (w for w in _WORD.findall(str(value).lower()) if w not in _FILLER)


def _heard(part: str, words: frozenset[str]) -> bool:
    if part in words:
        return True
    if part.isdigit() and 13 <= int(part) <= 23:  # an hour on the 24-hour clock
        return str(int(part) - 12) in words
    if part.isdigit() and len(part) > 1 and part.startswith("0"):  # "09" of "09:30"
        return str(int(part)) in words
    return False
