"""A text frame that is not UTF-8, on each WebSocket transport, against the real app on fake
engines under uvicorn with voxpipe's WebSocket protocol: the transport's typed error where
its protocol has one, close 1007 with a reason, one warning and no traceback in the log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn
import websockets
from websockets.asyncio.client import ClientConnection

from tests.support import until_closed
from tests.unit.fakes import fake_engines
from voxpipe.config import Config
from voxpipe.loadtest.server_process import free_port
from voxpipe.server.app import create_app
from voxpipe.server.websocket_protocol import WebSocketProtocol

TIMEOUT_S = 20.0
NOT_UTF8 = [b"\xff", b'{"type": "ping"}\xc3', b"\xed\xa0\x80", "héllo".encode("latin-1")]


@contextlib.asynccontextmanager
async def serve() -> AsyncIterator[tuple[int, Any]]:
    config = Config.load(server={"turn_log_path": None}, store={"path": None})

    port = free_port()
    app = create_app(config, fake_engines)
    # log_config=None: uvicorn's loggers propagate to the root, where caplog listens.
    server = uvicorn.Server(
        uvicorn.Config(app, port=port, log_config=None, log_level="info", ws=WebSocketProtocol)
    )
    task = asyncio.create_task(server.serve())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            async with asyncio.timeout(TIMEOUT_S):
                while not (  # noqa: ASYNC110  # polls the server
                    server.started and (await http.get("/readyz")).status_code == 200
                ):
                    await asyncio.sleep(0.02)
        yield port, app.state.voxpipe
    finally:
        server.should_exit = True
        await task


async def closed(ws: ClientConnection) -> tuple[list[Any], int, str]:
    """Every message until the server closes: (JSON messages, close code, reason)."""
    return await until_closed(ws, TIMEOUT_S)


def assert_logged_once(caplog: pytest.LogCaptureFixture, connections: int) -> None:
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], [
        r.getMessage() for r in caplog.records
    ]
    warnings = [r for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert len(warnings) == connections, [r.getMessage() for r in warnings]
    assert all(r.levelno == logging.WARNING for r in warnings)


@pytest.mark.parametrize("data", NOT_UTF8)
async def test_native_gets_invalid_utf8_then_1007(
    data: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with serve() as (port, state):
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/voice") as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            started = json.loads(await ws.recv())
            assert started["type"] == "session.started"
            await ws.send(data, text=True)
            events, code, reason = await closed(ws)
        assert [e["type"] for e in events] == ["error"], events
        assert events[0]["code"] == "invalid_utf8" and "UTF-8" in events[0]["message"]
        assert code == 1007 and reason.startswith("invalid_utf8: "), reason
        async with asyncio.timeout(TIMEOUT_S):
            while state.calls.active or state.calls.detached:  # noqa: ASYNC110
                await asyncio.sleep(0.02)  # the session was closed, not kept for a resume
    assert_logged_once(caplog, 1)


async def test_realtime_gets_its_error_event_then_1007(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serve() as (port, _):
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/realtime?model=x") as ws:
            for kind in ("session.created", "conversation.created"):
                assert json.loads(await ws.recv())["type"] == kind
            await ws.send(b'{"type": "input_audio_buffer.clear"}\xff', text=True)
            events, code, reason = await closed(ws)
    assert [e["type"] for e in events] == ["error"], events
    error = events[0]["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_utf8")
    assert code == 1007 and reason.startswith("invalid_utf8: ")
    assert_logged_once(caplog, 1)


async def test_twilio_gets_1007_with_a_reason(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serve() as (port, _):
        for _ in range(2):  # each connection logs its own warning, and only one
            async with websockets.connect(f"ws://127.0.0.1:{port}/v1/twilio") as ws:
                connected = {"event": "connected", "protocol": "Call", "version": "1.0.0"}
                await ws.send(json.dumps(connected))
                await ws.send(b"\xff\xfe", text=True)
                await ws.send(b"\xff\xfe", text=True)  # after the first: never read
                events, code, reason = await closed(ws)
            assert events == [], "Twilio has no error message"
            assert code == 1007 and reason.startswith("invalid_utf8: ")
    assert_logged_once(caplog, 2)
