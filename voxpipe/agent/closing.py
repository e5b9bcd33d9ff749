"""Whether the caller's words close the call, before an agent's ``end_call`` hangs up.

A small model offered ``end_call`` may call it on a plain question too ("What time do you
open on Sunday?"), and hanging up on a caller is the worst mistake a phone agent can
make. So ``end_call`` runs only when the caller's
turn says so in words a person would: a goodbye, "that's all", "hang up"
(``ToolPolicy.only_if_caller_said``). And when the model answers such words with a goodbye
of its own but no call, :func:`says_goodbye` lets its words stand for the call
(``ToolPolicy.implied_by_reply``).
"""

from __future__ import annotations

import re

_CLOSING = re.compile(
    r"\b(good ?bye|bye|that'?s all|that is all|that will be all|nothing else|hang up|"
    r"end the call|have a (good|nice|great) (day|night|evening|one)|talk to you later|"
    r"see you|take care)\b"
)


def closes_the_call(words: str) -> bool:
    return bool(_CLOSING.search(words.lower().replace("’", "'")))


_FAREWELL = re.compile(
    r"\b(good ?bye|bye|have a (good|nice|great|lovely|wonderful) (day|night|evening|one|weekend)|"
    r"take care|talk to you (later|soon)|see you( soon| then| later)?)\b"
)
_NOT_LEAVING = re.compile(
    r"\b(i'll|i will|let me|one moment|hold on|wait|don't|do not|before you go|"
    r"anything else|something else)\b"
)  # a reply that still acts, or asks: "Before you go, is there anything else?"


def says_goodbye(reply: str) -> bool:
    """The agent's reply takes its leave: its last sentence is a farewell, and it neither
    asks anything nor promises to do something ("I'll book that. Have a great day!" books
    nothing yet). Read on the model's words, unlike :func:`closes_the_call`, whose "that's
    all" and "hang up" are the caller's."""
    text = reply.lower().replace("’", "'").strip()
    if not text or "?" in text or _NOT_LEAVING.search(text):
        return False
    sentences = [s for s in re.split(r"(?<=[.!])\s+", text) if s.strip()]
    return bool(sentences) and bool(_FAREWELL.search(sentences[-1]))


_PERSON = re.compile(
    r"\b(person|human|somebody|someone|agent|operator|representative|manager|staff|"
    r"transfer|put me through|connect me|speak to|talk to)\b"
)


def asks_for_a_person(words: str) -> bool:
    """The caller asks to be put through to a person (``transfer_call``'s gate)."""
    return bool(_PERSON.search(words.lower()))
