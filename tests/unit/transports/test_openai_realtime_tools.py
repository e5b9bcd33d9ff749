"""A client's own function tool over ``/v1/realtime``, end to end on fake engines with the
official ``openai`` SDK (GA and beta): the client declares ``book_table``, the scripted
model calls it, the SDK receives the call, answers it with a ``function_call_output``
and asks for the next response, which the model writes seeing the result."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from tests.unit.transports.test_openai_realtime import TIMEOUT_S, connect, error_of, speak
from voxpipe.config import Config
from voxpipe.conversation.session import Session
from voxpipe.engines.base import Engines, ToolCallDelta, ToolCallRequest

pytestmark = pytest.mark.skipif(
    not hasattr(Session, "set_client_tools"), reason="the session's client tools are not here yet"
)

BOOK = {
    "type": "function",
    "name": "book_table",
    "description": "Book a table for the caller.",
    "parameters": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "party_size": {"type": "integer"}},
        "required": ["name", "party_size"],
    },
}
ARGS = '{"name": "Smith", "party_size": 2}'
CALL = [
    ToolCallDelta("call_1", "book_table", '{"name": "Smith",'),
    ToolCallDelta("call_1", "book_table", ' "party_size": 2}'),
    ToolCallRequest("call_1", "book_table", {"name": "Smith", "party_size": 2}, ARGS),
]
ANSWER = ["Your table", " is booked."]


@contextlib.asynccontextmanager
async def serve(llm: FakeLlm) -> AsyncIterator[int]:
    config = quiet_config()

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt("book a table"), llm, FakeTts(samples_per_clause=8000))

    async with serving(config, engines, TIMEOUT_S) as (port, _):
        yield port


def update(beta: bool, **session: Any) -> dict[str, Any]:
    return {
        "type": "session.update",
        "session": session if beta else {"type": "realtime", **session},
    }


@pytest.mark.parametrize("beta", [False, True], ids=["ga", "beta"])
async def test_the_sdk_runs_its_tool_and_hears_the_answer(beta: bool) -> None:
    llm = FakeLlm(CALL, ANSWER, delay_s=0.01)
    async with serve(llm) as port, connect(port, beta=beta) as rt:
        await rt.send(update(beta, tools=[BOOK], tool_choice="auto"))
        updated = (await rt.next("session.updated"))["session"]
        assert updated["tools"] == [BOOK] and updated["tool_choice"] == "auto"

        await speak(rt)
        first = (await rt.next("response.done", timeout_s=TIMEOUT_S))["response"]
        assert first["status"] == "completed"
        [call] = first["output"]
        assert (call["type"], call["name"], call["call_id"]) == (
            "function_call",
            "book_table",
            "call_1",
        )
        assert json.loads(call["arguments"]) == {"name": "Smith", "party_size": 2}
        done = await rt.next("response.function_call_arguments.done")
        assert done["arguments"] == call["arguments"] and done["item_id"] == call["id"]
        deltas = rt.of("response.function_call_arguments.delta")
        assert "".join(d["delta"] for d in deltas) == ARGS
        assert [t.name for t in llm.tools[0]] == ["book_table"], "the model was offered it"
        assert not rt.of("response.output_audio.delta") and not rt.of("response.audio.delta")

        since = len(rt.events)
        await rt.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "function_call_output",
                    "call_id": "call_1",
                    "output": '{"ok": true}',
                },
            }
        )
        added = "conversation.item.created" if beta else "conversation.item.added"
        item = (await rt.next(added, since=since))["item"]
        assert (item["type"], item["call_id"]) == ("function_call_output", "call_1")

        await rt.send({"type": "response.create"})
        second = (await rt.next("response.done", since=since, timeout_s=TIMEOUT_S))["response"]
        assert second["status"] == "completed" and second["id"] != first["id"]
        [message] = second["output"]
        assert message["content"][0]["transcript"] == "Your table is booked."
        assert rt.audio(second["id"]), "the answer is heard"
        seen = llm.calls[1]
        assert any(m.role == "tool" and m.tool_call_id == "call_1" for m in seen), seen
        assert any(c.call_id == "call_1" for m in seen for c in m.tool_calls), seen


async def test_an_output_for_no_call_is_refused_and_the_call_goes_on() -> None:
    async with serve(FakeLlm(ANSWER)) as port, connect(port) as rt:
        await rt.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": "call_nope", "output": "x"},
            }
        )
        error = error_of(await rt.next("error"))
        assert (error["code"], error["param"]) == ("invalid_value", "item.call_id")
        since = len(rt.events)
        await rt.send(update(False, tools=[{**BOOK, "parameters": {"type": "array"}}]))
        error = error_of(await rt.next("error", since=since))
        assert (error["code"], error["param"]) == ("invalid_value", "session.tools.0.parameters")
        await rt.send(update(False, tools=[BOOK]))
        assert (await rt.next("session.updated"))["session"]["tools"] == [BOOK]
