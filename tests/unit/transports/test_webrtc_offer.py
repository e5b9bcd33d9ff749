"""The WebRTC door and lifetime on fake engines: a real aiortc call on loopback against the
real app in-process, and every refusal answered with the protocol's error JSON."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn
from aiortc.rtcsctptransport import WEBRTC_STRING

from tests.unit.fakes import fake_engines
from voxpipe.audio.pcm import pcm16_to_float
from voxpipe.clients.webrtc_client import WebRTCClient
from voxpipe.config import Config
from voxpipe.engines.base import Engines
from voxpipe.loadtest.server_process import free_port
from voxpipe.server.app import create_app

TIMEOUT_S = 20.0


class App:
    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url, self.http = url, http

    async def calls(self) -> int:
        return int((await self.http.get("/readyz")).json()["calls"])

    async def wait_calls(self, n: int) -> None:
        async def probe() -> bool:
            return await self.calls() == n

        await until(probe)


async def until(probe: Callable[[], Awaitable[bool]]) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            if await probe():
                return
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def serve(
    ready: bool = True, gate: asyncio.Event | None = None, **sections: dict[str, Any]
) -> AsyncIterator[App]:
    config = Config.load(
        server={"turn_log_path": None, **sections.pop("server", {})},
        store={"path": None},
        deadlines={"filler": ""},
        **sections,
    )
    factory: Callable[[Config], Engines] = fake_engines
    if not ready:

        def factory(config: Config) -> Engines:
            raise RuntimeError("no models in this test")

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(config, factory), port=port, log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S) as http:

            async def up() -> bool:
                return server.started and not (ready and (await http.get("/readyz")).is_error)

            await until(up)
            yield App(url, http)
    finally:
        server.should_exit = True
        await task


def loud_seconds(pcm: bytearray) -> float:
    return float((np.abs(pcm16_to_float(bytes(pcm))) > 0.02).sum()) / 48000


def tone(seconds: float, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)


async def test_a_spoken_turn_and_hang_up_over_the_data_channel() -> None:
    async with serve() as app, WebRTCClient(app.url) as client:
        started = await client.connect(
            TIMEOUT_S, instructions="Be brief.", turn={"silence_ms": 300}
        )
        assert started["session_id"] == client.answer["session_id"]
        assert (started["input_sample_rate"], started["output_sample_rate"]) == (48000, 48000)
        assert started["config"]["turn"]["silence_ms"] == 300
        assert "opus" in client.answer["sdp"].lower()
        assert await app.calls() == 1

        client.line.say(tone(0.6), 16000)
        done = await client.wait_for(lambda: client.event("response.done"), TIMEOUT_S)
        assert done["status"] == "completed" and done["text"] == "Hello there."
        assert client.event("transcript") == {
            "type": "transcript",
            "turn_id": 1,
            "text": "hello there",
        }
        # The track plays the reply in real time: its tone arrives after response.done.
        await client.wait_for(lambda: loud_seconds(client.audio) > 0.05 or None, TIMEOUT_S)

        before = len(client.events)
        client.send({"type": "history.get"})
        history = await client.wait_for(lambda: client.event("history", before), TIMEOUT_S)
        assert [m["role"] for m in history["messages"]] == ["user", "assistant"]
        client.send({"type": "session.update", "turn": {"silence_ms": "x"}})
        client.send({"type": "no.such"})
        client.send({"type": "playback.ack", "seq": 99999})
        await client.wait_for(lambda: len(client.events) >= before + 4 or None, TIMEOUT_S)
        codes = [e.get("code") for e in client.events[before:] if e["type"] == "error"]
        assert codes == ["invalid_event", "unknown_event", "invalid_event"]

        client.send({"type": "session.end"})
        await client.wait_for(lambda: client.state in ("closed", "failed") or None, TIMEOUT_S)
        await app.wait_calls(0)


async def test_closing_the_peer_connection_releases_the_call() -> None:
    async with serve() as app:
        async with WebRTCClient(app.url) as client:
            await client.connect(TIMEOUT_S)
            assert await app.calls() == 1
        await app.wait_calls(0)
        metrics = (await app.http.get("/metrics")).text
        assert 'voxpipe_calls{state="connected"} 0.0' in metrics


async def test_text_that_is_not_utf8_gets_a_typed_error_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiortc would fail decoding it inside its DTLS loop and drop the peer connection."""
    caplog.set_level(logging.WARNING)
    async with serve() as app, WebRTCClient(app.url) as client:
        await client.connect(TIMEOUT_S)
        sctp = client.channel.transport
        for data in (b"\xff\xfe", b'{"type": "ping"}\xc3'):  # sent as text, not as binary
            sctp._data_channel_queue.append((client.channel, WEBRTC_STRING, data))
        await sctp._data_channel_flush()
        client.send({"type": "ping"})
        await client.wait_for(lambda: client.event("pong"), TIMEOUT_S)
        errors = [e for e in client.events if e["type"] == "error"]
        assert [e["code"] for e in errors] == ["invalid_utf8", "invalid_utf8"], errors
        assert client.state == "connected" and await app.calls() == 1
        metrics = (await app.http.get("/metrics")).text
        assert 'voxpipe_errors_total{code="invalid_utf8"} 2.0' in metrics
    warnings = [r for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert len(warnings) == 1, "logged once per call"
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


async def test_shutdown_closes_live_peer_connections() -> None:
    async with serve() as app:
        client = WebRTCClient(app.url)
        await client.connect(TIMEOUT_S)
    try:  # the server is gone: its goodbye came on the channel, then the DTLS close
        error = await client.wait_for(lambda: client.event("error"), TIMEOUT_S)
        assert error["code"] == "server_shutdown"
        await client.wait_for(lambda: client.state in ("closed", "failed") or None, TIMEOUT_S)
    finally:
        await client.close()


async def test_at_capacity_is_429_and_a_second_call_fits_after_the_first() -> None:
    async with serve(limits={"max_calls": 1}) as app:
        async with WebRTCClient(app.url) as first:
            await first.connect(TIMEOUT_S)
            second = WebRTCClient(app.url)
            with pytest.raises(httpx.HTTPStatusError) as refused:
                await second.connect(TIMEOUT_S)
            await second.close()
            assert refused.value.response.status_code == 429
            assert refused.value.response.json()["code"] == "at_capacity"
        await app.wait_calls(0)


async def test_auth_is_checked_before_the_offer_is_read() -> None:
    async with serve(auth={"api_keys": ["k1"]}) as app:
        refused = await app.http.post("/v1/webrtc/offer", content=b"not even json")
        assert refused.status_code == 401
        assert refused.json()["type"] == "error" and refused.json()["code"] == "unauthorized"
        async with WebRTCClient(app.url, headers={"Authorization": "Bearer k1"}) as client:
            await client.connect(TIMEOUT_S)
            assert await app.calls() == 1


async def test_not_ready_is_503() -> None:
    async with serve(ready=False) as app:
        refused = await app.http.post("/v1/webrtc/offer", json={"sdp": "v=0", "type": "offer"})
        assert refused.status_code == 503
        assert refused.json()["code"] == "server_not_ready"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{", "invalid_json"),
        (b"[]", "invalid_event"),
        (b'{"sdp": "v=0", "type": "answer"}', "invalid_event"),
        (b'{"sdp": "v=0", "type": "offer", "input_sample_rate": 16000}', "invalid_event"),
        (b'{"sdp": "v=0", "type": "offer", "turn": {"silence_ms": 1}}', "invalid_event"),
        (b'{"sdp": "garbage", "type": "offer"}', "invalid_event"),
    ],
)
async def test_bad_offers_are_400_and_take_no_slot(body: bytes, code: str) -> None:
    async with serve() as app:
        refused = await app.http.post("/v1/webrtc/offer", content=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == code
        assert await app.calls() == 0


async def test_an_offer_never_connected_is_released_after_the_start_timeout() -> None:
    async with serve(server={"start_timeout_s": 0.5}) as app:
        client = WebRTCClient(app.url)
        try:
            await client.pc.setLocalDescription(await client.pc.createOffer())
            offer = {"sdp": client.pc.localDescription.sdp, "type": "offer"}
            answer = await app.http.post("/v1/webrtc/offer", json=offer)
            assert answer.status_code == 200 and answer.json()["type"] == "answer"
            assert await app.calls() == 1  # the answer is never applied: ICE never starts
            await app.wait_calls(0)
        finally:
            await client.close()
