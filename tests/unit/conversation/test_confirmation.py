"""A tool that asks first (``confirm``), on fake engines: the call is read back, not run; a
plain yes in the next turn runs it once, with no model in between; anything else drops
it; a value the caller never said is asked for; and tools are told who is calling."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from pydantic import AfterValidator

from tests.unit.conversation.harness import Call
from tests.unit.conversation.tools_support import called, running
from tests.unit.fakes import FakeLlm, FakeStt
from voxpipe.agent import CallContext, tool
from voxpipe.conversation.confirmation import (
    Consent,
    consent_in,
    own_names,
    unheard_fields,
)
from voxpipe.conversation.tool_ledger import MAX_RESULT_CHARS

BOOK = {"name": "Kilroy", "party_size": 2, "day": "tomorrow"}


def booking_tool(ran: list[dict[str, Any]]) -> Any:
    @tool(
        says="message",
        confirm="A table for {party_size} {day}, under {name}. Shall I book it?",
    )
    async def book_table(name: str, party_size: int, day: str) -> dict[str, str]:
        """Book a table."""
        ran.append({"name": name, "party_size": party_size, "day": day})
        return {"message": f"Booked for {name}."}

    return book_table


async def test_a_call_is_read_back_and_runs_once_on_the_callers_yes(
    make_call: Callable[..., Call],
) -> None:
    ran: list[dict[str, Any]] = []
    llm = FakeLlm([called("book_table", **BOOK)], ["Anything else?"])
    stt = FakeStt("book a table for two tomorrow under Kilroy", "yes please")
    call = make_call(stt=stt, llm=llm, agent=running(booking_tool(ran)), deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert ran == []  # read back, not run
    readback = "A table for 2 tomorrow, under Kilroy. Shall I book it?"
    assert call.done(1).text == readback  # type: ignore[union-attr]
    assert [m.role for m in call.session.history.turns] == ["user", "assistant"]
    await call.say()
    await call.idle()
    assert ran == [BOOK]  # the yes ran exactly the call read back
    assert len(llm.calls) == 1  # the yes was not the model's to read
    assert call.done(2).text == "Booked for Kilroy."  # type: ignore[union-attr]
    roles = [m.role for m in call.session.history.turns]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("answer", ["no, make it three", "yes but at eight", "what time is it"])
async def test_anything_but_a_plain_yes_drops_the_call(
    make_call: Callable[..., Call], answer: str
) -> None:
    ran: list[dict[str, Any]] = []
    llm = FakeLlm([called("book_table", **BOOK)], ["Of course."])
    stt = FakeStt("book a table for two tomorrow under Kilroy", answer, "yes")
    call = make_call(stt=stt, llm=llm, agent=running(booking_tool(ran)), deadlines={"filler": ""})
    for _ in range(3):  # the readback, the other answer, then a yes to nothing
        await call.say()
        await call.idle()
    assert ran == []
    assert call.session.ledger.confirmation.pending is None


async def test_a_name_the_caller_never_said_is_asked_for(make_call: Callable[..., Call]) -> None:
    """Finding 2: garbled speech went straight to a booking under the agent's own name."""
    ran: list[dict[str, Any]] = []
    sofia = {**BOOK, "name": "Sofia"}
    llm = FakeLlm([called("book_table", **sofia)])
    stt = FakeStt("we'll continue to do the next event tomorrow and the main giveaway", "yes")
    call = make_call(stt=stt, llm=llm, agent=running(booking_tool(ran)), deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert call.done(1).text == "Sorry, I didn't catch that. What name should I use?"  # type: ignore[union-attr]
    await call.say()
    await call.idle()
    assert ran == []  # nothing was read back, so a yes approves nothing


async def test_the_agents_own_name_is_asked_for_even_when_the_caller_greeted_it(
    make_call: Callable[..., Call],
) -> None:
    """The agent's own name is what the model has to hand: a caller who says "Hi Sofia"
    has not given it as theirs. Asked for, a caller whose name it is says so, and then it
    is read back."""
    ran: list[dict[str, Any]] = []
    sofia = {**BOOK, "name": "Sofia"}
    llm = FakeLlm([called("book_table", **sofia)], [called("book_table", "call_2", **sofia)])
    stt = FakeStt("hi Sofia, a table for two tomorrow please", "it is Sofia, like you", "yes")
    agent = running(booking_tool(ran), instructions="You are Sofia, the host of Chez Test.")
    call = make_call(stt=stt, llm=llm, agent=agent, deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert call.done(1).text == "Sorry, I didn't catch that. What name should I use?"  # type: ignore[union-attr]
    await call.say()
    await call.idle()
    assert call.done(2).text == "A table for 2 tomorrow, under Sofia. Shall I book it?"  # type: ignore[union-attr]
    await call.say()
    await call.idle()
    assert ran == [sofia]


def test_the_agents_own_name_is_read_from_its_instructions() -> None:
    assert own_names("You are Sofia, the host of Luigi's. You are friendly.") == {"sofia"}
    assert own_names("Thank you for calling Luigi's, this is Marco. I'm Marco.") == {"marco"}
    assert own_names("You are a helpful assistant. Book tables.") == frozenset()
    tool_ = booking_tool([])
    own = own_names("You are Sofia.")
    said = "hi sofia, a table for two tomorrow"
    assert unheard_fields(tool_, {"name": "Sofia"}, said, own) == ["name"]
    assert unheard_fields(tool_, {"name": "Sofia"}, said, own, answer="it's sofia") == []
    assert unheard_fields(tool_, {"name": "Sofia"}, said) == []  # no name of its own known


def test_only_a_plain_short_yes_is_consent() -> None:
    for yes in ("Yes.", "yeah go ahead", "Sure, please do.", "That's right", "ok"):
        assert consent_in(yes) is Consent.YES, yes
    for no in ("No.", "yes but not tomorrow", "actually make it eight", "don't"):
        assert consent_in(no) is Consent.NO, no
    for other in ("", "what time do you close", "yes " + "and then some more words " * 2):
        assert consent_in(other) is not Consent.YES, other


def acting_tool(ran: list[dict[str, Any]]) -> Any:
    @tool(phrase="Booking that.")
    async def book_table(name: str, party_size: int, day: str) -> str:
        """Book a table, at once (no readback)."""
        ran.append({"name": name, "party_size": party_size, "day": day})
        return f"Booked for {name}."

    return book_table


@pytest.mark.parametrize(
    ("answer", "party", "booked"),
    [
        ("Smith.", 3, {**BOOK, "name": "Smith"}),  # the rest as first asked, not as rewritten
        ("Smith, and make it three", 3, {**BOOK, "name": "Smith", "party_size": 3}),
        # A count is taken from the answer only as said: not 20 for "eight" (8 pm, 20:00).
        ("Smith, at eight", 20, {**BOOK, "name": "Smith"}),
    ],
)
async def test_a_tool_that_acts_at_once_asks_for_a_name_made_up_whole(
    make_call: Callable[..., Call], answer: str, party: int, booked: dict[str, Any]
) -> None:
    """The STT lost the name ("under the name."), and the model booked under one of its
    own: the call does not run; the name is asked for, and the caller's answer books it.
    Asked again, the model writes the name and loses the rest (a party of 3, today): what
    the caller did not say in the answer stays as the first call had it."""
    ran: list[dict[str, Any]] = []
    garcia = {**BOOK, "name": "Garcia"}
    rewritten = {"name": "Smith", "party_size": party, "day": "today"}
    llm = FakeLlm(
        [called("book_table", **garcia)], [called("book_table", "call_2", **rewritten)], ["Ok."]
    )
    stt = FakeStt("book a table for two tomorrow under the name", answer)
    call = make_call(stt=stt, llm=llm, agent=running(acting_tool(ran)), deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert ran == []
    assert call.done(1).text == "Sorry, I didn't catch that. What name should I use?"  # type: ignore[union-attr]
    await call.say()
    await call.idle()
    assert ran == [booked]


def _not_past(value: str) -> str:
    if value.endswith("2023"):
        raise ValueError("That day has already passed.")
    return value


async def test_a_lookup_on_numbers_nobody_said_is_asked_about_not_run(
    make_call: Callable[..., Call],
) -> None:
    """A read sentence taken for a request: the lookup's answer ("That day has already
    passed.") would be a fact about a question nobody asked. It is not run."""
    ran: list[dict[str, Any]] = []

    @tool(effect="read_only")
    async def check_availability(
        date: Annotated[str, AfterValidator(_not_past)], party_size: int
    ) -> str:
        """Whether a table is free."""
        ran.append({"date": date, "party_size": party_size})
        return "That day has already passed."

    made_up = {"date": "20 October 2023", "party_size": 2}
    llm = FakeLlm([called("check_availability", **made_up)], ["Ok."])
    stt = FakeStt("The family of Dashwood had long been settled in Sussex.")
    agent = running(check_availability)
    call = make_call(stt=stt, llm=llm, agent=agent, deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert ran == []
    assert "already passed" not in call.done(1).text  # type: ignore[union-attr]
    assert call.done(1).text.endswith("?")  # type: ignore[union-attr]


async def test_an_optional_value_nobody_said_is_left_out_not_asked_for(
    make_call: Callable[..., Call],
) -> None:
    ran: list[dict[str, Any]] = []

    @tool(effect="mutating")
    async def cancel_booking(name: str, reference: str | None = None) -> str:
        """Cancel a booking."""
        ran.append({"name": name, "reference": reference})
        return "cancelled"

    made_up = {"name": "Brown", "reference": "4821"}
    llm = FakeLlm([called("cancel_booking", **made_up)], ["Done."])
    stt = FakeStt("I have to cancel Friday's booking for Brown.")
    call = make_call(stt=stt, llm=llm, agent=running(cancel_booking), deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert ran == [{"name": "Brown", "reference": None}]


@pytest.mark.parametrize(
    ("heard", "name"),
    [
        ("book a table for two tomorrow under more", "Moore"),  # spelled otherwise
        ("book it for two tomorrow under Ana Lopez", "Ana Lopes"),  # partly
        (
            "my booking for two tomorrow is under the name on my account",
            "Kilroy",
        ),  # a tool returned it
    ],
)
async def test_a_tool_that_acts_at_once_runs_on_values_heard_or_returned(
    make_call: Callable[..., Call], heard: str, name: str
) -> None:
    ran: list[dict[str, Any]] = []

    @tool(effect="read_only")
    async def account() -> dict[str, str]:
        """The caller's account."""
        return {"name": "Kilroy"}

    llm = FakeLlm(
        [called("account")], [called("book_table", "call_2", **{**BOOK, "name": name})], ["Ok."]
    )
    agent = running(account, acting_tool(ran))
    call = make_call(stt=FakeStt(heard), llm=llm, agent=agent, deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert ran == [{**BOOK, "name": name}]


async def test_a_tool_is_told_who_is_calling(make_call: Callable[..., Call]) -> None:
    seen: list[CallContext] = []

    @tool(effect="read_only", says="message")
    async def whoami(caller: CallContext) -> dict[str, str]:
        """Who is calling."""
        seen.append(caller)
        return {"message": "You are you."}

    llm = FakeLlm([called("whoami")])
    call = make_call(llm=llm, agent=running(whoami), deadlines={"filler": ""})
    await call.say()
    await call.idle()
    assert llm.tools[0][0].parameters.get("properties") in ({}, None)  # not the model's to say
    (context,) = seen
    session = call.session
    assert context == CallContext(
        session.owner, session.record.call_id, session.id, session.transport, None
    )


async def test_a_huge_result_reaches_the_model_cut_and_saying_so(
    make_call: Callable[..., Call],
) -> None:
    """Finding 8: after a 200 KB tool output the model recited its tool list."""

    @tool(effect="read_only")
    async def menu() -> dict[str, str]:
        """The whole menu."""
        return {"menu": "pasta " * 40_000}

    llm = FakeLlm([called("menu")], ["We have pasta."])
    call = make_call(llm=llm, agent=running(menu), deadlines={"filler": ""})
    await call.say()
    await call.idle()
    shown = llm.calls[1][-1].content
    assert len(shown) < MAX_RESULT_CHARS + 400
    assert json.loads(shown.splitlines()[0])["note"].startswith("the result was 240011 characters")


def test_a_name_spelled_otherwise_than_heard_was_still_said() -> None:
    @tool
    async def book(name: str, party: int) -> str:
        """Book."""
        return "ok"

    heard = "a table for three tomorrow at eight under more"
    assert unheard_fields(book, {"name": "Moore", "party": 3}, heard) == []
    assert unheard_fields(book, {"name": "Sofia", "party": 3}, heard) == ["name"]
    assert unheard_fields(book, {"name": "Ann", "party": 3}, "under dan") == ["name"]


def test_a_value_made_up_whole_is_one_with_no_word_of_letters_heard() -> None:
    @tool
    async def book(name: str, date: str, time: str, note: str = "") -> str:
        """Book."""
        return "ok"

    heard = "book a table for two at seven tonight under the name"
    today = datetime.date.today()
    evening = f"{today.strftime('%A')} evening"  # tonight's weekday
    derived = {"name": "Smith", "date": today.isoformat(), "time": "19:00", "note": evening}
    assert unheard_fields(book, derived, heard, whole=True) == [
        "name"
    ]  # dates and weekdays are derived
    assert unheard_fields(book, {"name": "Smith"}, heard + " Smith", whole=True) == []
    assert unheard_fields(book, {"name": "Garcia", "note": "a quiet table"}, heard, whole=True) == [
        "name"
    ]
    assert unheard_fields(book, {"note": "a quiet table"}, heard) == ["note"]  # asks for all


def test_a_number_nobody_said_in_a_date_or_a_reference_is_made_up() -> None:
    """A small model takes a read sentence for a request and writes a date of its own
    ("20 October 2023"); a date a few days ahead is its reading of "Friday", a number said
    digit by digit or run together ("at 730") is said."""

    @tool(effect="read_only")
    async def check(date: str, time: str, order: str = "") -> str:
        """Check."""
        return "ok"

    read = "The family of Dashwood had long been settled in Sussex."
    assert unheard_fields(check, {"date": "20 October 2023"}, read, whole=True) == ["date"]
    assert unheard_fields(check, {"time": "7 pm"}, read, whole=True) == ["time"]
    soon = datetime.date.today() + datetime.timedelta(days=4)
    friday = "is there a table on Friday at 730"
    for date in (soon.isoformat(), f"{soon.day} {soon.strftime('%B')}", "Friday"):
        assert unheard_fields(check, {"date": date, "time": "7:30 pm"}, friday, whole=True) == []
    last_year = (datetime.date.today() - datetime.timedelta(days=365)).isoformat()
    assert unheard_fields(check, {"date": last_year}, friday, whole=True) == ["date"]
    assert unheard_fields(check, {"date": "Sunday"}, read, whole=True) == ["date"]
    tomorrow = (datetime.date.today() + datetime.timedelta(days=1)).strftime("%A")
    assert unheard_fields(check, {"date": tomorrow}, "tomorrow at eight", whole=True) == []
    assert unheard_fields(check, {"date": "next Sunday"}, "next weekend", whole=True) == []
    order = "my order is five eight two one"
    assert unheard_fields(check, {"order": "5821"}, order, whole=True) == []
    assert unheard_fields(check, {"order": "5822"}, order, whole=True) == ["order"]


def test_a_count_never_said_is_made_up() -> None:
    @tool
    async def book(name: str, party_size: int, time: str) -> str:
        """Book."""
        return "ok"

    free = "a table for free people at eight under Smith"
    assert unheard_fields(book, {"name": "Smith", "party_size": 20}, free, whole=True) == [
        "party_size"
    ]  # not the 24-hour "8"
    assert unheard_fields(book, {"name": "Smith", "party_size": 3}, free, whole=True) == [
        "party_size"
    ]
    said = "a table for three under Smith, a party of 12 maybe"
    assert unheard_fields(book, {"name": "Smith", "party_size": 3}, said, whole=True) == []
    assert unheard_fields(book, {"name": "Smith", "party_size": 12}, said, whole=True) == []
    assert unheard_fields(book, {"party_size": 4}, free, answer="four", whole=True) == []
