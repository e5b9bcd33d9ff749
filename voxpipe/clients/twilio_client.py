"""Twilio's side of a bidirectional Media Stream, for tests and benchmarks of ``/v1/twilio``.

It speaks the protocol as Twilio documents it (``docs/twilio.md``): ``connected``,
then ``start`` with the stream's ids and ``audio/x-mulaw`` at 8000 Hz, then a
``media`` message of 160 bytes of μ-law (20 ms) every 20 ms in real time, with
``sequenceNumber``, ``chunk`` and ``timestamp``; silence when nothing is being
said. It plays what the server sends as Twilio does: ``media`` goes into a
playback buffer drained in real time, a ``mark`` is echoed once the audio
queued before it has played, and ``clear`` empties the buffer and echoes every
mark still in it at once. ``hang_up`` sends ``stop``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets

from voxpipe.audio.g711 import ulaw_encode
from voxpipe.audio.pcm import float_to_pcm16
from voxpipe.audio.resample import resample

RATE = 8000
FRAME_BYTES = 160  # 20 ms of 8 kHz μ-law
FRAME_S = 0.02
ULAW_SILENCE = b"\xff" * FRAME_BYTES
PLAYER_TICK_S = 0.005


@dataclass
class Received:
    """One message from the server, with when it arrived (monotonic seconds)."""

    at: float
    message: dict[str, Any]


@dataclass
class _Buffered:
    ends_at: float  # when the audio up to and including this item has played
    mark: str | None = None  # a mark's name; None for audio


@dataclass
class Said:
    """Speech queued on the line; ``sent`` is set once its last frame has gone out."""

    frames: int
    sent: asyncio.Event = field(default_factory=asyncio.Event)


class TwilioLine:
    def __init__(self, url: str, custom_parameters: dict[str, str] | None = None) -> None:
        self.url = url
        self.custom_parameters = custom_parameters or {}
        self.stream_sid = "MZ" + uuid.uuid4().hex
        self.call_sid = "CA" + uuid.uuid4().hex
        self.account_sid = "AC" + uuid.uuid4().hex
        self.received: list[Received] = []
        self.echoed: list[str] = []  # mark names sent back, in order
        self.received_s = 0.0  # reply audio received
        self.cleared_s = 0.0  # of which a clear dropped this much unplayed
        self._ws: Any = None
        self._sequence = 0
        self._chunk = 0
        self._started = 0.0
        self._send_lock = asyncio.Lock()
        self._line: deque[bytes] = deque()
        self._said: deque[tuple[int, Said]] = deque()  # (frame number of its last frame, said)
        self._buffer: deque[_Buffered] = deque()
        self._ends_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()

    async def __aenter__(self) -> TwilioLine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the stream ---------------------------------------------------------

    async def connect(self) -> None:
        self._ws = await websockets.connect(self.url, open_timeout=30, max_size=4 << 20)
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send(
            {
                "event": "start",
                "sequenceNumber": None,  # numbered in _send
                "start": {
                    "accountSid": self.account_sid,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": RATE, "channels": 1},
                    "customParameters": self.custom_parameters,
                },
                "streamSid": self.stream_sid,
            }
        )
        self._started = time.monotonic()
        self._tasks = [
            asyncio.create_task(self._read(), name="twilio-read"),
            asyncio.create_task(self._send_media(), name="twilio-media"),
            asyncio.create_task(self._play(), name="twilio-play"),
        ]

    async def _send(self, message: dict[str, Any]) -> None:
        """Send, numbering every message but ``connected`` in the order it goes out."""
        async with self._send_lock:
            if "sequenceNumber" in message:
                self._sequence += 1
                message["sequenceNumber"] = str(self._sequence)
            await self._ws.send(json.dumps(message))

    async def _send_media(self) -> None:
        frames = 0
        while True:
            await asyncio.sleep(max(0.0, self._started + frames * FRAME_S - time.monotonic()))
            payload = self._line.popleft() if self._line else ULAW_SILENCE
            self._chunk += 1
            timestamp = round((time.monotonic() - self._started) * 1000)
            await self._send(
                {
                    "event": "media",
                    "sequenceNumber": None,
                    "media": {
                        "track": "inbound",
                        "chunk": str(self._chunk),
                        "timestamp": str(timestamp),
                        "payload": base64.b64encode(payload).decode(),
                    },
                    "streamSid": self.stream_sid,
                }
            )
            frames += 1
            while self._said and self._said[0][0] <= frames:
                self._said.popleft()[1].sent.set()

    @property
    def closed_code(self) -> int | None:
        """The server's close code once it has closed the stream (it hung up); None while
        the stream is open."""
        return None if self._ws is None else self._ws.close_code

    async def _read(self) -> None:
        try:
            await self._read_all()
        finally:
            self._changed.set()  # the server closed: a waiter may be waiting for that

    async def _read_all(self) -> None:
        async for raw in self._ws:
            message = json.loads(raw)
            self.received.append(Received(time.monotonic(), message))
            kind = message.get("event")
            now = time.monotonic()
            if kind == "media":
                duration = len(base64.b64decode(message["media"]["payload"])) / RATE
                self.received_s += duration
                self._ends_at = max(self._ends_at, now) + duration
                self._buffer.append(_Buffered(self._ends_at))
            elif kind == "mark":
                self._buffer.append(_Buffered(max(self._ends_at, now), message["mark"]["name"]))
            elif kind == "clear":
                dropped = [item.mark for item in self._buffer if item.mark is not None]
                self.cleared_s += self.buffered_s
                self._buffer.clear()
                self._ends_at = now
                for name in dropped:
                    await self._echo(name)
            self._changed.set()

    async def _play(self) -> None:
        """Twilio's playback clock: echo each mark when the audio before it has played."""
        while True:
            await asyncio.sleep(PLAYER_TICK_S)
            now = time.monotonic()
            while self._buffer and self._buffer[0].ends_at <= now:
                item = self._buffer.popleft()
                if item.mark is not None:
                    await self._echo(item.mark)

    async def _echo(self, name: str) -> None:
        self.echoed.append(name)
        await self._send(
            {
                "event": "mark",
                "sequenceNumber": None,
                "streamSid": self.stream_sid,
                "mark": {"name": name},
            }
        )
        self._changed.set()

    # -- the caller ---------------------------------------------------------

    def say(self, audio: np.ndarray, rate: int) -> Said:
        """Queue speech (float mono at ``rate``) on the line after whatever is queued."""
        ulaw = ulaw_encode(float_to_pcm16(resample(audio, rate, RATE)))
        chunks = [ulaw[i : i + FRAME_BYTES] for i in range(0, len(ulaw), FRAME_BYTES)]
        chunks[-1] = chunks[-1].ljust(FRAME_BYTES, b"\xff")
        said = Said(len(chunks))
        self._line.extend(chunks)
        self._said.append((self._chunk + len(self._line), said))
        return said

    async def press(self, digit: str) -> None:
        await self._send(
            {
                "event": "dtmf",
                "streamSid": self.stream_sid,
                "sequenceNumber": None,
                "dtmf": {"track": "inbound_track", "digit": digit},
            }
        )

    async def send_raw(self, text: str) -> None:
        await self._ws.send(text)

    @property
    def buffered_s(self) -> float:
        return max(0.0, self._ends_at - time.monotonic())

    @property
    def played_s(self) -> float:
        """Reply audio the caller has heard so far."""
        return self.received_s - self.cleared_s - self.buffered_s

    def played_out(self) -> bool:
        """Nothing is left to play and every mark received is echoed. A probe, so that marks
        still on the wire when a test starts waiting are counted too."""
        return self.buffered_s == 0 and len(self.echoed) == len(self.of("mark"))

    def of(self, event: str, since: float = 0.0) -> list[Received]:
        return [r for r in self.received if r.message.get("event") == event and r.at >= since]

    async def wait_for(self, probe: Callable[[], Any], timeout_s: float) -> Any:
        """Wait until ``probe()`` returns something truthy, and return it."""
        deadline = time.monotonic() + timeout_s
        while not (result := probe()):
            self._changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {timeout_s:.0f} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.05))
        return result

    async def hang_up(self) -> int | None:
        """Send ``stop`` as Twilio does at the end of a call; the server's close code."""
        await self._stop_tasks()
        await self._send(
            {
                "event": "stop",
                "sequenceNumber": None,
                "streamSid": self.stream_sid,
                "stop": {"accountSid": self.account_sid, "callSid": self.call_sid},
            }
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._ws.wait_closed(), 10)
        code: int | None = self._ws.close_code
        return code

    async def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []

    async def close(self) -> None:
        await self._stop_tasks()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
