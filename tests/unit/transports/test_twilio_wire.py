"""``/v1/twilio`` through the wire, on the real app with fake engines: a Media Streams call as
Twilio places it (connected, start, media, mark, stop), its reply as μ-law ``media`` each
followed by its ``mark``, and bad messages counted without ending the call. The transport's
finer rules are in test_twilio.py, against the connection object."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import websockets

from tests.support import metric_value
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from voxpipe.audio.pcm import ulaw_encode
from voxpipe.config import Config
from voxpipe.engines.base import Engines

TIMEOUT_S = 10.0
SID, CALL, ACCOUNT = "MZ" + "a" * 32, "CA" + "b" * 32, "AC" + "c" * 32
LOUD = ulaw_encode(np.full(160, 16384, dtype="<i2").tobytes())  # 20 ms the fake VAD hears
QUIET = ulaw_encode(bytes(320))


@contextlib.asynccontextmanager
async def serve() -> AsyncIterator[tuple[int, Any]]:
    config = quiet_config()

    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt(), FakeLlm(), FakeTts(samples_per_clause=3200))

    async with serving(config, engines, TIMEOUT_S) as (port, http):
        yield port, http


class Stream:
    """Twilio's side of one stream: numbered messages out, the server's decoded in."""

    def __init__(self, ws: Any) -> None:
        self.ws, self.sequence = ws, 0
        self.got: list[dict[str, Any]] = []

    async def send(self, event: str, **body: Any) -> None:
        self.sequence += 1
        message = {"event": event, "sequenceNumber": str(self.sequence), "streamSid": SID}
        await self.ws.send(json.dumps({**message, **body}))

    async def media(self, payload: bytes) -> None:
        chunk = {"track": "inbound", "chunk": str(self.sequence), "timestamp": "0"}
        await self.send("media", media={**chunk, "payload": base64.b64encode(payload).decode()})

    async def read(self, count: int) -> None:
        async with asyncio.timeout(TIMEOUT_S):
            while len(self.got) < count:
                self.got.append(json.loads(await self.ws.recv()))


async def test_a_call_as_twilio_places_it() -> None:
    async with serve() as (port, http):
        before = (await http.get("/metrics")).text
        async with websockets.connect(f"ws://127.0.0.1:{port}/v1/twilio") as ws:
            line = Stream(ws)
            await ws.send(
                json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
            )
            fmt = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
            ids = {"streamSid": SID, "accountSid": ACCOUNT, "callSid": CALL}
            await line.send("start", start={**ids, "tracks": ["inbound"], "mediaFormat": fmt})
            # Bad messages: each counted, none answered (Twilio reads no error), none fatal.
            await ws.send("{not json")
            await ws.send(b"\x00\x01")
            await line.send("transcribe")
            for i in range(55):
                await line.media(LOUD if i < 25 else QUIET)
            await line.read(2 * 10)  # 0.2 s of reply: 10 frames, each with its mark
            assert [m["event"] for m in line.got] == ["media", "mark"] * 10
            for media, mark in zip(line.got[::2], line.got[1::2], strict=True):
                assert media["streamSid"] == mark["streamSid"] == SID
                assert len(base64.b64decode(media["media"]["payload"])) == 160, "20 ms of μ-law"
            names = [m["mark"]["name"] for m in line.got[1::2]]
            for name in names:  # Twilio echoes each mark as its frame finishes playing
                await line.send("mark", mark={"name": name})
            await line.send("stop", stop={"accountSid": ACCOUNT, "callSid": CALL})
            with contextlib.suppress(websockets.ConnectionClosed):
                async with asyncio.timeout(TIMEOUT_S):
                    async for _ in ws:
                        pass
            assert ws.close_code == 1000
        after = (await http.get("/metrics")).text
        for code in ("invalid_json", "invalid_event", "unknown_event"):
            sample = f'voxpipe_errors_total{{code="{code}"}}'
            assert (metric_value(after, sample) or 0) == (metric_value(before, sample) or 0) + 1
        assert metric_value(after, 'voxpipe_calls{state="connected"}') == 0
