"""``/v1/voice`` as its client sees it, on the real app with fake engines: what the native
protocol tests share. Everything goes through the wire (JSON text, PCM16 binary frames, close
codes), so the tests hold whatever the transport's insides become."""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.support import metric_value
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from voxpipe.config import Config
from voxpipe.engines.base import Engines

TIMEOUT_S = 10.0
RATE = 16000  # the fake TTS's rate, so the default output rate too
FRAME_SAMPLES = RATE // 50  # 20 ms
HEADER = struct.Struct("<II")  # seq, turn_id (docs/protocol.md, "Audio")
CONNECTED = 'voxpipe_calls{state="connected"}'
DETACHED = 'voxpipe_calls{state="detached"}'


class App:
    """The app in-process: its port and an HTTP client for ``/metrics`` and ``/readyz``."""

    def __init__(self, port: int, http: httpx.AsyncClient) -> None:
        self.port, self.http = port, http

    async def metric(self, sample: str) -> float:
        return metric_value((await self.http.get("/metrics")).text, sample) or 0.0

    async def errors(self, code: str) -> float:
        return await self.metric(f'voxpipe_errors_total{{code="{code}"}}')

    async def until_metric(self, sample: str, value: float) -> None:
        async with asyncio.timeout(TIMEOUT_S):
            while await self.metric(sample) != value:  # noqa: ASYNC110  # polls /metrics
                await asyncio.sleep(0.02)

    def connect(self, **query: str) -> contextlib.AbstractAsyncContextManager[Line]:
        return _connect(self.port, query)


@contextlib.asynccontextmanager
async def serve(clause_samples: int = 1600, **sections: Any) -> AsyncIterator[App]:
    """The real app on fake engines: every turn is heard as "hello there" and answered
    "Hello there." in one clause of ``clause_samples`` at 16 kHz."""
    config = quiet_config(**sections)

    def engines(config: Config) -> Engines:
        tts = FakeTts(samples_per_clause=clause_samples)
        return Engines(FakeVad(), FakeStt("hello there"), FakeLlm(), tts)

    async with serving(config, engines, TIMEOUT_S) as (port, http):
        yield App(port, http)


@contextlib.asynccontextmanager
async def _connect(port: int, query: dict[str, str]) -> AsyncIterator[Line]:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    url = f"ws://127.0.0.1:{port}/v1/voice" + (f"?{q}" if q else "")
    async with websockets.connect(url, max_size=None, close_timeout=1) as ws:
        yield Line(ws)


def speech(loud_ms: int = 500, quiet_ms: int = 600) -> list[bytes]:
    """Audio the fake VAD hears, then silence past the turn's 300 ms, in 20 ms frames."""
    loud = np.full(FRAME_SAMPLES, 16384, "<i2").tobytes()
    return [loud] * (loud_ms // 20) + [bytes(2 * FRAME_SAMPLES)] * (quiet_ms // 20)


class Line:
    """One connection: sends events and audio, and reads the server's messages in order
    (``received``: every one as it came; JSON events decoded in ``events``)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.received: list[str | bytes] = []
        self.events: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any] | str | bytes) -> None:
        await self.ws.send(json.dumps(message) if isinstance(message, dict) else message)

    async def message(self) -> str | bytes:
        message = await asyncio.wait_for(self.ws.recv(), TIMEOUT_S)
        self.received.append(message)
        if isinstance(message, str):
            event = json.loads(message)
            assert isinstance(event, dict), message
            self.events.append(event)
        return message

    async def event(self) -> dict[str, Any]:
        """The next JSON event (audio frames before it are kept in ``received``)."""
        while isinstance(await self.message(), bytes):
            pass
        return self.events[-1]

    async def expect(self, kind: str) -> dict[str, Any]:
        event = await self.event()
        assert event["type"] == kind, event
        return event

    async def until(self, kind: str) -> dict[str, Any]:
        """Read on to the next event of ``kind``."""
        while (event := await self.event())["type"] != kind:
            pass
        return event

    async def error(self, code: str) -> dict[str, Any]:
        """The next event is an ``error`` with ``code`` and a message that says why."""
        event = await self.event()
        assert (event["type"], event.get("code")) == ("error", code), event
        assert isinstance(event["message"], str) and event["message"], event
        return event

    async def start(self, **fields: Any) -> dict[str, Any]:
        await self.send({"type": "session.start", **fields})
        return await self.expect("session.started")

    async def usable(self) -> None:
        """Still a working connection: a ping is answered by a pong, with nothing between."""
        await self.send({"type": "ping"})
        await self.expect("pong")

    async def speak(self, frames: list[bytes] | None = None) -> dict[str, Any]:
        """Say one turn; read on to its ``turn.metrics`` (its last event) and return it."""
        for frame in frames or speech():
            await self.send(frame)
        return await self.until("turn.metrics")

    def frames(self) -> list[tuple[int, int, bytes]]:
        """Every reply audio frame received: (seq, turn_id, PCM16)."""
        return [
            (*HEADER.unpack(m[: HEADER.size]), m[HEADER.size :])
            for m in self.received
            if isinstance(m, bytes)
        ]

    async def closed(self) -> tuple[int, str]:
        """The server closes the connection: its close frame's code and reason."""
        with pytest.raises(websockets.ConnectionClosed) as closing:
            async with asyncio.timeout(TIMEOUT_S):
                while True:
                    await self.message()
        assert closing.value.rcvd is not None, "closed without a close frame"
        return closing.value.rcvd.code, closing.value.rcvd.reason

    def drop(self) -> None:
        """The connection vanishes: no close frame, as when a network goes away."""
        self.ws.transport.abort()
