"""A client tool written to slip past the size check at ``session.update`` (a description of
digits: a token a byte for Qwen's tokenizer, three bytes a token for the estimate), on the
embedded model with a 1,024-token context: the turn it breaks ends with a typed
``context_length_exceeded`` error and a failed response, with no traceback in the log, and
once the tool is gone the same call is answered again by the model (issue 29, finding 4)."""

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
