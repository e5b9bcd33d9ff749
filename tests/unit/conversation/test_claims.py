"""The claim gate: a sentence stating what a tool owns, with nothing behind it, is not said
(``conversation/claims.py``). The rules alone, then a reply on fake engines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.conversation.harness import Call
from tests.unit.conversation.tools_support import called, running
from tests.unit.fakes import FakeLlm, FakeStt
from voxpipe.agent import tool
from voxpipe.conversation.claims import (
    TO_CHECK,
    UNCHECKED,
    Claim,
    ClaimGate,
    ClaimRules,
    grounded_call,
    known_words,
)
from voxpipe.conversation.confirmation import question_for
from voxpipe.conversation.events import TurnMetrics
from voxpipe.engines.base import ChatMessage, ToolSpec

INSTRUCTIONS = "You are the host of Chez Test, 12 Harbour Street. Parking is free after 6 pm."
TOOLS = [
    ToolSpec("check_availability", "Whether a table is free on a day at a time.", read_only=True),
    ToolSpec("opening_hours", "When the restaurant is open.", read_only=True),
    ToolSpec("book_table", "Book a table under a name."),
    ToolSpec("freeze_card", "Freeze a card."),
    ToolSpec("order_status", "Where an order is.", read_only=True),
]


def gate(heard: str, tools: list[ToolSpec] = TOOLS) -> ClaimGate:
    messages = [ChatMessage("system", INSTRUCTIONS), ChatMessage("user", heard)]
    return ClaimGate(ClaimRules(tools), known_words(messages))


def said(reply: str, heard: str = "", tools: list[ToolSpec] = TOOLS) -> tuple[str, str | None]:
    """(what the caller hears of ``reply``, pushed word by word; the claim's kind, if any)"""
    out, stopped = heard_of(reply, gate(heard, tools))
    return out, None if stopped is None else stopped.kind


def heard_of(reply: str, g: ClaimGate) -> tuple[str, Claim | None]:
    out = "".join(g.push(word + " ") for word in reply.split(" ")) + g.flush()
    return out.strip(), g.stopped


@pytest.mark.parametrize(
    ("heard", "reply", "kind"),
    [
        ("What are your hours?", "We are open from 10:00 AM to 6:30 PM.", "value"),
        ("Have you got room for six?", "Yes, I have room for six on Saturday.", "lookup"),
        ("Any tables tonight?", "There is a table free at the window.", "lookup"),
        ("Book it, Smith.", "I've booked your table, Mr Smith.", "done"),
        ("Freeze my card.", "Your card has been frozen.", "done"),
        ("Freeze my card.", "You're all set.", "done"),
        ("Where is my order?", "Your order has shipped and arrives Friday.", "lookup"),
        ("Are you open Monday?", "We're closed on Mondays.", "lookup"),
        ("How much is it?", "That will be $45.", "value"),
        ("Where's my order 5821?", "It left the warehouse as order 5822.", "value"),
        ("A table at 7?", "We have a table at 7 pm, would you like it?", "lookup"),
    ],
)
def test_an_unbacked_claim_is_stopped(heard: str, reply: str, kind: str) -> None:
    out, stopped = heard_of(reply, gate(heard))
    assert stopped is not None and stopped.kind == kind
    # At most the words before the claim's first two reach the caller (they were let
    # through before the sentence could be seen to hold one), never the claim.
    assert reply.startswith(out)
    assert stopped.text.split()[0] not in out.split()


@pytest.mark.parametrize(
    ("heard", "reply"),
    [
        ("Hello?", "Hello, this is Chez Test. How can I help?"),
        ("A table for two at seven.", "Sure, for which day would you like a table for two?"),
        ("Where are you?", "We are at 12 Harbour Street."),
        ("Is parking free?", "Yes, parking is free after 6 pm."),
        ("A table at 7 pm for two.", "Let me check whether a table is free at 7 pm."),
        ("Can I book?", "Shall I book a table for you?"),
        ("A table?", "Sure, for how many people, and at what time?"),
        ("Ticket 1,400,2?", "I don't have news on ticket 14002 yet."),
        ("Thanks, bye.", "You're welcome, goodbye!"),
        ("Tell me a story.", "Once upon a time, a fox lived in a wood."),
    ],
)
def test_what_states_no_owned_fact_is_said_whole(heard: str, reply: str) -> None:
    assert said(reply, heard) == (reply, None)


def test_words_before_the_claim_are_said_and_nothing_after_it() -> None:
    out, kind = said("Good question. We have a table for you. It is by the window.", "a table?")
    assert (out, kind) == ("Good question.", "lookup")


def test_a_sentence_with_no_opener_is_let_through_as_it_is_written() -> None:
    g = gate("hello")
    # The last word waits (it may be cut mid-word), and so do words that may open a claim
    # with the next ("are" of "are free").
    assert g.push("Hello there, how are") == "Hello there, how "
    assert g.push(" you today? I am") == "are you today?"
    assert g.flush() == " I am"


def test_without_lookups_only_values_and_actions_are_claims() -> None:
    tools = [ToolSpec("book_table", "Book a table.")]
    assert said("We have a table for you.", "a table?", tools) == ("We have a table for you.", None)
    assert said("I've booked it.", "book it", tools)[1] == "done"


# -- in a reply, on fake engines ------------------------------------------------


def asking_for_a_table(
    make_call: Callable[..., Call], llm: FakeLlm, ran: list[str], **options: Any
) -> Call:
    """A call whose caller asks for a table on Friday, to an agent with one lookup."""

    @tool(effect="read_only", says="message")
    async def check_availability(day: str) -> dict[str, str]:
        """Whether a table is free on a day."""
        ran.append(day)
        return {"message": f"No table is free on {day}."}

    return make_call(
        stt=FakeStt("Do you have a table on Friday?"),
        llm=llm,
        agent=running(check_availability),
        deadlines={"filler": ""},
        **options,
    )


async def test_an_unbacked_claim_becomes_a_call_and_the_answer_is_the_tools(
    make_call: Callable[..., Call],
) -> None:
    ran: list[str] = []
    llm = FakeLlm(
        ["Yes, we ", "have a table ", "on Friday. ", "See you then."],
        [called("check_availability", day="Friday")],
    )
    call = asking_for_a_table(make_call, llm, ran)
    await call.say()
    await call.idle()
    assert llm.tool_choices == ["auto", "required"]  # asked again, for a call
    assert ran == ["Friday"]
    spoken = " ".join(call.tts.clauses)
    assert "have a table" not in spoken and "See you" not in spoken
    assert spoken == "No table is free on Friday."  # "Yes," waited for the words after it
    assert call.done(1).text == "No table is free on Friday."  # type: ignore[union-attr]
    (metrics,) = [m.metrics for m in call.of(TurnMetrics) if m.turn_id == 1]
    assert metrics["unbacked_claim"] == {"kind": "lookup", "text": "we have a table"}
    counted = call.metrics.registry.get_sample_value
    assert counted("voxpipe_unbacked_claims_total", {"kind": "lookup"}) == 1


async def test_words_again_instead_of_a_call_give_way_to_an_apology(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(["We have a table on Friday."], ["There is a table free on Friday."])
    call = asking_for_a_table(make_call, llm, [])
    await call.say()
    await call.idle()
    assert " ".join(call.tts.clauses) == UNCHECKED
    assert call.done(1).text == UNCHECKED  # type: ignore[union-attr]


async def test_with_hold_claims_off_the_words_are_said(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(["We have a table on Friday."])
    call = asking_for_a_table(make_call, llm, [], llm_config={"hold_claims": False})
    await call.say()
    await call.idle()
    assert call.done(1).text == "We have a table on Friday."  # type: ignore[union-attr]
    assert llm.tool_choices == ["auto"]


def test_a_forced_call_keeps_only_what_the_caller_said() -> None:
    spec = ToolSpec(
        "check_availability",
        "Whether a table is free.",
        {
            "type": "object",
            "properties": {"date": {}, "time": {}, "party_size": {}, "area": {}},
            "required": ["date", "time", "party_size"],
        },
        read_only=True,
    )
    words = known_words([ChatMessage("user", "Room for six on Saturday at one pm?")])
    call = called("check_availability", date="Saturday", time="13:00", party_size=6)
    assert grounded_call(call, spec, words) == (call, [])
    guessed = called("check_availability", date="today", time="12:00", party_size=6)
    assert grounded_call(guessed, spec, words)[1] == ["date", "time"]
    optional = called("check_availability", date="Saturday", time="1 pm", party_size=6, area="bar")
    kept, unsaid = grounded_call(optional, spec, words)
    assert unsaid == [] and dict(kept.arguments) == {
        "date": "Saturday",
        "time": "1 pm",
        "party_size": 6,
    }


async def test_a_forced_call_with_a_guessed_value_asks_for_it_instead(
    make_call: Callable[..., Call],
) -> None:
    ran: list[str] = []
    llm = FakeLlm(["We have a table free."], [called("check_availability", day="today")])
    call = asking_for_a_table(make_call, llm, ran)
    await call.say()
    await call.idle()
    assert ran == []  # a lookup for a day nobody named is not run
    assert call.done(1).text == question_for(["day"], TO_CHECK)  # type: ignore[union-attr]
    assert call.done(1).text == "I can check that for you. What day should I use?"  # type: ignore[union-attr]


async def test_a_forced_call_that_would_act_unasked_is_not_run(
    make_call: Callable[..., Call],
) -> None:
    """The model was made to write a call because it claimed something: a tool that acts
    with no readback is not run on that (the caller never asked for it)."""
    booked: list[str] = []

    @tool
    async def book_table(day: str) -> str:
        """Book a table on a day."""
        booked.append(day)
        return "booked"

    llm = FakeLlm(["That will be $45."], [called("book_table", day="Friday")])
    call = make_call(
        stt=FakeStt("How much is a table on Friday?"),
        llm=llm,
        agent=running(book_table),
        deadlines={"filler": ""},
    )
    await call.say()
    await call.idle()
    assert llm.tool_choices == ["auto", "required"]
    assert booked == []
    assert call.done(1).text == UNCHECKED  # type: ignore[union-attr]
