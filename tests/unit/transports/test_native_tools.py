"""An agent's greeting and tool calls on ``/v1/voice``, through the wire: the greeting is the
call's first reply, and a tool call shows as ``tool.started`` and ``tool.finished`` and in
the turn's ``turn.metrics`` (``docs/protocol.md``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from tests.unit.conversation.tools_support import called
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from tests.unit.transports.native_wire import TIMEOUT_S, App, speech
from voxpipe.agent import Agent, tool
from voxpipe.config import Config
from voxpipe.engines.base import Engines

GREETING = "Chez Test, good evening."
bookings: list[dict[str, Any]] = []


@tool(phrase="Let me book that.")
async def book_table(name: str, party_size: int) -> dict[str, Any]:
    """Book a table."""
    bookings.append({"name": name, "party_size": party_size})
    return {"booked": True}


AGENT = Agent(instructions="You book tables.", greeting=GREETING, tools=[book_table])


@contextlib.asynccontextmanager
async def serve_agent(llm: FakeLlm) -> AsyncIterator[App]:
    config = quiet_config()

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt("book for two, Smith"), llm, FakeTts())

    async with serving(config, engines, TIMEOUT_S, agent=AGENT) as (port, http):
        yield App(port, http)


async def test_the_greeting_then_a_tool_call_over_the_wire() -> None:
    bookings.clear()
    script = [called("book_table", name="Smith", party_size=2)]
    llm = FakeLlm(["Hello."], script, ["Booked", "."])  # the first: the warm-up's
    async with serve_agent(llm) as app, app.connect() as line:
        # The server warmed the agent's prompt, its tools in it, before it was ready.
        assert llm.calls[0][0].content == "You book tables."
        assert [t.name for t in llm.tools[0]] == ["book_table"]
        assert llm.prefills[0][0] == "__warmup_tools__"
        assert [t.name for t in llm.prefill_tools[0]] == ["book_table"]
        await line.start()
        done = await line.until("response.done")
        assert (done["turn_id"], done["text"]) == (1, GREETING)
        await line.until("turn.metrics")

        metrics = await line.speak(speech())
        kinds = [e["type"] for e in line.events]
        started = next(e for e in line.events if e["type"] == "tool.started")
        finished = next(e for e in line.events if e["type"] == "tool.finished")
        assert kinds.index("tool.started") < kinds.index("tool.finished")
        assert started["turn_id"] == 2 and started["name"] == "book_table"
        assert started["arguments"] == {"name": "Smith", "party_size": 2}
        assert json.loads(started["arguments_json"]) == started["arguments"]
        assert started["executor"] == "server" and started["call_id"] == "call_1"
        assert finished["status"] == "ok" and finished["duration_ms"] >= 0
        assert json.loads(finished["output"]) == {"booked": True}
        assert metrics["turn_id"] == 2
        (entry,) = metrics["tools"]
        assert (entry["name"], entry["status"]) == ("book_table", "ok")
        assert bookings == [{"name": "Smith", "party_size": 2}]
        assert await app.metric('voxpipe_tool_calls_total{status="ok",tool="book_table"}') == 1
