"""Acting on a caller's yes: a tool that changes something asks first.

Speech recognition mishears, and a small model fills gaps with what it has to hand (the
agent's own name, a day nobody said). A tool whose policy says ``confirm`` is therefore not
run when the model calls it. Instead:

1. Any free-text argument the caller never said (a name absent from every word they spoke
   in this call) is asked for, not used: "Sorry, what name should I put it under?" The
   agent's own name (the one its instructions give it: "You are Sofia") is asked for even
   when the caller said it, since a caller greets the agent by it ("Hi Sofia, a table for
   two"); it is used only when the caller gives it in answer to that question.
2. Otherwise the agent reads the action back ("A table for two tomorrow at 7 pm, under
   Kilroy. Shall I book it?") and keeps it as the session's one :class:`PendingAction`.
3. The caller's next turn decides. A plain yes runs exactly that call, with no model in
   between; anything else (a no, a change, another question) drops it and the model hears
   the turn as usual. A readback is never acted on later than the turn that answers it.

Yes and no are read by rule (:func:`consent_in`), not by the model: "yes, but make it
eight" is not a yes, and a rule cannot be talked into one.

A tool that changes something but does not ask first still never runs on a value made up
whole: a free-text argument of which neither the caller nor any tool result of the call
gave a single word (a booking "under the name Garcia" when the STT lost the name) is
asked for instead, as in step 1 (:func:`unheard_fields`, ``whole``). Any word of it heard
is enough there: such a tool's summaries and notes are the model's paraphrase of the
caller.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import enum
import json
import logging
import re
import string
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from voxpipe.agent import InvalidArguments, Tool
from voxpipe.conversation.history import History
from voxpipe.conversation.said_days import (
    WEEKDAYS,
    day_written_as,
    is_a_day,
    the_day_said,
    written_date,
)
from voxpipe.conversation.said_times import hour_of, is_a_time, the_time_said, written_as
from voxpipe.engines.base import ToolCallRequest, ToolSpec
from voxpipe.engines.call_grounding import said_words, unsaid_numbers, values_said

log = logging.getLogger("voxpipe.tools")

_YES = {
    "yes", "yeah", "yep", "yup", "ya", "yah", "sure", "correct", "right", "ok", "okay",
    "absolutely", "definitely", "certainly", "please", "perfect", "great", "fine", "exactly",
}  # fmt: skip
_YES_PHRASES = ("go ahead", "do it", "book it", "that's right", "that is right", "sounds good")
_NO = {
    "no", "nope", "nah", "not", "don't", "dont", "cancel", "stop", "wait", "wrong",
    "actually", "instead", "change", "but", "hold", "never",
}  # fmt: skip
_WORD = re.compile(r"[a-z0-9']+")
SPELLING_MIN_CHARS = 4  # shorter words must match exactly: "ann" is not "dan"
SPELLING_RATIO = 0.8  # difflib's similarity at which two spellings are one word heard
_CALENDAR_WORDS = frozenset(
    "today tonight tomorrow yesterday morning afternoon evening night noon midnight am pm "
    "monday tuesday wednesday thursday friday saturday sunday week weekend "
    "january february march april may june july august september october november december".split()
)  # what a model derives from "tonight" or "next Friday": not a word the caller must say
_FREE_TEXT_KEYS = ("pattern", "enum", "const", "format")  # a value the schema narrows
_OWN_NAME = re.compile(
    r"\b(?i:you are|you're|your name is|i am|i'm|my name is|this is|named|called)\s+"
    r"([A-Z][A-Za-z'-]+)"
)  # "You are Sofia, the host": a capitalised word after these is the agent's name


class Consent(enum.Enum):
    YES = "yes"
    NO = "no"
    UNCLEAR = "unclear"


def consent_in(transcript: str) -> Consent:
    """Whether a turn answers a readback with a plain yes. Any word of doubt or change
    makes it not a yes; a turn of more than eight words is a new request, not an answer."""
    words = _WORD.findall(transcript.lower())
    if not words:
        return Consent.UNCLEAR
    if any(w in _NO for w in words):
        return Consent.NO
    text = " ".join(words)
    if len(words) <= 8 and (any(w in _YES for w in words) or any(p in text for p in _YES_PHRASES)):
        return Consent.YES
    return Consent.UNCLEAR


@dataclass(frozen=True)
class PendingAction:
    """A call read back to the caller, waiting for their yes; ``turn_id``: the turn that
    read it back (only a later turn may approve it)."""

    turn_id: int
    request: ToolCallRequest


@dataclass(frozen=True)
class Question:
    """Values asked for (:func:`question_for`) by turn ``turn_id``; a later turn answers.
    ``call``: the call that lacked them, whose other values the answer's call keeps."""

    turn_id: int
    fields: frozenset[str]
    call: ToolCallRequest | None = None


class Confirmation:
    """What a session waits for from its caller before a tool that asks first runs: the one
    readback awaiting a yes (:attr:`pending`), and the values asked for (:attr:`question`).
    Each is answered by the next turn only; :meth:`turn_done` drops what that turn left."""

    def __init__(self, history: History) -> None:
        self._history = history
        self.pending: PendingAction | None = None
        self.question: Question | None = None

    def hold(self, action: PendingAction) -> None:
        """``action`` was read back: it runs only if the next turn says yes."""
        self.pending = action

    def approved(self, transcript: str) -> ToolCallRequest | None:
        """The call a turn that says ``transcript`` approves (a plain yes to the readback
        still pending), else None; it is only taken by :meth:`take_approved`."""
        if self.pending is None or consent_in(transcript) is not Consent.YES:
            return None
        return self.pending.request

    def take_approved(self, turn_id: int, call: ToolCallRequest) -> bool:
        """Whether turn ``turn_id`` may run ``call`` without a readback: it is the pending
        call, read back by an earlier turn. Taking it ends the wait."""
        pending = self.pending
        if pending is None or pending.turn_id >= turn_id:
            return False
        if pending.request.call_id != call.call_id or pending.request.arguments != call.arguments:
            return False  # a yes is to the values read back, and to no others
        self.pending = None
        return True

    def read_back(self, call: ToolCallRequest) -> bool:
        """``call`` is the one read back and awaiting a yes: its values are the caller's to
        approve, not anyone's to change."""
        return self.pending is not None and self.pending.request.call_id == call.call_id

    def ask(self, turn_id: int, fields: Iterable[str], call: ToolCallRequest | None = None) -> None:
        """Turn ``turn_id`` asked the caller for ``fields`` (of ``call``): the next turn
        answers."""
        self.question = Question(turn_id, frozenset(fields), call)

    def completed(self, turn_id: int, call: ToolCallRequest, said_now: str) -> ToolCallRequest:
        """``call``, made by turn ``turn_id``, as the answer to a question for its values:
        the asked values are the new call's, and so is any other the caller said now
        (``said_now``: "Smith, and make it eight"); the rest are the asked call's. A small
        model asked again writes the name it was given and loses the party and the time."""
        asked = self.question
        if asked is None or asked.call is None or asked.turn_id >= turn_id:
            return call
        if asked.call.name != call.name or call.error:
            return call
        words = said_words(said_now)
        arguments = dict(asked.call.arguments)
        for name, value in call.arguments.items():
            if name in asked.fields or name not in arguments or _said_now(value, words):
                arguments[name] = value
        if arguments == dict(call.arguments):
            return call
        return dataclasses.replace(call, arguments=arguments, arguments_json=json.dumps(arguments))

    def answers(self, turn_id: int, name: str) -> bool:
        """Whether turn ``turn_id`` answers a question for argument ``name``."""
        asked = self.question
        return asked is not None and asked.turn_id < turn_id and name in asked.fields

    def caller_words(self) -> str:
        """Everything the caller said in this call that the history still holds."""
        return " ".join(m.content for m in self._history.turns if m.role == "user")

    def backed_words(self) -> str:
        """What the caller said in this call and what its tools returned: the words a value
        of a call may come from."""
        return " ".join(m.content for m in self._history.turns if m.role in ("user", "tool"))

    def own_names(self) -> frozenset[str]:
        """The agent's own names, as its instructions in force give them."""
        return own_names(self._history.system_prompt)

    def turn_done(self, turn_id: int) -> None:
        """A turn after the readback's has ended: whatever it said, the readback is no
        longer what the caller answers (a yes two turns later is not to it)."""
        if self.pending is not None and self.pending.turn_id < turn_id:
            self.pending = None
        if self.question is not None and self.question.turn_id < turn_id:
            self.question = None


def own_names(instructions: str) -> frozenset[str]:
    """The names an agent's instructions give it ("You are Sofia", "this is Sofia"), in
    lower case: a small model writes them where the caller's name is missing."""
    return frozenset(name.lower() for name in _OWN_NAME.findall(instructions))


def unheard_fields(
    tool: Tool,
    arguments: Mapping[str, Any],
    heard: str,
    own: frozenset[str] = frozenset(),
    answer: str = "",
    whole: bool = False,
    caller: str | None = None,
) -> list[str]:
    """The free-text string arguments (no pattern, enum or format in the schema) whose
    words were never ``heard``: only the model could have written them. A word of the
    agent's own name (``own``) counts as heard only in ``answer``: the caller's words in
    reply to a question for that argument.

    ``whole``: only values made up whole, of which not one word was heard; and only words
    of letters are judged (a date, a time or a weekday is the model's reading of "tonight"
    or "at seven", not words to find); a whole number must have been said, as a word or in
    digits (a party of 20 from "a table for free people").

    Either way, in any string argument, narrowed by the schema or not: a number nobody
    said (the "2023" of a date written for a read sentence; a date up to two weeks ahead is
    the model's reading of "Friday"), and a weekday the caller (``caller``, else ``heard``)
    never named, are asked for."""
    heard_words = set(_WORD.findall(heard.lower())) | said_words(heard)  # "8" of "eight"
    answered = set(_WORD.findall(answer.lower())) | said_words(answer)
    named = said_words(f"{heard if caller is None else caller} {answer}")
    today = datetime.date.today()
    numbers = said_words(f"{heard} {answer}")
    properties = tool.spec.parameters.get("properties") or {}
    missing = []
    for name, value in arguments.items():
        prop = properties.get(name)
        if whole and _is_count(value, prop):
            if str(value) not in numbers:  # not 20 for "eight pm", as a lookup may read it
                missing.append(name)
            continue
        if not isinstance(value, str) or not value.strip():
            continue
        words = _WORD.findall(value.lower())
        if _unsaid_weekday(words, named, today) or (
            not _coming_day(value, today) and unsaid_numbers(value, numbers)
        ):
            missing.append(name)  # "Sunday", "20 October 2023" for a read sentence
            continue
        if not isinstance(prop, dict) or prop.get("type") != "string":
            continue
        if any(k in prop for k in _FREE_TEXT_KEYS):
            continue
        if whole:
            words = [w for w in words if w.isalpha() and w not in _CALENDAR_WORDS]
        said = [_was_said(w, answered if w in own else heard_words) for w in words]
        if words and not (any(said) if whole else all(said)):
            missing.append(name)
    return missing


COMING_DAYS = 14
"""A date this close ahead is the model's reading of "tomorrow" or "on Friday": its
numbers need not have been said. A date in the past or further ahead must have been."""


def _coming_day(value: str, today: datetime.date) -> bool:
    """``value`` reads as a date from ``today`` to :data:`COMING_DAYS` ahead ("2026-12-08",
    "12 December", "Saturday, December 12")."""
    written = written_date(value)
    date = written.on(today.year) if written is not None else None
    if written is not None and written.year is None and date is not None and date < today:
        date = written.on(today.year + 1)  # the next such day
    return date is not None and 0 <= (date - today).days <= COMING_DAYS


def _unsaid_weekday(words: list[str], heard: frozenset[str], today: datetime.date) -> bool:
    """A weekday in a value that the caller never named (``heard``: :func:`said_words`, so
    "Tuesdays" is "tuesday" and "tonight" is "today"): not said, nor today's or tomorrow's
    when they said "today" or "tomorrow", nor a weekend day when they said "weekend"."""
    named = set(heard)
    if "today" in heard:
        named.add(WEEKDAYS[today.weekday()])
    if "tomorrow" in heard:
        named.add(WEEKDAYS[(today.weekday() + 1) % 7])
    if "weekend" in heard:
        named.update(("saturday", "sunday"))
    return any(w in WEEKDAYS and w not in named for w in words)


def leave_out(
    call: ToolCallRequest, spec: ToolSpec, unsaid: Iterable[str]
) -> tuple[ToolCallRequest, list[str]]:
    """``call`` less the ``unsaid`` arguments its schema does not require (an argument the
    caller need not give is left out, not asked for), and the required ones, to ask for."""
    required = set(spec.parameters.get("required", ()))
    unsaid = list(unsaid)
    optional = {name for name in unsaid if name not in required}
    asked = [name for name in unsaid if name in required]
    if not optional:
        return call, asked
    kept = {k: v for k, v in call.arguments.items() if k not in optional}
    return dataclasses.replace(call, arguments=kept, arguments_json=json.dumps(kept)), asked


def as_said(
    tool: Tool, call: ToolCallRequest, words: str, unheard: Collection[str]
) -> ToolCallRequest:
    """``call`` with a time or day it wrote put back as the one time and the one weekday
    the caller's ``words`` name, where they differ ("seven thirty" written as 10:30 pm,
    "Friday" as 20 October 2023): ``said_times.py``, ``said_days.py``. Only a value that
    would be asked for (``unheard``: :func:`unheard_fields`) is written again, and a time
    whose hour the caller said as another number ("a table for eight at seven" written for
    8 pm): a value the caller said stays, whatever a rule makes of their words. Kept as
    written, too, when the caller named no time or several, when the call holds two times
    or two days (a stay's arrival and departure), or when the tool refuses the new values."""
    time, day = the_time_said(words), the_day_said(words)
    values = call.arguments.values()
    if sum(map(is_a_time, values)) > 1:  # from and to: which is which is the model's
        time = None
    if sum(map(is_a_day, values)) > 1:
        day = None
    if (time is None and day is None) or call.error:
        return call
    numbers = said_words(words)
    today = datetime.date.today()
    spec = tool.spec.parameters.get("properties") or {}
    arguments = dict(call.arguments)
    for name, value in call.arguments.items():
        if not isinstance(value, str):
            continue
        again = None
        if time is not None and (name in unheard or hour_of(value) in numbers):
            again = written_as(value, time)
        if again is None and day is not None and name in unheard and _a_day_to_come(spec, name):
            again = day_written_as(value, day, today)
        if again is not None:
            arguments[name] = again
    changed = [name for name in arguments if arguments[name] != call.arguments[name]]
    if not changed:
        return call
    try:
        tool.validate(arguments)
    except InvalidArguments:
        return call
    log.info("%s: %s written again as the caller said", call.name, ", ".join(changed))
    return dataclasses.replace(call, arguments=arguments, arguments_json=json.dumps(arguments))


_NOT_TO_COME = re.compile(r"birth|born|dob|expir|issued|since|last|previous")


def _a_day_to_come(properties: Mapping[str, Any], name: str) -> bool:
    """Argument ``name`` may be the day a weekday names (a booking's, an appointment's),
    not a date of birth or a card's expiry."""
    prop = properties.get(name)
    about = f"{name} {prop.get('description', '') if isinstance(prop, dict) else ''}"
    return not _NOT_TO_COME.search(about.lower())


def _is_count(value: object, prop: object) -> bool:
    """An integer argument that the schema leaves open (no enum, no const)."""
    if not isinstance(prop, dict) or prop.get("type") != "integer":
        return False
    narrowed = "enum" in prop or "const" in prop
    return _whole_number(value) and not narrowed


def _whole_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _said_now(value: object, words: frozenset[str]) -> bool:
    """Whether the caller said ``value`` in an answer. A whole number only as itself: the
    reading of an hour on the 24-hour clock that a time needs ("eight" as 20) would let a
    party of 20 stand for "at eight"."""
    if _whole_number(value):
        return str(value) in words
    return values_said({"value": value}, words)


def _was_said(word: str, heard: set[str]) -> bool:
    """``word`` is among the caller's words, or spelled like one: the STT hears "more"
    where the model writes "Moore", "smyth" for "Smith"."""
    if word in heard:
        return True
    if len(word) < SPELLING_MIN_CHARS:
        return False
    return any(difflib.SequenceMatcher(None, word, w).ratio() >= SPELLING_RATIO for w in heard)


def question_for(fields: Iterable[str], opening: str = "Sorry, I didn't catch that.") -> str:
    """Ask for values the caller has not given ("what name should I use?")."""
    *others, last = [_spoken(f) for f in fields]
    listed = f"{', '.join(others)} and {last}" if others else last
    return f"{opening} What {listed} should I use?"


def readback(tool: Tool, arguments: Mapping[str, Any], valid: Mapping[str, Any]) -> str:
    """What the agent says before it acts: the tool's own sentence (``confirm`` as a
    function of the validated arguments, or a template over the model's, ``{name}`` and the
    like), else every argument in words."""
    template = tool.policy.confirm
    if callable(template):
        try:
            said = template(dict(valid))
        except Exception:
            log.exception("tool %s: its readback failed; the generic one is said", tool.name)
        else:
            if isinstance(said, str) and said.strip():
                return said.strip()
    elif isinstance(template, str) and template:
        fields = {k: _value(v) for k, v in arguments.items()}
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f}
        return template.format_map({**dict.fromkeys(names, ""), **fields}).strip()
    said = ", ".join(f"{_spoken(k)} {_value(v)}" for k, v in arguments.items() if v is not None)
    action = ", ".join(part for part in (_spoken(tool.name), said) if part)
    return f"Just to confirm: {action}. Shall I go ahead?"


def _spoken(name: str) -> str:
    return name.replace("_", " ").replace("-", " ").strip()


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{_spoken(str(k))} {_value(v)}" for k, v in value.items())
    return str(value)
