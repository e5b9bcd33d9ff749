"""The restaurant agent of ``restaurant_agent.py`` with a booking that takes its time, for
``test_tools_exactly_once.py``: served with
``VOXPIPE_AGENT=tests/e2e/slow_booking_agent.py:agent``.

``book_table`` is mutating and not idempotent (the defaults). Each execution writes a row to
``runs`` as it starts, sleeps ``SLOW_BOOKING_S`` seconds (a slow booking system), then books
the table in ``bookings`` of the SQLite file ``SLOW_BOOKING_DB``. The two tables are how a
test counts executions and sees the tool start and finish from outside the server, across
workers and restarts: a row of ``runs`` without one of ``bookings`` is a run that died.
"""

from __future__ import annotations

import os
import sqlite3
import time as clock

from tests.e2e.restaurant_agent import INSTRUCTIONS, TODAY, Slot, opening_hours
from voxpipe.agent import Agent, tool

SLOW_S = float(os.environ.get("SLOW_BOOKING_S", "4"))


def connect(path: str | None = None) -> sqlite3.Connection:
    """The bookings database (its tables made if new); the test reads it with this too."""
    path = path or os.environ.get("SLOW_BOOKING_DB", "slow_booking.sqlite3")
    db = sqlite3.connect(path, timeout=10)
    db.execute("CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, name TEXT, pid INTEGER)")
    db.execute(
        "CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY, name TEXT, "
        "party_size INTEGER, date TEXT, time TEXT, pid INTEGER)"
    )
    return db


@tool(phrase="Let me book that for you.", timeout_s=SLOW_S + 20)
def book_table(name: str, party_size: int, date: str, time: Slot) -> str:
    """Book a table for the caller: their surname, how many guests, the date (YYYY-MM-DD)
    and the time (24-hour)."""
    with connect() as db:
        db.execute("INSERT INTO runs (name, pid) VALUES (?, ?)", (name, os.getpid()))
    clock.sleep(SLOW_S)
    with connect() as db:
        db.execute(
            "INSERT INTO bookings (name, party_size, date, time, pid) VALUES (?, ?, ?, ?, ?)",
            (name, party_size, date, time, os.getpid()),
        )
    day = "tonight" if date == TODAY.isoformat() else f"on {date}"
    return f"Your table for {party_size} under the name {name} is booked {day} at {time}."


agent = Agent(instructions=INSTRUCTIONS, tools=[book_table, opening_hours], name="slow-booking")
