"""The time a caller said, read from their words and put back where the model wrote
another (``said_times.py``), and a tool round that runs on it rather than asking."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.conversation.harness import Call
from tests.unit.conversation.tools_support import called, running
from tests.unit.fakes import FakeLlm, FakeStt
from voxpipe.agent import tool
from voxpipe.conversation.confirmation import Confirmation, PendingAction, as_said
from voxpipe.conversation.history import History
from voxpipe.conversation.said_days import coming
from voxpipe.conversation.said_times import SaidTime, the_time_said, times_said, written_as


@pytest.mark.parametrize(
    ("words", "dial"),
    [
        ("Is there anything free tonight at seven thirty for two people?", (7, 30)),
        ("a table for eight at seven", (7, 0)),
        ("for two at 7.30pm", (7, 30)),
        ("half past six please", (6, 30)),
        ("quarter to eight", (7, 45)),
        ("quarter to one", (12, 45)),
        ("at 730 on Friday", (7, 30)),
        ("around 1930", (7, 30)),
        ("seven o'clock", (7, 0)),
        ("eight p.m.", (8, 0)),
        ("seven fifteen in the evening", (7, 15)),
        ("noon", (12, 0)),
        ("at eight for two please", (8, 0)),
        ("twenty past seven", (7, 20)),
        ("ten to eight for two", (7, 50)),
        ("a quarter after six tonight", (6, 15)),
        ("twenty-five minutes past nine", (9, 25)),
        ("twenty five to ten in the evening", (9, 35)),
        ("at half seven please", (7, 30)),  # half past, as said in Britain
        ("5 past 8", (8, 5)),
        ("two minutes to eight", (7, 58)),
    ],
)
def test_a_time_is_read_with_its_context(words: str, dial: tuple[int, int]) -> None:
    said = the_time_said(words)
    assert said is not None and said.on_the_dial == dial, times_said(words)


@pytest.mark.parametrize(
    "words",
    [
        "Book for seven people on Friday",  # a party
        "a table for two, thirty minutes from now",
        "my reference is five eight two one",
        "order 5821",
        "at seven or seven thirty",  # two times: which one is the model's to choose
        "He was not an ill-disposed young man.",
        "Can I get a table for around 8 tonight?",  # a party, or a time: not ours to say
        "please deliver at 5 Main Street",
        "extension four twelve",
        "room seven fifteen",
        "I'm calling about 2 reservations",
        "we are open from five to eight",  # a range
        "a table for five to eight",  # a party of five to eight, as likely
        "two to four people",
        "a party of two to four",  # a range: minutes before the hour come in fives
        "ten to twelve people",
        "half an hour from now",
        "",
    ],
)
def test_no_time_or_several_is_none(words: str) -> None:
    assert the_time_said(words) is None, times_said(words)


def test_written_in_the_models_form() -> None:
    assert written_as("10:30 pm", SaidTime(7, 30)) == "7:30 pm"
    assert written_as("12:30 PM", SaidTime(6, 30)) == "6:30 PM"
    assert written_as("22:30", SaidTime(7, 30)) == "19:30"  # the model's evening stands
    assert written_as("8 pm", SaidTime(7, 0)) == "7 pm"
    assert written_as("9:00 a.m.", SaidTime(7, 30, "pm")) == "7:30 p.m."  # the caller's pm
    assert written_as("09:00", SaidTime(19, 0)) == "19:00"
    assert written_as("7 pm", SaidTime(7, 0)) is None  # already as said
    assert written_as("19:00", SaidTime(7, 0)) is None
    assert written_as("4", SaidTime(7, 0)) is None  # a bare number may be a count
    assert written_as("Friday", SaidTime(7, 0)) is None
    assert written_as("07:00 pm", SaidTime(8, 0)) == "08:00 pm"
    # A spoken twelve is noon, a spoken 00:30 after midnight, whatever the model wrote.
    assert written_as("10:30 am", SaidTime(12, 30)) == "12:30 pm"
    assert written_as("10:30", SaidTime(12, 30)) == "12:30"
    assert written_as("1:30 pm", SaidTime(0, 30)) == "12:30 am"


def _availability(ran: list[dict[str, Any]]) -> Any:
    @tool(effect="read_only", says="message")
    async def check_availability(day: str, time: str, party_size: int) -> dict[str, str]:
        """Whether a table is free."""
        ran.append({"day": day, "time": time, "party_size": party_size})
        return {"message": f"Yes, {time} is free."}

    return check_availability


async def _ask(
    make_call: Callable[..., Call], heard: str, **written: Any
) -> tuple[Call, list[dict[str, Any]]]:
    """One turn saying ``heard``, answered by a model that writes ``written``."""
    ran: list[dict[str, Any]] = []
    llm = FakeLlm([called("check_availability", **written)], ["Never asked."])
    agent = running(_availability(ran))
    call = make_call(stt=FakeStt(heard), llm=llm, agent=agent, deadlines={"filler": ""})
    await call.say()
    await call.idle()
    return call, ran


async def test_a_time_written_wrong_runs_as_said_not_asked_for(
    make_call: Callable[..., Call],
) -> None:
    """ "seven thirty" written as 10:30 pm used to be asked for again ("What time should I
    use?"); a table for eight at seven, written for 8 pm, ran at eight."""
    for heard, wrong, right in [
        ("Is there anything free tonight at seven thirty for two people?", "10:30 pm", "7:30 pm"),
        ("Can I get a table for eight at seven tonight?", "8 pm", "7 pm"),
    ]:
        size = 2 if "two" in heard else 8
        call, ran = await _ask(make_call, heard, day="today", time=wrong, party_size=size)
        assert ran == [{"day": "today", "time": right, "party_size": size}], heard
        done = call.done(1)
        assert done is not None and done.text == f"Yes, {right} is free."
        (assistant,) = [m for m in call.session.history.turns if m.tool_calls]
        assert assistant.tool_calls[0].arguments["time"] == right  # the model sees it so


async def test_a_time_not_said_is_still_asked_for(make_call: Callable[..., Call]) -> None:
    heard = "Is there anything free tonight for two people?"
    call, ran = await _ask(make_call, heard, day="today", time="9 pm", party_size=2)
    assert ran == []
    done = call.done(1)
    assert done is not None and "time" in done.text and done.text.endswith("?")


async def test_a_weekday_written_as_a_past_date_runs_as_said(
    make_call: Callable[..., Call],
) -> None:
    heard = "Is there a table for three on Friday at 730?"
    _, ran = await _ask(make_call, heard, day="2023-10-20", time="7:30 pm", party_size=3)
    friday = coming("friday", datetime.date.today()).isoformat()
    assert ran == [{"day": friday, "time": "7:30 pm", "party_size": 3}]


def test_a_call_with_two_days_or_two_times_is_left_as_written() -> None:
    @tool(effect="read_only")
    async def room_availability(check_in: str, check_out: str) -> str:
        """Whether a room is free."""
        return "free"

    stay = called("room_availability", check_in="2026-12-11", check_out="2026-12-13")
    unheard = ["check_in", "check_out"]
    assert as_said(room_availability, stay, "a room from Friday for two nights", unheard) is stay

    @tool(effect="read_only")
    async def free_slots(after: str, before: str) -> str:
        """Free appointments."""
        return "none"

    slots = called("free_slots", after="9 am", before="5 pm")
    assert as_said(free_slots, slots, "anything at ten thirty", ["after", "before"]) is slots


async def test_a_time_the_caller_did_not_name_is_asked_for_not_guessed(
    make_call: Callable[..., Call],
) -> None:
    """ "for around 8" may be the party: the made-up 7 pm is asked about, not run at 8."""
    heard = "Can I get a table for around 8 tonight?"
    call, ran = await _ask(make_call, heard, day="today", time="7 pm", party_size=8)
    assert ran == []
    done = call.done(1)
    assert done is not None and "time" in done.text


def test_only_a_value_that_would_be_asked_for_is_written_again() -> None:
    @tool(effect="read_only")
    async def free_slots(day: str) -> str:
        """Free appointments on a day."""
        return "none"

    call = called("free_slots", day="2023-10-20")
    words = "I want to come in on Friday"
    friday = coming("friday", datetime.date.today()).isoformat()
    assert as_said(free_slots, call, words, ["day"]).arguments == {"day": friday}
    assert as_said(free_slots, call, words, []) is call  # nothing would be asked: it stays


def test_a_date_that_is_no_appointments_day_is_never_a_weekday_said() -> None:
    """A date of birth the model made up is asked for, not made next Friday."""

    @tool(effect="read_only")
    async def verify(date_of_birth: str) -> str:
        """Check a patient in."""
        return "ok"

    call = called("verify", date_of_birth="1990-05-04")
    assert as_said(verify, call, "I want to come in on Friday", ["date_of_birth"]) is call


async def test_a_yes_runs_what_was_read_back_whatever_time_it_names(
    make_call: Callable[..., Call],
) -> None:
    ran: list[dict[str, Any]] = []

    @tool(says="message", confirm="A table {day} at {time}. Shall I book it?")
    async def book_table(day: str, time: str) -> dict[str, str]:
        """Book a table."""
        ran.append({"day": day, "time": time})
        return {"message": "Booked."}

    written = called("book_table", day="saturday", time="8 pm")
    llm = FakeLlm([written], ["Never asked."])
    stt = FakeStt("a table on saturday at eight pm", "yes please, see you at seven")
    call = make_call(stt=stt, llm=llm, agent=running(book_table), deadlines={"filler": ""})
    await call.say()
    await call.idle()
    await call.say()
    await call.idle()
    assert ran == [{"day": "saturday", "time": "8 pm"}]  # as read back, not "7 pm"


def test_a_call_read_back_is_approved_only_as_it_was_read() -> None:
    confirmation = Confirmation(History("Be brief."))
    read = called("book_table", day="saturday", time="8 pm")
    confirmation.hold(PendingAction(1, read))
    assert confirmation.read_back(read)
    changed = dataclasses.replace(read, arguments={"day": "saturday", "time": "7 pm"})
    assert not confirmation.take_approved(2, changed)
    assert confirmation.take_approved(2, read)
    assert not confirmation.read_back(read)  # taken: nothing waits any more
