"""Invented facts: a reply that states something a tool owns, with no tool result behind it.

A fact is **owned** by a tool when only the tool can know it: whether a table or a room is
free, that a booking is made or a card frozen, an order's status, a time of day, a price, a
ticket's state. An agent that says one without calling the tool has made it up ("We have a
table for free on Friday at 7:42 PM", "We clone on Sunday at 12:00 PM").

The check is rule-based, not a judge model: each agent's data file lists the owned facts it
must not state unaided (``owned_facts``: names from :data:`OWNED` below, the patterns shared
by every agent) and what its instructions do give it (``allowed``: patterns removed from
the reply before the check, e.g. Luigi's "parking is free after 6 pm"). A reply is checked
only when the turn called no tool (in engines mode the first generation is all there is,
so no tool result stands behind any of its words; in server mode a turn that called a tool
had its result). Matching is case-insensitive, on the reply with ``allowed`` removed, and a
match is not an invention:

- when the caller said it: its words occur in what was heard ("room 312" repeated back),
  or its numbers do ("your ticket 14002" for "my ticket 1,400,2": a number heard in groups
  is one number);
- when it is asked about, not stated: within the same clause after "if", "whether",
  "check", "see" or "let me" ("let me check whether a table is free").

What it misses: facts worded in a way no pattern covers ("Friday evening works"), and a
tool-owned fact that happens to be in the instructions and not listed in ``allowed``
counts as invented (a false positive). Each pattern is kept narrow for that reason; the
unit tests (``tests/unit/bench/test_tool_eval_agents.py``) show what each catches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_NUMBER = (
    r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty"
    r"|thirty|forty|fifty|a few|few)"
)
_HOUR = r"(?:1[0-2]|0?[1-9]|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_WEEKDAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)days?"

OWNED: Mapping[str, str] = {
    # a time of day: "7:42 PM", "12:00", "at seven o'clock", "noon" after at/from/until
    "clock_time": (
        rf"\b{_HOUR}(?::[0-5]\d)?\s*(?:a\.?\s?m\b\.?|p\.?\s?m\b\.?|o'clock\b)"
        rf"|\b{_HOUR}(?: thirty| fifteen| forty-five)? in the (?:morning|afternoon|evening)\b"
        r"|\b(?:[01]?\d|2[0-3]):[0-5]\d\b"
        r"|\b(?:at|from|until|till|by) (?:noon|midnight)\b"
    ),
    # something is free or taken: "we have a table", "a room is available", "fully booked"
    "availability": (
        r"\b(?:we|i) (?:do )?(?:have|'ve got|have got) (?:a |an |one |two |some )?(?:free |open )?"
        r"(?:tables?|rooms?|slots?|appointments?|openings?)\b"
        r"|\b(?:tables?|rooms?|slots?|appointments?|openings?|times?)\s(?:is |are )?(?:still )?"
        r"(?:free|available)\b"
        r"|\b(?:free|available) (?:tables?|rooms?|slots?|appointments?|openings?)\b"
        rf"|\b(?:is|are) (?:free|available) (?:on|at|today|tonight|tomorrow|this|{_WEEKDAY})\b"
        r"|\b(?:has|have) (?:free |open |available )?(?:appointments|slots|openings)\b"
        r"|\bhas (?:an? |one )?(?:free |open |available )?(?:appointment|slot|opening|table|room)s?"
        r"\b"
        r"|\byou can (?:see|come|book|have|get)\b[^.?!]*?"
        rf"\b(?:today|tonight|tomorrow|on {_WEEKDAY}|{_WEEKDAY})\b"
        r"|\bfully booked\b"
        r"|\bno (?:tables?|rooms?|slots?|appointments?) (?:left|free|available)\b"
    ),
    # an action done: "I've booked", "your card is frozen", "you're all booked"
    "done": (
        r"\b(?:i'?ve|i have|we'?ve|we have|it'?s|it has been|has been|have been|is now|is|are)"
        r" (?:now |just |already )?(?:booked|reserved|cancell?ed|confirmed|frozen|blocked|"
        r"unfrozen|unlocked|reset|ordered|scheduled|opened|logged|started)\b"
        r"|\byou(?:'re| are) (?:all )?(?:booked|set|confirmed|booked in)\b"
    ),
    "appointment_when": r"\byour (?:next )?appointment is (?:on|at|for)\b",
    # how long until something arrives: "8 minutes"
    "minutes_away": rf"\b{_NUMBER} minutes?\b",
    "money": (
        r"[$€£]\s?\d"
        rf"|\b{_NUMBER}(?:[,.]\d+)*(?: hundred| thousand)? (?:dollars|euros|pounds|bucks)\b"
    ),
    "on_the_way": (r"\bon (?:its|the|their) way\b|\byour (?:driver|car|taxi|cab) (?:is|will be)\b"),
    "ticket_number": r"\b(?:your|the new|a new) ticket (?:number )?(?:is )?#?\d+",
    "ticket_state": (
        r"\b(?:ticket|it)(?: [\d,]+)? (?:is|has been|was) (?:now |currently |still )?(?:open|"
        r"closed|resolved|fixed|in progress|assigned|escalated|being worked on|with an engineer)\b"
        r"|\bstatus (?:is|of) \W?(?:open|closed|resolved|fixed|in progress|pending)\b"
    ),
    "room_number": r"\broom (?:number )?\d+\b",
    "order_state": (
        r"\b(?:has|was|is|it'?s)(?: been)? (?:already )?(?:shipped|dispatched|delivered|sent out|"
        r"out for delivery|in transit|being processed|processing|lost)\b"
    ),
    "arrival": (
        rf"\b(?:arriv\w*|be delivered|get to you|be there) (?:on {_WEEKDAY}|on|by|within|"
        rf"today|tomorrow|{_WEEKDAY}|in {_NUMBER})\b"
    ),
    "stock": (
        r"\b(?:is|are|it'?s|they'?re) (?:currently )?(?:in stock|out of stock|sold out)\b"
        r"|\b\w+ cop(?:y|ies) (?:left|in stock|available)\b"
        r"|\bwe (?:do )?have (?:it|a copy|copies|that book)\b"
    ),
    "card_state": (
        r"\b(?:card|it) (?:is|has been) (?:now )?(?:frozen|blocked|unfrozen|active|stopped|"
        r"locked)\b|\bbalance (?:is|of)\b"
    ),
    # when the place is open: "we are closed on Mondays", "we're open today"
    "opening_state": (
        rf"\b(?:we(?:'re| are)|we) (?:open|closed|close|clone)\b(?: on| from| every| today| "
        rf"tonight| tomorrow| at| {_WEEKDAY})"
        rf"|\bclosed on {_WEEKDAY}\b"
    ),
}
"""The owned-fact patterns an agent's ``owned_facts`` may name (case-insensitive)."""

_ASKING = re.compile(r"\b(?:if|whether|check|see|let me|could|can i)\b[^.!?,;]*$", re.I)


@dataclass(frozen=True)
class Invented:
    fact: str  # the name in OWNED
    text: str  # what the reply said


class FactChecker:
    """One agent's owned facts and what its instructions allow it to say."""

    def __init__(self, owned: Sequence[str], allowed: Sequence[str] = ()) -> None:
        unknown = [name for name in owned if name not in OWNED]
        if unknown:
            raise ValueError(f"unknown owned facts {unknown}; known: {sorted(OWNED)}")
        self.owned = {name: re.compile(OWNED[name], re.I) for name in owned}
        self.allowed = [re.compile(pattern, re.I) for pattern in allowed]

    def find(self, reply: str, heard: str = "") -> list[Invented]:
        """The owned facts ``reply`` states that the caller did not say (module docstring)."""
        text = reply.replace("’", "'")
        for pattern in self.allowed:
            text = pattern.sub(" ", text)
        said = f" {_plain(heard)} "
        out = []
        for name, pattern in self.owned.items():
            for match in pattern.finditer(text):
                if _plain(match[0]) and f" {_plain(match[0])} " in said:
                    continue
                if _numbers_said(match[0], said):
                    continue
                if _ASKING.search(text[: match.start()]):
                    continue
                out.append(Invented(name, match[0].strip()))
        return out


def _numbers_said(fact: str, said: str) -> bool:
    """A fact whose numbers the caller said, worded otherwise: "your ticket number 14002"
    for "my ticket number 1,400,2", "11 am" for "11am" (zeros, as in "10:00", need not be)."""
    numbers = [n for n in re.findall(r"\d+", _plain(fact)) if n.strip("0")]
    heard = set(re.findall(r"\d+", said))
    return bool(numbers) and all(n in heard for n in numbers)


def _plain(text: str) -> str:
    """Lower-case words; a number written in groups is one ("1,400,2" as Whisper heard
    "fourteen thousand and two" is 14002, as a reply says it back)."""
    joined = re.sub(r"(?<=\d)[ ,.](?=\d)", "", text.lower())
    return " ".join(re.findall(r"[a-z0-9]+", joined))
