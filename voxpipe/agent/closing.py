"""Whether the caller's words close the call, before an agent's ``end_call`` hangs up.

A small model offered ``end_call`` may call it on a plain question too ("What time do you
open on Sunday?"), and hanging up on a caller is the worst mistake a phone agent can
make. So ``end_call`` runs only when the caller's
turn says so in words a person would: a goodbye, "that's all", "hang up"
(``ToolPolicy.only_if_caller_said``).
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


_PERSON = re.compile(
    r"\b(person|human|somebody|someone|agent|operator|representative|manager|staff|"
    r"transfer|put me through|connect me|speak to|talk to)\b"
)


def asks_for_a_person(words: str) -> bool:
    """The caller asks to be put through to a person (``transfer_call``'s gate)."""
    return bool(_PERSON.search(words.lower()))
