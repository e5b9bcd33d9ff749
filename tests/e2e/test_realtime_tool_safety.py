"""Tools against the embedded model over ``/v1/realtime`` (issue 29).

Finding 4: a client tool written to slip past the size check at ``session.update`` (a
description of digits: a token a byte for Qwen's tokenizer, three bytes a token for the
estimate), on a 1,024-token context: the turn it breaks ends with a typed
``context_length_exceeded`` error and a failed response, with no traceback in the log, and
once the tool is gone the same call is answered again by the model.

Finding 8b: after a 200 KB tool output the model recited its tool list. The result was
longer than the whole context, so the engine dropped every turn to fit it, the caller's
question with it, and the model, shown its instructions and tools alone, described them
(on today's engine it writes nothing sayable, and the reply falls back to reading the
whole record out). The result now reaches the model cut (``tool_ledger.MAX_RESULT_CHARS``),
and the model answers the question from its start."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.unit.fakes import FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from voxpipe.config import Config
from voxpipe.engines.base import Engines
from voxpipe.engines.loader import load_llm

pytestmark = pytest.mark.e2e

TIMEOUT_S = 120.0
N_CTX = 1024
DIGITS = "".join(str(i * 7919 % 10) for i in range(1300))  # 1,300 tokens; estimated 433
SNEAKY = {
    "type": "function",
    "name": "lookup",
    "description": DIGITS,
    "parameters": {"type": "object", "properties": {}},
}


async def receive(ws: ClientConnection) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
    return event


async def until(ws: ClientConnection, kind: str) -> list[dict[str, Any]]:
    """Every event up to and including the first of ``kind``."""
    events = []
    while not events or events[-1]["type"] != kind:
        events.append(await receive(ws))
    return events


def tools(*declared: dict[str, Any]) -> str:
    return json.dumps(
        {"type": "session.update", "session": {"type": "realtime", "tools": list(declared)}}
    )


async def test_a_turn_whose_tools_overflow_the_context_fails_typed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    config = quiet_config(llm={"n_ctx": N_CTX, "max_sequences": 1})

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt("hello"), load_llm(config), FakeTts())

    url_path = "/v1/realtime?model=gpt-realtime"
    async with serving(config, engines, TIMEOUT_S) as (port, _):
        async with websockets.connect(f"ws://127.0.0.1:{port}{url_path}") as ws:
            await until(ws, "conversation.created")
            await ws.send(tools(SNEAKY))
            assert (await until(ws, "session.updated"))[-1]["type"] == "session.updated"
            user = {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Hello, are you open today?"}]}  # fmt: skip
            await ws.send(json.dumps({"type": "conversation.item.create", "item": user}))
            await ws.send(json.dumps({"type": "response.create"}))
            events = await until(ws, "response.done")
            errors = [e["error"] for e in events if e["type"] == "error"]
            assert [e["code"] for e in errors] == ["context_length_exceeded"], events
            assert str(N_CTX) in errors[0]["message"], errors
            assert events[-1]["response"]["status"] == "failed", events[-1]

            await ws.send(tools())  # the tool is gone: the call goes on
            await until(ws, "session.updated")
            await ws.send(json.dumps({"type": "response.create"}))
            done = (await until(ws, "response.done"))[-1]["response"]
            assert done["status"] == "completed", done
            [item] = done["output"]
            assert item["content"][0]["transcript"].strip(), item
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    assert len([r for r in caplog.records if "do not fit" in r.getMessage()]) == 1


PARCEL_TOOL = {
    "type": "function",
    "name": "track_parcel",
    "description": "Where a parcel is: its status and the day it arrives.",
    "parameters": {
        "type": "object",
        "properties": {"parcel": {"type": "string", "description": "the parcel number"}},
        "required": ["parcel"],
    },
}
SCANS = [{"at": f"sorting centre {i}", "note": "scanned and sent on"} for i in range(3300)]
HUGE = json.dumps(
    {"parcel": "4417", "status": "out for delivery", "arrives": "Thursday", "scans": SCANS}
)


ANSWER_CHARS = 400  # a short answer; the record read out runs to hundreds of kilobytes


async def answer_of(ws: ClientConnection) -> str:
    """The text of the response in progress, once it is done; a failure as soon as it runs
    past :data:`ANSWER_CHARS` (without the cut, the model wrote nothing to say and the
    reply fell back to reading the whole result out, at speaking pace)."""
    said = ""
    async with asyncio.timeout(TIMEOUT_S):
        while (event := await receive(ws))["type"] != "response.done":
            said += event.get("delta", "") if event["type"] == "response.output_text.delta" else ""
            assert len(said) <= ANSWER_CHARS, f"not an answer: {said[:300]}..."
    assert event["response"]["status"] == "completed", event
    return said


async def test_a_200_kb_tool_output_is_answered_from_not_recited_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Finding 8b, on the embedded model at its default context (4,096 tokens)."""
    caplog.set_level(logging.WARNING)
    assert 190_000 < len(HUGE.encode()) < 220_000, len(HUGE)

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt("hello"), load_llm(config), FakeTts())

    session = {
        "type": "realtime",
        "output_modalities": ["text"],
        "instructions": "You answer a parcel company's phone. Answer in one short sentence.",
        "tools": [PARCEL_TOOL],
    }
    items = [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "When does my parcel 4417 arrive?"}]},
        {"type": "function_call", "call_id": "call_parcel", "name": "track_parcel",
         "arguments": '{"parcel": "4417"}'},
        {"type": "function_call_output", "call_id": "call_parcel", "output": HUGE},
    ]  # fmt: skip
    url_path = "/v1/realtime?model=gpt-realtime"
    async with serving(quiet_config(), engines, TIMEOUT_S) as (port, _):
        async with websockets.connect(f"ws://127.0.0.1:{port}{url_path}", max_size=None) as ws:
            await until(ws, "conversation.created")
            await ws.send(json.dumps({"type": "session.update", "session": session}))
            await until(ws, "session.updated")
            for item in items:
                await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
                added = (await until(ws, "conversation.item.added"))[-1]
                assert added["item"]["type"] == item["type"], added
            await ws.send(json.dumps({"type": "response.create"}))
            said = await answer_of(ws)
    assert "thursday" in said.lower(), said  # answered from the result: the question was kept
    assert "track_parcel" not in said and "parcel number" not in said, said  # not its tools
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
