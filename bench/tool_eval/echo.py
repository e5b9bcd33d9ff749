"""What counts as the agent repeating the caller's words instead of answering them.

A reply **echoes** an utterance when, after normalisation (lower case, punctuation and
hyphens gone, digits spelt out as Whisper and the model write them interchangeably), it
contains at least :data:`ECHO_SHARE` (80 %) of the utterance's words **in order**: the
longest common subsequence of the two word lists covers 80 % of the caller's words. Words
the reply adds around them do not save it ("He was not an ill-disposed young man. How can
I help?" is an echo), and a few words changed by the model or by STT do not hide one.

An utterance of fewer than :data:`MIN_WORDS` words is not measured: a reply to "Hi there."
that says "Hi there!" is a greeting, not a parrot. The echo rate is echoes over the
utterances measured.

Its known false positive: a short yes/no question answered by restating it ("Is there a
dress code?" -> "Yes, there is a dress code.") counts as an echo. Long utterances, such
as the read sentences, are where the rate means what it says.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ECHO_SHARE = 0.8
MIN_WORDS = 4

_DIGITS = "zero one two three four five six seven eight nine".split()


def words(text: str) -> list[str]:
    """Lower-case words without punctuation; "ill-disposed" is two, "7" is "seven"."""
    text = text.lower().replace("'", "")
    text = re.sub(r"\d", lambda m: f" {_DIGITS[int(m[0])]} ", text)
    return re.findall(r"[a-z]+", text)


def common_in_order(a: Sequence[str], b: Sequence[str]) -> int:
    """The length of the longest common subsequence of ``a`` and ``b``."""
    if not a or not b:
        return 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def echo_share(caller: str, reply: str) -> float | None:
    """The share of the caller's words the reply repeats in order; None when the caller
    said fewer than :data:`MIN_WORDS` words (not measured)."""
    said = words(caller)
    if len(said) < MIN_WORDS:
        return None
    return common_in_order(said, words(reply)) / len(said)


def is_echo(caller: str, reply: str) -> bool | None:
    """True if ``reply`` echoes ``caller``; None when not measured (module docstring)."""
    share = echo_share(caller, reply)
    return None if share is None else share >= ECHO_SHARE


def echo_rate(pairs: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """(echoes, utterances measured) over (caller, reply) pairs."""
    verdicts = [v for v in (is_echo(c, r) for c, r in pairs) if v is not None]
    return sum(verdicts), len(verdicts)
