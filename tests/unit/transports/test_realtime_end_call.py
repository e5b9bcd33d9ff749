"""A call the agent ends or moves over ``/v1/realtime`` (the server's agent, its
instructions too): the Realtime API has no event for either. An ended call's socket closes
normally (1000) once the goodbye has gone out, and not before; a reply that calls no
``end_call`` leaves the call open; ``transfer_call`` fails as the model is told, and the
call goes on."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from tests.unit.conversation.tools_support import called
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from voxpipe.agent import Agent
from voxpipe.agent.call_control import DEFAULT_GOODBYE, end_call, transfer_call_to
from voxpipe.config import Config
from voxpipe.engines.base import Engines

TIMEOUT_S = 20.0
AGENT = Agent(instructions="You answer the phone.", tools=[end_call, transfer_call_to("+15550100")])
WARM_UP = ["Hello."]  # what the server's warm-up of the agent is answered


@contextlib.asynccontextmanager
async def connect(llm: FakeLlm) -> AsyncIterator[ClientConnection]:
    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt("hello"), llm, FakeTts(samples_per_clause=4800))

    async with serving(quiet_config(), engines, TIMEOUT_S, agent=AGENT) as (port, _):
        url = f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-realtime"
        async with websockets.connect(url, max_size=None) as ws:
            yield ws


async def say(ws: ClientConnection, text: str) -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await ws.send(json.dumps({"type": "response.create"}))


async def events_until_closed(ws: ClientConnection) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with contextlib.suppress(websockets.ConnectionClosed):
        while True:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))
    return events


async def test_the_socket_closes_normally_after_the_goodbye() -> None:
    llm = FakeLlm(WARM_UP, [called("end_call")], ["Never asked."])
    async with connect(llm) as ws:
        await say(ws, "Thanks, that's all. Bye.")
        events = await events_until_closed(ws)
        kinds = [e["type"] for e in events]
        assert ws.close_code == 1000, (ws.close_code, kinds)
        assert ws.close_reason == "call ended: the agent ended the call"
        # The goodbye was said and its response finished before the close.
        assert "response.output_audio.delta" in kinds and kinds[-1] == "response.done", kinds
        said = [e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"]
        assert "".join(said).strip() == DEFAULT_GOODBYE
    # The server's agent answered: its instructions, not the plain assistant's.
    (asked,) = [c for c in llm.calls if c[-1].content == "Thanks, that's all. Bye."]
    assert asked[0].role == "system" and asked[0].content == AGENT.instructions


async def test_a_reply_without_end_call_leaves_the_call_open() -> None:
    async with connect(FakeLlm(WARM_UP, ["We open at noon."], ["Goodbye!"])) as ws:
        await say(ws, "When do you open?")
        kinds: list[str] = []
        while "response.done" not in kinds:
            kinds.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))["type"])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ws.recv(), 1.0)  # nothing more comes, and no close
        assert ws.close_code is None


async def test_a_transfer_fails_as_the_model_is_told_and_the_call_goes_on() -> None:
    llm = FakeLlm(WARM_UP, [called("transfer_call")], ["Sorry, I cannot put you through."])
    async with connect(llm) as ws:
        await say(ws, "Can I speak to a person, please?")
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] != "response.done":
            events.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S)))
        (output,) = [
            e["item"]["output"]
            for e in events
            if e["type"] == "conversation.item.added"
            and e["item"]["type"] == "function_call_output"
        ]
        assert "cannot be transferred" in output, output
        assert llm.calls[2][-1].role == "tool"  # the model was asked again, with the failure
        assert ws.close_code is None
