"""A call restored on another worker never runs a call whose result is recorded: one that
may have been running when its worker died is run again only if its tool is idempotent,
and only once; any other has an unknown outcome, which the caller hears in plain words. Then the
restored session answers the result itself."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.unit.conversation.harness import Call
from tests.unit.conversation.tools_support import StateStore, called, running, saved_state
from tests.unit.fakes import FakeLlm
from voxpipe.agent import tool
from voxpipe.conversation.tool_ledger import RESTARTED, UNKNOWN_SAID
from voxpipe.engines.base import ChatMessage

USER = {"role": "user", "content": "book a table for two under Smith"}


def call_message(name: str = "book_table") -> dict[str, Any]:
    return ChatMessage("assistant", "", (called(name, name="Smith"),)).to_dict()


def result_message(content: str = '"booked"') -> dict[str, Any]:
    return ChatMessage("tool", content, tool_call_id="call_1").to_dict()


def booking_tool(runs: list[str], idempotent: bool = False) -> Any:
    @tool(idempotent=idempotent)
    async def book_table(name: str) -> str:
        """Book a table."""
        runs.append(name)
        return "booked"

    return book_table


async def restored(
    make_call: Callable[..., Call], state: dict[str, Any], runs: list[str], **tool: Any
) -> Call:
    """A session of this worker restores ``state``, and answers what it has to."""
    call = make_call(
        llm=FakeLlm(["Your table is booked."]),
        agent=running(booking_tool(runs, **tool)),
        store=StateStore(),
    )
    call.session.saved.restore(state)
    await call.until(lambda: call.done(2) is not None)
    return call


async def test_a_completed_call_is_not_run_again_and_its_result_is_answered(
    make_call: Callable[..., Call],
) -> None:
    runs: list[str] = []
    state = saved_state([USER, call_message(), result_message()])
    call = await restored(make_call, state, runs)
    assert runs == []
    # The other worker died after the result, before the answer: this one answers it.
    (request,) = call.llm.calls
    assert [m.role for m in request] == ["system", "user", "assistant", "tool"]
    assert call.done(2).text == "Your table is booked."  # type: ignore[union-attr]
    assert [m.role for m in call.session.history.turns][-1] == "assistant"


async def test_an_answered_call_restores_quietly(make_call: Callable[..., Call]) -> None:
    runs: list[str] = []
    answer = {"role": "assistant", "content": "Booked."}
    call = make_call(llm=FakeLlm(), agent=running(booking_tool(runs)))
    call.session.saved.restore(saved_state([USER, call_message(), result_message(), answer]))
    await call.idle()
    assert runs == [] and call.llm.calls == []  # nothing to run, nothing to answer


async def test_a_call_that_may_have_run_has_an_unknown_outcome(
    make_call: Callable[..., Call],
) -> None:
    runs: list[str] = []
    call = await restored(make_call, saved_state([USER, call_message()]), runs)
    assert runs == []
    result = call.session.history.turns[2]
    assert result.role == "tool" and result.tool_call_id == "call_1"
    assert json.loads(result.content) == {"error": RESTARTED}
    # The caller hears that it is unknown in plain words (the 0.5B model read the error out,
    # markup and all); the model sees the result, and those words, on the next turn.
    assert call.llm.calls == []
    assert call.done(2).text == UNKNOWN_SAID  # type: ignore[union-attr]
    assert call.session.history.turns[-1] == ChatMessage("assistant", UNKNOWN_SAID)
    sample = call.metrics.registry.get_sample_value
    status = {"tool": "book_table", "status": "unknown_outcome"}
    assert sample("voxpipe_tool_calls_total", status) == 1


async def test_an_idempotent_tool_runs_again_once(make_call: Callable[..., Call]) -> None:
    runs: list[str] = []
    call = await restored(make_call, saved_state([USER, call_message()]), runs, idempotent=True)
    assert runs == ["Smith"]
    assert call.session.history.turns[2] == ChatMessage("tool", '"booked"', tool_call_id="call_1")
    assert call.session.saved.state()["tool_reruns"] == ["call_1"]

    # Should this worker die too while it ran: the next one does not run it a third time.
    again: list[str] = []
    state = saved_state([USER, call_message()], tool_reruns=["call_1"])
    call = await restored(make_call, state, again, idempotent=True)
    assert again == []
    assert json.loads(call.session.history.turns[2].content) == {"error": RESTARTED}


async def test_tool_calls_and_results_survive_the_saved_state(
    make_call: Callable[..., Call],
) -> None:
    runs: list[str] = []
    state = saved_state([USER, call_message(), result_message()])
    call = await restored(make_call, state, runs)
    again = call.session.saved.state()
    assert again["messages"][:3] == [USER, call_message(), result_message()]
