"""A text frame that is not UTF-8 on each WebSocket transport of the real server: the
transport's typed error where its protocol has one, close 1007 with a reason, the call's
session closed, and in the server's log one warning per connection and no traceback (each
test's own part of the shared server's log, so the tests run alone and in any order)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests import support
from tests.support import RunningServer, metric_value, metrics_text, tracebacks
from voxpipe.audio.pcm import ulaw_encode

pytestmark = pytest.mark.e2e

TIMEOUT_S = 30.0
CLOSE_BAD_DATA = 1007
WARNING = "is not UTF-8"
HELD = ('voxpipe_calls{state="connected"}', 'voxpipe_calls{state="detached"}')
_connections = [0]  # connections the running test failed with invalid UTF-8


def _invalid_utf8_counted(server: RunningServer) -> float:
    metrics = httpx.get(f"{server.http}/metrics", timeout=5).text
    return metric_value(metrics, 'voxpipe_errors_total{code="invalid_utf8"}') or 0.0


@pytest.fixture(autouse=True)
def one_warning_per_connection(server: RunningServer) -> Iterator[None]:
    """The log the server wrote during a test: no traceback, uvicorn's own handling never
    ran, and one warning for each connection the test failed with invalid UTF-8, each
    counted in ``voxpipe_errors_total{code="invalid_utf8"}``."""
    _connections[0] = 0
    log_start = server.log_path.stat().st_size
    counted = _invalid_utf8_counted(server)
    yield
    assert _invalid_utf8_counted(server) - counted >= _connections[0]
    with server.log_path.open("rb") as log:
        log.seek(log_start)
        text = log.read().decode(errors="replace")
    assert not tracebacks(text), "\n\n".join(tracebacks(text))[-4000:]
    assert "Invalid UTF-8 sequence" not in text, "uvicorn's own handling ran"
    warnings = [line for line in text.splitlines() if WARNING in line]
    assert len(warnings) == _connections[0], warnings
    assert all(" WARNING " in line for line in warnings), warnings
    calls = [line.split(" call ", 1)[1].split(":", 1)[0] for line in warnings]
    assert len(set(calls)) == len(calls), "one line per connection"


async def until_closed(ws: ClientConnection) -> tuple[list[Any], int, str]:
    """Every JSON message until the server closes: (messages, close code, close reason)."""
    _connections[0] += 1
    return await support.until_closed(ws, TIMEOUT_S)


async def no_call_held(server: RunningServer) -> None:
    """The call was ended, not kept for a resume."""
    deadline = time.monotonic() + 10
    while True:
        metrics = await metrics_text(server)
        if [metric_value(metrics, m) for m in HELD] == [0, 0] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert [metric_value(metrics, m) for m in HELD] == [0, 0], "the call is still held"


async def test_native_mid_call(server: RunningServer) -> None:
    async with websockets.connect(server.ws, open_timeout=TIMEOUT_S) as ws:
        await ws.send(json.dumps({"type": "session.start"}))
        started = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
        assert started["type"] == "session.started"
        for _ in range(25):  # half a second of silence: the call is under way
            await ws.send(bytes(640))
        await ws.send(b'{"type": "ping", "note": "caf\xe9"}', text=True)  # Latin-1, not UTF-8
        events, code, reason = await until_closed(ws)
    errors = [e for e in events if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["invalid_utf8"], events
    assert "UTF-8" in errors[0]["message"] and events[-1] is errors[0], "the error comes last"
    assert code == CLOSE_BAD_DATA and reason.startswith("invalid_utf8: "), reason
    await no_call_held(server)


async def test_native_before_session_start(server: RunningServer) -> None:
    async with websockets.connect(server.ws, open_timeout=TIMEOUT_S) as ws:
        await ws.send(b"\xff\xfe\xfd", text=True)
        events, code, reason = await until_closed(ws)
    assert [(e["type"], e["code"]) for e in events] == [("error", "invalid_utf8")]
    assert code == CLOSE_BAD_DATA and reason.startswith("invalid_utf8: ")


async def test_realtime(server: RunningServer) -> None:
    url = f"ws://127.0.0.1:{server.port}/v1/realtime?model=gpt-realtime"
    async with websockets.connect(url, open_timeout=TIMEOUT_S) as ws:
        for kind in ("session.created", "conversation.created"):
            assert json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))["type"] == kind
        await ws.send(b'{"type": "input_audio_buffer.append", "audio": "\xed\xa0\x80"}', text=True)
        events, code, reason = await until_closed(ws)
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 1, events
    error = errors[0]["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_utf8"), error
    assert code == CLOSE_BAD_DATA and reason.startswith("invalid_utf8: ")
    await no_call_held(server)


async def test_twilio_mid_call(server: RunningServer) -> None:
    sid = f"MZ{uuid.uuid4().hex}"
    ids = {"streamSid": sid, "accountSid": f"AC{uuid.uuid4().hex}", "callSid": f"CA{sid[2:]}"}
    url = f"ws://127.0.0.1:{server.port}/v1/twilio"
    async with websockets.connect(url, open_timeout=TIMEOUT_S) as ws:
        await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        start = {
            **ids,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        }
        await ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": sid,
                                  "start": start}))  # fmt: skip
        payload = base64.b64encode(ulaw_encode(bytes(320))).decode()  # 20 ms of silence
        for n in range(1, 11):
            media = {"track": "inbound", "chunk": str(n), "timestamp": str(n * 20),
                     "payload": payload}  # fmt: skip
            await ws.send(json.dumps({"event": "media", "sequenceNumber": str(n + 1),
                                      "streamSid": sid, "media": media}))  # fmt: skip
        await ws.send(b'{"event": "media", "\xc3\x28": 1}', text=True)
        events, code, reason = await until_closed(ws)
    assert [e for e in events if e.get("event") not in ("media", "mark", "clear")] == []
    assert code == CLOSE_BAD_DATA and reason.startswith("invalid_utf8: ")
    await no_call_held(server)
