"""A small restaurant agent for the spoken tool tests (``test_tools_spoken.py``): it books
tables into a SQLite file named by ``RESTAURANT_DB``, and is served with
``VOXPIPE_AGENT=tests/e2e/restaurant_agent.py:agent``.

The prompt is what ``python -m bench tool-calls`` found dependable for the embedded 0.5B
model: worked examples, the 24-hour hints, and times narrowed to the bookable slots (an enum
the call's grammar enforces). The booking's result is a sentence the agent can say: shown a
JSON record, the 0.5B model reads it out as it is.
"""

from __future__ import annotations

import datetime
import os
import sqlite3
from typing import Literal

from voxpipe.agent import Agent, tool

Slot = Literal[
    "12:00", "12:30", "13:00", "13:30", "14:00", "14:30", "18:00", "18:30",
    "19:00", "19:30", "20:00", "20:30", "21:00", "21:30", "22:00", "22:30",
]  # fmt: skip

# The agent's calendar is always a Sunday, so its prompt is the same all week: with the real
# date the prompt changed each day, and so could the model's calls (a test that passed on a
# Sunday could fail on the Monday after, when the restaurant is closed). It is the coming
# Sunday, not a fixed one: the server asks about a date the caller never said unless it is
# from today to two weeks ahead (conversation/confirmation.py), and a fixed Sunday fell
# behind the clock (every booking "tonight" was asked about from 2026-12-08 on).
_REAL_TODAY = datetime.date.today()
TODAY = _REAL_TODAY + datetime.timedelta(days=(6 - _REAL_TODAY.weekday()) % 7)
TOMORROW = TODAY + datetime.timedelta(days=1)


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ.get("RESTAURANT_DB", "restaurant.sqlite3"))
    db.execute(
        "CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY, name TEXT, "
        "party_size INTEGER, date TEXT, time TEXT)"
    )
    return db


@tool(phrase="Let me book that for you.")
def book_table(name: str, party_size: int, date: str, time: Slot) -> str:
    """Book a table for the caller: their surname, how many guests, the date (YYYY-MM-DD)
    and the time (24-hour)."""
    with _db() as db:
        db.execute(
            "INSERT INTO bookings (name, party_size, date, time) VALUES (?, ?, ?, ?)",
            (name, party_size, date, time),
        )
    day = "tonight" if date == TODAY.isoformat() else f"on {date}"
    # A sentence, not a record: the small model tends to say its tool's result as it is.
    return f"Your table for {party_size} under the name {name} is booked {day} at {time}."


@tool(effect="read_only", phrase="Let me check.")
def check_availability(party_size: int, date: str, time: Slot) -> dict[str, object]:
    """Check whether a table is free at a date (YYYY-MM-DD) and time (24-hour)."""
    return {"available": party_size <= 8, "date": date, "time": time}


@tool(effect="read_only")
def opening_hours(day: str) -> str:
    """The restaurant's opening hours on a day of the week."""
    return "closed" if day.lower() == "monday" else "12:00 to 15:00 and 18:00 to 23:00"


INSTRUCTIONS = (
    f"You are the phone assistant of the restaurant Chez Voxpipe. Today is "
    f"{TODAY:%A} {TODAY.isoformat()}; tomorrow is {TOMORROW.isoformat()}. Use a tool whenever "
    "the caller asks to check, book or cancel a table, or asks when the restaurant is open; "
    "otherwise answer in one short spoken sentence. After a booking, confirm it in one short "
    "sentence with the name, the number of guests and the time.\n\n"
    "Examples:\n"
    "Caller: Please reserve a table for six tomorrow at noon, the name is Garcia.\n"
    '<tool_call>\n{"name": "book_table", "arguments": {"name": "Garcia", "party_size": 6, '
    f'"date": "{TOMORROW.isoformat()}", "time": "12:00"}}}}\n</tool_call>\n'
    "Caller: Are you open on Monday?\n"
    '<tool_call>\n{"name": "opening_hours", "arguments": {"day": "monday"}}\n</tool_call>\n'
    "Caller: Thanks, that's all.\n"
    "You're welcome, goodbye!\n\n"
    "Times are 24-hour: add 12 to an afternoon or evening hour (1 pm is 13:00, 7 pm or seven "
    f"tonight is 19:00, 8 pm is 20:00). Tonight means today, {TODAY.isoformat()}."
)

agent = Agent(
    instructions=INSTRUCTIONS,
    tools=[book_table, check_availability, opening_hours],
    name="chez-voxpipe",
)
