"""A native call across reconnects, on the real app and fake engines: a dropped connection's
session taken back with what the client missed, a live one replaced, an unknown one not
found. (Restores from a shared store are ``tests/unit/conversation/test_resume.py``'s and the
cluster's e2e tests'.)"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.support import until_closed
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import serving
from voxpipe.config import Config
from voxpipe.engines.base import Engines

TIMEOUT_S = 20.0


def engines(config: Config) -> Engines:
    return Engines(FakeVad(), FakeStt("hello"), FakeLlm(), FakeTts())


@pytest.fixture
async def url() -> AsyncIterator[str]:
    config = Config.load(server={"turn_log_path": None}, store={"path": None})
    async with serving(config, engines, TIMEOUT_S) as (port, _):
        yield f"ws://127.0.0.1:{port}/v1/voice"


async def receive(ws: ClientConnection) -> dict[str, Any]:
    message = await ws.recv()
    assert isinstance(message, str), "no reply audio in these tests"
    event: dict[str, Any] = json.loads(message)
    return event


async def start(ws: ClientConnection, **fields: Any) -> dict[str, Any]:
    await ws.send(json.dumps({"type": "session.start", "session_id": "s1", **fields}))
    return await receive(ws)


async def test_a_dropped_connection_gets_its_session_back_with_what_it_missed(url: str) -> None:
    async with websockets.connect(url) as first:
        started = await start(first)
        assert started["event_id"] == 1 and not started["resumed"]
        await first.send(json.dumps({"type": "ping"}))
        assert await receive(first) == {"type": "pong", "event_id": 2}
        first.transport.abort()  # vanished: no close frame
    async with websockets.connect(f"{url}?session_id=s1") as second:
        resumed = await start(second, resume={"last_event_id": 1, "last_audio_seq": 0})
        assert "event_id" not in resumed, "it belongs to this connection, not the stream"
        assert (resumed["resumed"], resumed["replayed"], resumed["restored"]) == (True, 1, False)
        assert resumed["session_id"] == "s1" and resumed["input_samples"] == 0
        assert await receive(second) == {"type": "pong", "event_id": 2}, "replayed"
        await second.send(json.dumps({"type": "ping"}))
        assert await receive(second) == {"type": "pong", "event_id": 3}, "numbering goes on"
        await second.send(json.dumps({"type": "session.end"}))
        _, code, _ = await until_closed(second, TIMEOUT_S)
        assert code == 1000


async def test_a_resume_replaces_the_connection_still_holding_the_session(url: str) -> None:
    async with websockets.connect(url) as first, websockets.connect(url) as second:
        await start(first)
        resumed = await start(second, resume={"last_event_id": 1})
        assert resumed["resumed"] and resumed["replayed"] == 0
        events, code, reason = await until_closed(first, TIMEOUT_S)
        assert [e["code"] for e in events] == ["session_replaced"]
        assert code == 4003 and reason.startswith("session_replaced: ")


async def test_an_unknown_session_is_not_found(url: str) -> None:
    async with websockets.connect(url) as ws:
        error = await start(ws, session_id="gone", resume={})
        assert (error["type"], error["code"]) == ("error", "session_not_found")
        assert error["message"].startswith("no session 'gone' to resume")
        error = await start(ws, session_id=None, resume={})
        assert error["message"] == "session.start: resume needs session_id"
