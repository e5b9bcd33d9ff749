"""Luigi's tools through the toolbox, as a call runs them: loose arguments in, a message out."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from tests.unit.examples.conftest import RESTAURANT
from voxpipe.agent import (
    Agent,
    CallContext,
    Toolbox,
    ToolCall,
    ToolEffect,
    ToolStatus,
    load_agent,
)


@pytest.fixture(scope="module")
def agent() -> Agent:
    return load_agent(f"{RESTAURANT / 'agent.py'}:agent")


@pytest.fixture
def toolbox(agent: Agent, book: Path) -> Toolbox:
    return Toolbox(agent.python_tools)


KEY_ONE = CallContext("key:one", "call-1", "s1", "openai-realtime")
KEY_TWO = CallContext("key:two", "call-2", "s2", "openai-realtime")


async def call(
    toolbox: Toolbox, tool: str, /, context: CallContext = KEY_ONE, **arguments: Any
) -> Any:
    result = await toolbox.run(ToolCall("call-1", tool, arguments), context)
    assert result.status is ToolStatus.OK, result.output
    return result.output


def test_the_agent_declares_what_the_issue_asks(agent: Agent) -> None:
    tools = {t.name: t for t in agent.python_tools}
    assert list(tools) == ["check_availability", "book_table", "cancel_booking", "opening_hours"]
    assert tools["check_availability"].policy.effect is ToolEffect.READ_ONLY
    assert tools["check_availability"].policy.idempotent
    assert tools["book_table"].policy.effect is ToolEffect.MUTATING
    assert not tools["book_table"].policy.idempotent
    assert tools["book_table"].policy.phrase == "Booking that for you."
    assert tools["cancel_booking"].policy.effect is ToolEffect.MUTATING
    assert tools["opening_hours"].policy.effect is ToolEffect.READ_ONLY
    assert agent.greeting and "Luigi's" in agent.greeting
    assert "one or two short sentences" in agent.instructions
    schema = tools["book_table"].spec.parameters
    assert schema["required"] == ["name", "date", "time", "party_size"]  # not the caller
    assert tools["book_table"].policy.confirm and tools["cancel_booking"].policy.confirm
    assert {p["type"] for p in schema["properties"].values()} == {"string", "integer"}


async def test_book_a_table_for_two_at_seven_tonight_under_smith(toolbox: Toolbox) -> None:
    out = await call(
        toolbox, "book_table", name="Smith", date="tonight", time="seven", party_size="two"
    )
    assert out["booked"] is True
    assert (out["name"], out["date"], out["time"], out["party_size"]) == (
        "Smith",
        "2026-03-12",
        "19:00",
        2,
    )
    reference = out["reference"]
    assert out["message"] == (
        "Done: a table for 2 today at 7 pm under the name Smith. "
        f"Your reference is {' '.join(reference)}."
    )
    import db

    [row] = db.database().bookings()
    assert (row.name, row.date, row.time, row.party_size) == (
        "Smith",
        dt.date(2026, 3, 12),
        dt.time(19, 0),
        2,
    )


async def test_availability_then_full_with_nearby_times(toolbox: Toolbox) -> None:
    out = await call(toolbox, "check_availability", date="Friday", time="8pm", party_size=8)
    assert out["available"] is True
    assert out["message"] == "Yes, we have a table for 8 tomorrow at 8 pm."
    await call(toolbox, "book_table", name="Big", date="friday", time="20:00", party_size=8)
    out = await call(toolbox, "check_availability", date="Friday", time="8pm", party_size=8)
    assert out["available"] is False
    assert out["message"] == "Sorry, nothing is free at 8 pm; I could do 6 pm or 10 pm."


@pytest.mark.parametrize(
    ("date", "time", "party", "says"),
    [
        ("Monday", "7pm", 2, "closed on Mondays"),
        ("tonight", "4pm", 2, "We seat lunch from noon to 2 pm and dinner from 6 pm to 10 pm."),
        ("tonight", "10:30 pm", 2, "We seat"),
        ("tonight", "7", 12, "largest table seats 8"),
        ("2026-03-01", "7", 2, "already passed"),
    ],
)
async def test_what_no_table_can_be_booked_for(
    toolbox: Toolbox, date: str, time: str, party: int, says: str
) -> None:
    out = await call(toolbox, "book_table", name="X", date=date, time=time, party_size=party)
    assert out["booked"] is False and says in out["message"]
    out = await call(toolbox, "check_availability", date=date, time=time, party_size=party)
    assert out["available"] is False and says in out["message"]


async def test_unreadable_arguments_are_an_error_the_model_can_read(toolbox: Toolbox) -> None:
    result = await toolbox.run(
        ToolCall("c", "book_table", {"name": "Smith", "date": "soon", "time": "7", "party_size": 2})
    )
    assert result.status is ToolStatus.ERROR
    assert "could not read 'soon' as a date" in result.output["error"]  # type: ignore[index]
    result = await toolbox.run(
        ToolCall("c", "check_availability", {"date": "today", "time": "7", "party_size": "many"})
    )
    assert "could not read 'many' as a number of people" in result.output["error"]  # type: ignore[index]


NOT_FOUND = (
    "I cannot find a booking under {} for Saturday the 14th of March made from this line. If "
    "you have the booking reference, tell me and I will cancel it."
)


async def test_cancel(toolbox: Toolbox) -> None:
    await call(toolbox, "book_table", name="Smith", date="Saturday", time="1pm", party_size=4)
    out = await call(toolbox, "cancel_booking", name="Jones", date="Saturday")
    assert out == {"cancelled": 0, "message": NOT_FOUND.format("Jones")}
    out = await call(toolbox, "cancel_booking", name="mr smith", date="saturday")
    assert out["cancelled"] == 1
    assert out["message"] == (
        "I have cancelled the booking under Smith for Saturday the 14th of March at 1 pm."
    )


async def test_another_caller_cannot_cancel_or_find_a_booking(toolbox: Toolbox) -> None:
    """Finding 1 of the tool-safety issue: key 2 cancelled key 1's booking under Smith,
    heard its time, and could tell names that exist from names that do not."""
    booked = await call(
        toolbox, "book_table", name="Smith", date="Saturday", time="1pm", party_size=4
    )
    await call(toolbox, "book_table", name="Anna Rossi", date="Saturday", time="1pm", party_size=2)
    for name in ("Smith", "Rossi", "Jones"):  # someone's, a part of someone's, nobody's
        out = await call(toolbox, "cancel_booking", context=KEY_TWO, name=name, date="Saturday")
        assert out == {"cancelled": 0, "message": NOT_FOUND.format(name)}, name
    import db

    assert [b.name for b in db.database().bookings()] == ["Smith", "Anna Rossi"]
    out = await call(
        toolbox,
        "cancel_booking",
        context=KEY_TWO,
        name="Smith",
        date="Saturday",
        reference=" ".join(booked["reference"]),  # as a caller says it
    )
    assert out["cancelled"] == 1


async def test_a_tool_is_told_who_calls_and_the_model_cannot_say_otherwise(
    toolbox: Toolbox,
) -> None:
    spec = {t.name: t for t in toolbox}["book_table"].spec.parameters
    assert "caller" not in spec["properties"]
    forged = {"name": "Smith", "date": "Saturday", "time": "1pm", "party_size": 2}
    result = await toolbox.run(ToolCall("c", "book_table", {**forged, "caller": "key:one"}))
    assert result.status is ToolStatus.ERROR  # an argument the schema does not have
    await call(toolbox, "book_table", context=KEY_TWO, **forged)
    import db

    [booking] = db.database().bookings()
    assert booking.made_by == "key:two"
    caller = CallContext("key:two", "c3", "MZ1", "twilio", caller="+15550142")
    await call(toolbox, "book_table", context=caller, **{**forged, "name": "Jones"})
    assert db.database().bookings()[-1].made_by == "tel:+15550142"


async def test_a_date_in_a_year_gone_by_is_refused_in_words(toolbox: Toolbox) -> None:
    """Finding 8: "the 3rd of January 1999" was booked for the next 3 January."""
    out = await call(
        toolbox, "book_table", name="Smith", date="3 january 1999", time="7pm", party_size=2
    )
    assert out == {"booked": False, "message": "That day has already passed."}


@pytest.mark.parametrize(
    ("day", "says"),
    [
        (
            {},
            "We are open Tuesday to Sunday, lunch from noon to 2:30 pm and dinner from 6 pm "
            "to 10:30 pm; closed on Mondays.",
        ),
        ({"day": "today"}, "Today we are open for lunch from noon to 2:30 pm and dinner"),
        ({"day": "Monday"}, "We are closed on Mondays."),
        ({"day": "sunday"}, "On Sunday we are open for lunch"),
    ],
)
async def test_opening_hours(toolbox: Toolbox, day: dict[str, str], says: str) -> None:
    out = await call(toolbox, "opening_hours", **day)
    assert out["message"].startswith(says)


async def test_opening_hours_of_an_unreadable_day(toolbox: Toolbox) -> None:
    result = await toolbox.run(ToolCall("c", "opening_hours", {"day": "someday"}))
    assert result.status is ToolStatus.ERROR
    assert "could not read 'someday' as a date" in result.output["error"]  # type: ignore[index]
