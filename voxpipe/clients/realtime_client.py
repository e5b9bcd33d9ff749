"""A caller on ``/v1/realtime`` through the official ``openai`` SDK, paced like a phone line.

Used by ``python -m bench transports``. Once connected it appends 20 ms of PCM16
at 24 kHz every 20 ms (``input_audio_buffer.append``) for as long as the call
lasts: speech when something was said, silence otherwise, so the server's VAD
hears real pauses, exactly as the native, Twilio and WebRTC callers do. Reply
audio deltas are kept with their arrival time and "played" into a buffer that
drains in real time, so the caller knows when the reply has been heard out.

The ``openai`` package is a dev dependency: importing this module without it
fails, which only the benchmark does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from openai import AsyncOpenAI

from voxpipe.audio.pcm import float_to_pcm16, resample
from voxpipe.clients.native_client import speech_end_sample
from voxpipe.clients.waiting import Listening

RATE = 24000  # the Realtime API's PCM16 rate, in and out
FRAME_MS = 20
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")  # GA, beta
KEPT_EVENTS = 20000  # events kept for inspection; the oldest go first
KEPT_AUDIO = 30000  # reply chunks kept with their arrival (10 min of 20 ms deltas)


@dataclass
class Mark:
    """An instant of queued speech; ``sent_ns`` is set when the frame holding it has left."""

    frame: int  # frames sent on the line once that frame is out
    sent_ns: int = 0
    sent: asyncio.Event = field(default_factory=asyncio.Event)


class RealtimeLine(Listening):
    """One call: ``async with RealtimeLine(url) as line: await line.connect(); line.say(...)``.

    ``url`` is the SDK's ``websocket_base_url`` (``ws://host:port/v1``); the SDK adds
    ``/realtime``.
    """

    def __init__(self, url: str, model: str = "gpt-realtime", api_key: str = "voxpipe") -> None:
        super().__init__()
        self.url = url
        self.model = model
        self.api_key = api_key
        self.session_id = ""
        self.events: deque[dict[str, Any]] = deque(maxlen=KEPT_EVENTS)
        self.errors: list[dict[str, Any]] = []
        self.audio: deque[tuple[int, bytes]] = deque(maxlen=KEPT_AUDIO)  # (arrival ns, PCM16)
        self.connection: Any = None
        self._client: AsyncOpenAI | None = None
        self._line: deque[bytes] = deque()
        self._marks: deque[Mark] = deque()  # ascending frames, as queued
        self._frames_sent = 0
        self._ends_at = 0.0  # monotonic time the reply received so far finishes playing

    async def connect(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Open the connection and start the line; returns ``session.created``'s session."""
        self._client = AsyncOpenAI(api_key=self.api_key, websocket_base_url=self.url)
        manager = self._client.realtime.connect(model=self.model)
        self.connection = await asyncio.wait_for(manager.enter(), timeout_s)
        self._tasks = [
            asyncio.create_task(self._read(), name="realtime-read"),
            asyncio.create_task(self._send_line(), name="realtime-line"),
        ]
        created = await self.wait_for(lambda: self.event("session.created"), timeout_s)
        session: dict[str, Any] = created["session"]
        self.session_id = session["id"]
        return session

    async def _read(self) -> None:
        with contextlib.suppress(Exception):  # the connection closed
            while True:
                raw = await self.connection.recv_bytes()
                event = json.loads(raw)
                kind = event.get("type", "")
                if kind in AUDIO_DELTAS:
                    pcm = base64.b64decode(event["delta"])
                    self.audio.append((time.monotonic_ns(), pcm))
                    now = time.monotonic()
                    self._ends_at = max(self._ends_at, now) + len(pcm) / 2 / RATE
                    event = {**event, "delta": f"<{len(pcm)} bytes>"}  # keep events small
                elif kind == "error":
                    self.errors.append(event)
                self.events.append(event)
                self._changed.set()

    async def _send_line(self) -> None:
        """One 20 ms append per 20 ms, speech if queued, else silence."""
        silence = base64.b64encode(bytes(FRAME_BYTES)).decode()
        start = time.monotonic()
        while True:
            await asyncio.sleep(
                max(0.0, start + self._frames_sent * FRAME_MS / 1000 - time.monotonic())
            )
            chunk = base64.b64encode(self._line.popleft()).decode() if self._line else silence
            await self.connection.send({"type": "input_audio_buffer.append", "audio": chunk})
            self._frames_sent += 1
            while self._marks and self._marks[0].frame <= self._frames_sent:
                mark = self._marks.popleft()
                mark.sent_ns = time.monotonic_ns()
                mark.sent.set()

    def say(
        self, audio: np.ndarray, rate: int, marks_s: Sequence[float] | None = None
    ) -> list[Mark]:
        """Queue float mono speech at ``rate`` after whatever is queued, and return at once.

        One :class:`Mark` per mark (seconds into the clip, ascending), set when the frame
        holding that instant has left; by default one mark, the end of the loud speech.
        """
        if marks_s is None:
            marks_s = [speech_end_sample(audio, rate) / rate]
        audio = resample(audio, rate, RATE)
        pcm = float_to_pcm16(audio)
        chunks = [pcm[i : i + FRAME_BYTES] for i in range(0, len(pcm), FRAME_BYTES)]
        frame = FRAME_BYTES // 2
        base = self._frames_sent + len(self._line)
        marks = [Mark(base + max(1, math.ceil(round(m * RATE) / frame))) for m in marks_s]
        self._line.extend(chunks)
        self._marks.extend(marks)
        return marks

    @property
    def buffered_s(self) -> float:
        """Reply audio received and not yet played."""
        return max(0.0, self._ends_at - time.monotonic())

    def event(self, kind: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("type") == kind), None)

    async def close(self) -> None:
        await super().close()
        if self.connection is not None:
            with contextlib.suppress(Exception):
                await self.connection.close()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
