"""Luigi's, a restaurant that answers its phone: the agent and its four tools.

    voxpipe serve --agent examples/restaurant/agent.py:agent     (make example-restaurant)

The tools take the caller's words as a small model passes them on ("tonight", "seven",
"two people", "Mr. Smith") and normalise them before anything else (``normalize.py``):
each argument's type reads it, so the tool body only sees an ISO date, a time of day, a
number and a name, and an argument that cannot be read comes back to the model as an error
that says so. What a tool returns carries a ``message``: one sentence a host would say,
which is the agent's answer as it is (``says="message"``): the 0.5B model, asked to word
a result, repeats its greeting or reads the record out.

The schema the model is shown narrows what it may write for a day and a time
(:data:`DAY_PATTERN`, :data:`TIME_PATTERN`), and the embedded engine's call grammar enforces
it: a day is a word or a day and month, never a made-up ISO date; a time is "7 pm" or
"noon", never 07:00 or 17:00 for "seven". ``python -m bench tool-eval`` measures the effect
on the spoken requests (``docs/benchmarks.md``).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Annotated, Any

import hours
import normalize
from db import LARGEST_TABLE, NoTable, database
from normalize import format_time, parse_date, parse_name, parse_party_size, parse_time
from pydantic import BeforeValidator, Field, WithJsonSchema

from voxpipe.agent import Agent, CallContext, ToolFailed, tool


def _any_case(word: str) -> str:
    return f"[{word[0].upper()}{word[0]}]{word[1:]}"


_WEEKDAY = "|".join(_any_case(day) for day in normalize.WEEKDAYS)
_MONTH = "|".join(_any_case(month) for month in normalize.MONTHS)
DAY_PATTERN = (
    f"^({_any_case('today')}|{_any_case('tonight')}|{_any_case('tomorrow')}"
    f"|([Nn]ext )?({_WEEKDAY})|([1-9]|[12][0-9]|3[01]) ({_MONTH})( [12][0-9]{{3}})?)$"
)
"""A day as the model may write it: a word ("today", "tomorrow", "friday", "next friday")
or a day and month ("14 march"), with the year only if the caller said one ("3 january
1999": refused in words as past, not quietly moved to next January). Not an ISO date: the
model does not know today's date, and given the choice it writes a made-up one."""
TIME_PATTERN = "^([Nn]oon|(1[0-2]|[1-9])(:[0-5][0-9])? ?(pm|PM))$"
"""A time as the model may write it: noon, or an hour of the clock with "pm" ("7 pm",
"8:15 pm"). Every table is seated from noon on, so the schema has no way to say a morning
or a 24-hour time: the model would write "seven" as 07:00 or work out 17:00."""

Day = Annotated[
    dt.date,
    BeforeValidator(lambda v: v if isinstance(v, dt.date) else parse_date(v)),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DAY_PATTERN,
            "description": "the day: today, tomorrow or the weekday the caller said",
        }
    ),
]
Time = Annotated[
    dt.time,
    BeforeValidator(lambda v: v if isinstance(v, dt.time) else parse_time(v)),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": TIME_PATTERN,
            "description": "the time with pm: a bare hour is in the evening",
        }
    ),
]
PartySize = Annotated[
    int,
    Field(ge=1, description="how many people"),
    BeforeValidator(parse_party_size),
]
Name = Annotated[
    str,
    Field(description="the surname the caller gave"),
    BeforeValidator(parse_name),
]
Reference = Annotated[
    str | None,
    BeforeValidator(lambda v: "".join(ch for ch in str(v) if ch.isdigit()) or None if v else None),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string", "pattern": "^[0-9]{4}$"}, {"type": "null"}],
            "default": None,
            "description": "the four-digit booking reference, only if the caller said it",
        }
    ),
]
OptionalDay = Annotated[
    str | None,
    WithJsonSchema(
        {
            "anyOf": [{"type": "string", "pattern": DAY_PATTERN}, {"type": "null"}],
            "default": None,
            "description": "the day the caller asked about; leave out for the whole week",
        }
    ),
]
"""What each argument reads. The schema the model sees is a pattern the call's grammar
enforces (``voxpipe/engines/llama_tools.py``), which keeps a small model to the words it gets
right; the validators read any form (a remote model enforces no grammar) and normalise it."""

INSTRUCTIONS = """\
You are Sofia, the host of Luigi's, an Italian restaurant at 12 Harbour Street, answering \
the phone. Speak naturally, in one or two short sentences. Never use lists, markdown or \
emoji. Never repeat the caller's words back to them; answer them.

Use the tools for tables and times: check_availability to see if a table is free, book_table \
to book one (you need the caller's name, a day, a time and the number of people; ask for \
what is missing, never guess it), cancel_booking to cancel one. Never say a table is free, \
booked or cancelled unless a tool said so in this turn. You do not know the opening hours: call \
opening_hours whenever the caller asks when we open or close, without a day for the whole \
week. Pass the day as a word: today (tonight is today), tomorrow, or the weekday. Pass the \
time with pm: we never seat in the morning, so a bare hour is in the evening (seven is 7 pm, \
half past six is 6:30 pm). After a tool, tell the caller its message in your own words.

What you know without a tool: we serve Italian food, pasta made fresh every day and \
wood-fired pizza; there are vegetarian, vegan and gluten-free dishes. There is no dress \
code. Dogs are welcome on the terrace. We take cards and cash. Parking is on the street and \
free after 6 pm. The phone number is 555 0142. For groups larger than eight, ask the caller \
to email events@luigis.example."""

GREETING = "Thank you for calling Luigi's, this is Sofia. How can I help you?"


def _when(day: dt.date, at: dt.time) -> str:
    return f"{hours.spoken_date(day, normalize.today())} at {hours.spoken_time(at)}"


def _refusal(day: dt.date, at: dt.time, party_size: int) -> str | None:
    """Why no table can be had at all, whatever is booked; None if one might be."""
    if day < normalize.today():
        return "That day has already passed."
    if party_size > LARGEST_TABLE:
        return (
            f"Our largest table seats {LARGEST_TABLE}; for a bigger group please email "
            "events@luigis.example."
        )
    if not hours.is_open(day):
        return "We are closed on Mondays."
    if hours.service_at(day, at) is None:
        seatings = " and ".join(
            f"{s.name} from {hours.spoken_time(s.opens)} to {hours.spoken_time(s.last_seating)}"
            for s in hours.SERVICES
        )
        return f"We seat {seatings}."
    return None


def _alternatives(day: dt.date, at: dt.time, party_size: int, limit: int = 2) -> list[str]:
    """The free times nearest ``at`` on the same day, in half-hour steps."""
    times = []
    for service in hours.SERVICES:
        slot = dt.datetime.combine(day, service.opens)
        while slot.time() <= service.last_seating:
            times.append(slot.time())
            slot += dt.timedelta(minutes=30)
    wanted = dt.datetime.combine(day, at)
    times.sort(key=lambda t: abs(dt.datetime.combine(day, t) - wanted))
    found = []
    for candidate in times:
        if candidate != at and database().free_tables(day, candidate, party_size):
            found.append(candidate)
        if len(found) == limit:
            break
    return [hours.spoken_time(t) for t in sorted(found)]


def _full(day: dt.date, at: dt.time, party_size: int) -> str:
    others = _alternatives(day, at, party_size)
    if not others:
        when = hours.spoken_date(day, normalize.today())
        return f"Sorry, we are fully booked for {party_size} {when}."
    return f"Sorry, nothing is free at {hours.spoken_time(at)}; I could do {' or '.join(others)}."


@tool(
    effect="read_only",
    idempotent=True,
    phrase="Let me check the book.",
    timeout_s=4,
    says="message",
)
def check_availability(date: Day, time: Time, party_size: PartySize) -> dict[str, Any]:
    """Whether a table for the party is free on a day at a time. Use it before booking."""
    answer: dict[str, Any] = {
        "date": date.isoformat(),
        "time": format_time(time),
        "party_size": party_size,
    }
    refusal = _refusal(date, time, party_size)
    if refusal is not None:
        return {**answer, "available": False, "message": refusal}
    if database().free_tables(date, time, party_size):
        message = f"Yes, we have a table for {party_size} {_when(date, time)}."
        return {**answer, "available": True, "message": message}
    return {**answer, "available": False, "message": _full(date, time, party_size)}


ASK_FIRST = os.environ.get("RESTAURANT_CONFIRM", "1") != "0"
"""Booking and cancelling read the call back and wait for the caller's yes;
``RESTAURANT_CONFIRM=0`` turns that off (``python -m bench confirm-cost`` measures both)."""


def _booking_readback(arguments: dict[str, Any]) -> str:
    """What the caller hears before a booking is made: the booking, or why there can be
    none (a day gone by is said now, not after the caller's yes)."""
    date, time, party_size = arguments["date"], arguments["time"], arguments["party_size"]
    refusal = _refusal(date, time, party_size)
    if refusal is not None:
        return refusal
    name = arguments["name"]
    return f"A table for {party_size} {_when(date, time)}, under {name}. Shall I book it?"


def _cancel_readback(arguments: dict[str, Any]) -> str:
    when = hours.spoken_date(arguments["date"], normalize.today())
    return f"Shall I cancel the booking under {arguments['name']} for {when}?"


def _spoken_reference(reference: str) -> str:
    return " ".join(reference)


@tool(
    phrase="Booking that for you.",
    idempotent=False,
    timeout_s=5,
    says="message",
    confirm=_booking_readback if ASK_FIRST else False,
)
def book_table(
    name: Name, date: Day, time: Time, party_size: PartySize, caller: CallContext
) -> dict[str, Any]:
    """Book a table under a name for a number of people on a day at a time."""
    refusal = _refusal(date, time, party_size)
    if refusal is not None:
        return {"booked": False, "message": refusal}
    try:
        booking, existed = database().book(name, date, time, party_size, caller.identity)
    except NoTable:
        return {"booked": False, "message": _full(date, time, party_size)}
    said = f"a table for {party_size} {_when(date, time)} under the name {name}"
    message = f"You already have {said}." if existed else f"Done: {said}."
    message += f" Your reference is {_spoken_reference(booking.reference)}."
    return {
        "booked": True,
        "booking_id": booking.id,
        "reference": booking.reference,
        "name": name,
        "date": date.isoformat(),
        "time": format_time(time),
        "party_size": party_size,
        "message": message,
    }


@tool(
    phrase="Let me find that booking.",
    idempotent=True,
    timeout_s=5,
    says="message",
    confirm=_cancel_readback if ASK_FIRST else False,
)
def cancel_booking(
    name: Name, date: Day, caller: CallContext, reference: Reference = None
) -> dict[str, Any]:
    """Cancel the booking under a name on a day (made from this phone, or with its
    reference)."""
    removed = database().cancel(name, date, caller.identity, reference)
    when = hours.spoken_date(date, normalize.today())
    if not removed:  # the same words whether someone else's booking is there or not
        message = (
            f"I cannot find a booking under {name} for {when} made from this line. If you "
            "have the booking reference, tell me and I will cancel it."
        )
        return {"cancelled": 0, "message": message}
    times = " and ".join(hours.spoken_time(b.time) for b in removed)
    message = f"I have cancelled the booking under {name} for {when} at {times}."
    return {"cancelled": len(removed), "message": message}


@tool(effect="read_only", idempotent=True, timeout_s=2, says="message")
def opening_hours(day: OptionalDay = None) -> dict[str, Any]:
    """When the restaurant is open, on one day or across the week."""
    if day is None or not day.strip() or day.strip().lower() in ("week", "all", "any"):
        return {"message": f"We are open {hours.week_summary()}"}
    try:
        date = parse_date(day)
    except ValueError as exc:
        raise ToolFailed(str(exc)) from None
    return {"day": f"{date:%A}", "message": hours.day_summary(date, normalize.today())}


agent = Agent(
    name="luigis",
    instructions=INSTRUCTIONS,
    greeting=GREETING,
    tools=[check_availability, book_table, cancel_booking, opening_hours],
)
