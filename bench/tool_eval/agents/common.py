"""What the evaluation agents share: how a day is written, and the canned answers.

The agents of ``bench/tool_eval/agents/`` are small businesses nobody tuned the model or the
prompting on; their tools answer from fixed data (they are never run in engines mode, where
only the model's first generation is scored, but a server may run them). A day is a word
from a closed list, as the restaurant's schema has it, so the model cannot invent an ISO
date; everything else is the plain type a newcomer would write.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

Weekday = Literal[
    "today",
    "tomorrow",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
]
Day = Annotated[Weekday, Field(description="the day: today, tomorrow or the weekday")]
Clock = Annotated[str, Field(description="the time of day the caller said, with am or pm")]
Surname = Annotated[str, Field(description="the caller's surname")]


def said(message: str, **facts: object) -> dict[str, object]:
    """A tool's answer: its facts and the one sentence an agent would say."""
    return {**facts, "message": message}
