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
NUMBER_WORDS = (
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
    said = _WORD.findall(text.lower())
    words = set(said)
    words.update(w[:-1] for w in list(words) if len(w) > 3 and w.endswith("s"))  # "Tuesdays"
    words.update(_digit_runs(said))
    for word in said:  # "at 730" is the 7 and the 30 of "7:30 pm"
        if word.isdigit() and len(word) in (3, 4):
            words.update((str(int(word[:-2])), word[-2:]))
    for n, name in enumerate(NUMBER_WORDS):
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


def _digit_runs(said: list[str]) -> Iterable[str]:
    """Digits said one by one, run together: "five eight two one" and "5 8 2 1" are the
    number 5821, as a model writes an order or ticket number it heard that way."""
    run: list[str] = []
    for word in [*said, ""]:
        digit = str(NUMBER_WORDS.index(word)) if word in NUMBER_WORDS[:10] else word
        if len(digit) == 1 and digit.isdigit():
            run.append(digit)
            continue
        if len(run) > 1:
            yield "".join(run)
        run = []


def unsaid_numbers(value: object, words: frozenset[str]) -> list[str]:
    """The numbers in a written value (a day of the month, a year, an order number) that
    are not among ``words`` (:func:`said_words`); an hour on the 24-hour clock counts as
    its 12-hour self, and the "00" of a time as said."""
    return [part for part in _parts([value]) if part.isdigit() and not _heard(part, words)]


def arguments_said(arguments: Mapping[str, Any], words: frozenset[str]) -> bool:
    """True when the call has at least one argument and every part of every value is among
    ``words`` (:func:`said_words`)."""
    parts = list(_parts(arguments.values()))
    return bool(parts) and all(_heard(part, words) for part in parts)


def values_said(arguments: Mapping[str, Any], words: frozenset[str]) -> bool:
    """True when every part of every value is among ``words`` (vacuously for none): what a
    call being written is stopped on, before its last value."""
    return all(_heard(part, words) for part in _parts(arguments.values()))


def said_so_far(arguments_json: str, words: frozenset[str]) -> bool:
    """True while every finished part of the arguments written so far, the value still
    being written included (:func:`open_value_parts`), is among ``words``."""
    cut, opened = _scan(arguments_json)
    return values_said(_finished(arguments_json, cut), words) and all(
        _heard(part, words) for part in _open_parts(arguments_json, opened)
    )


def open_value_parts(arguments_json: str) -> list[str]:
    """The finished parts of a string value the model is still writing at the end of
    ``arguments_json`` ("2023" of ``{"date": "2023-1``), as :func:`values_said` would take
    them from the whole value; the last word is left out while it may still grow. A part
    not said here makes the whole value not said, so a call can be stopped on it before
    the value's last tokens are written. Empty when no string value is open."""
    return _open_parts(arguments_json, _scan(arguments_json)[1])


def _scan(arguments_json: str) -> tuple[int, int]:
    """One pass over a JSON object still being written: where its finished values end (its
    last top-level comma, or just past its closing brace; -1 for none), and where the
    string left open at its end begins, if that string is a value (-1: none, or a key)."""
    nesting: list[str] = []
    in_string = escaped = after_colon = is_value = False
    cut = start = -1
    for i, char in enumerate(arguments_json):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string, start = True, i + 1
            is_value = bool(nesting) and (nesting[-1] == "[" or after_colon)
        elif char in "{[":
            nesting.append(char)
            after_colon = False
        elif char in "}]":
            if nesting:
                nesting.pop()
            if not nesting:
                return i + 1, -1  # closed: every value is finished
        elif char == ":":
            after_colon = True
        elif char == ",":
            after_colon = False
            if len(nesting) == 1:
                cut = i
    return cut, (start if in_string and is_value else -1)


def _finished(arguments_json: str, cut: int) -> dict[str, Any]:
    """The arguments whose values are complete: those before ``cut`` (:func:`_scan`: the
    last top-level comma, or the closing brace), parsed."""
    if cut < 0:
        return {}
    text = arguments_json[:cut] if arguments_json[cut - 1] == "}" else arguments_json[:cut] + "}"
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _open_parts(arguments_json: str, start: int) -> list[str]:
    """:func:`open_value_parts` of the string value that begins at ``start`` (-1: none)."""
    if start < 0:
        return []
    text, whole = _decoded(arguments_json[start:])
    words = _WORD.findall(text.lower())
    if words and (text[-1:].isalnum() or not whole):
        words.pop()
    return [w for w in words if w not in _FILLER]


def _decoded(raw: str) -> tuple[str, bool]:
    """The JSON string text ``raw`` as the value will read, and False when its end had to
    be cut (an escape written in part, ``\\u00``)."""
    for cut in range(6):
        try:
            value = json.loads(f'"{raw[: len(raw) - cut]}"')
        except ValueError:
            continue
        return (value if isinstance(value, str) else raw), cut == 0
    return raw, False


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
