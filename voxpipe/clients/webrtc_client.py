"""A WebRTC caller on aiortc: what a browser does, in Python (tests, ``docs/webrtc.md``).

It offers one send-and-receive Opus track and a data channel, POSTs the offer to
``/v1/webrtc/offer`` and applies the answer. Its microphone is :class:`LineTrack`, which
plays queued speech at real-time pace and silence otherwise, as a phone line does; the
reply track is read as it arrives into PCM16 mono at 48 kHz, with the arrival time of
every frame; the data channel's JSON events are kept in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import av
import httpx
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError

from voxpipe.audio.pcm import float_to_pcm16, resample
from voxpipe.transports.webrtc_media import RATE, read_caller_audio

FRAME_SAMPLES = 960  # 20 ms
T = TypeVar("T")


class LineTrack(MediaStreamTrack):
    """The caller's microphone: queued speech in real time, then silence, 20 ms a frame."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue: deque[bytes] = deque()
        self._start: float | None = None
        self._pts = 0
        self.idle = asyncio.Event()  # nothing queued: the last spoken frame has left
        self.idle.set()

    def say(self, audio: np.ndarray, rate: int) -> None:
        """Queue float32 mono ``audio`` (any rate) to be spoken after what is queued."""
        pcm = float_to_pcm16(resample(audio, rate, RATE))
        step = FRAME_SAMPLES * 2
        self._queue.extend(pcm[i : i + step] for i in range(0, len(pcm), step))
        self.idle.clear()

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        else:
            self._pts += FRAME_SAMPLES
            await asyncio.sleep(max(0.0, self._start + self._pts / RATE - now))
        pcm = self._queue.popleft() if self._queue else b""
        if not self._queue:
            self.idle.set()
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(pcm.ljust(FRAME_SAMPLES * 2, b"\0"))
        frame.pts, frame.sample_rate = self._pts, RATE
        frame.time_base = fractions.Fraction(1, RATE)
        return frame


class WebRTCClient:
    """One call: ``async with WebRTCClient(url) as c: await c.connect(); c.line.say(...)``."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        self.url = base_url.rstrip("/") + "/v1/webrtc/offer"
        self.headers = headers or {}
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.line = LineTrack()
        self.channel: RTCDataChannel = self.pc.createDataChannel("voxpipe")
        self.events: list[dict[str, Any]] = []
        self.audio = bytearray()  # the reply track, PCM16 mono 48 kHz, silence included
        self.frame_times: list[float] = []  # monotonic arrival of each 20 ms of self.audio
        self.answer: dict[str, Any] = {}
        self._changed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self.pc.addTrack(self.line)
        self.pc.on("track", self._on_track)
        self.channel.on("message", self._on_message)
        self.pc.on("connectionstatechange", self._changed.set)

    async def __aenter__(self) -> WebRTCClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self, timeout_s: float = 30.0, **options: Any) -> dict[str, Any]:
        """Offer, apply the answer; returns ``session.started``. ``options`` go in the offer."""
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = {"sdp": self.pc.localDescription.sdp, "type": "offer", **options}
        async with httpx.AsyncClient(timeout=timeout_s) as http:
            response = await http.post(self.url, json=offer, headers=self.headers)
        response.raise_for_status()
        self.answer = response.json()
        await self.pc.setRemoteDescription(RTCSessionDescription(self.answer["sdp"], "answer"))
        return await self.wait_for(lambda: self.event("session.started"), timeout_s)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(
                read_caller_audio(track, self._heard)
            )

    def _heard(self, pcm: bytes) -> None:
        self.audio += pcm
        self.frame_times.append(time.monotonic())
        self._changed.set()

    def _on_message(self, message: str | bytes) -> None:
        if isinstance(message, str):
            self.events.append(json.loads(message))
            self._changed.set()

    def send(self, event: dict[str, Any]) -> None:
        self.channel.send(json.dumps(event))

    def event(self, kind: str, since: int = 0) -> dict[str, Any] | None:
        """The first event of type ``kind`` at index ``since`` or later."""
        return next((e for e in self.events[since:] if e["type"] == kind), None)

    async def wait_for(self, probe: Callable[[], T | None], timeout_s: float) -> T:
        """Until ``probe()`` is not None (re-checked on every event, frame or state change)."""
        async with asyncio.timeout(timeout_s):
            while (found := probe()) is None:
                self._changed.clear()
                await self._changed.wait()
            return found

    @property
    def state(self) -> str:
        return str(self.pc.connectionState)

    async def close(self) -> None:
        await self.pc.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
