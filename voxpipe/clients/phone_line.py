"""A telephony provider's side of a media stream, for tests and benchmarks of ``/v1/<provider>``.

A line plays the provider as its docs describe it: it opens the stream (the provider's
``connected``/``start``), sends 20 ms of the caller's audio every 20 ms in real time
(silence when nothing is being said), and plays what the server sends as the provider
does: reply audio goes into a playback buffer drained in real time, a mark (checkpoint,
notify) is echoed once the audio queued before it has played, and a clear empties the
buffer (echoing the marks still in it where the provider does). ``press`` sends a key,
``hang_up`` ends the call as the provider does (its stop, or closing the socket).

:class:`PhoneLine` is all of that, the playback's bookkeeping in ``line_playback.py``; a
provider's line (``twilio_client.py``, ``telephony_clients.py``) only writes and reads its
messages (``line_messages.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets

from voxpipe.audio.pcm import float_to_pcm16, resample
from voxpipe.clients.line_messages import (
    CLEAR,
    MARK,
    MEDIA,
    LineMessages,
    Outgoing,
    Received,
    read_media_mark_clear,
)
from voxpipe.clients.line_playback import Playback
from voxpipe.clients.waiting import Listening

PLAYER_TICK_S = 0.005


@dataclass
class Said:
    """Speech queued on the line; ``sent`` is set once its last frame has gone out."""

    frames: int
    sent: asyncio.Event = field(default_factory=asyncio.Event)


class PhoneLine(LineMessages, Listening):
    """One call over a provider's media stream, played as the provider plays it (see the
    module's docstring); its provider's messages are the :class:`LineMessages` a subclass
    writes."""

    def __init__(self, url: str, custom_parameters: dict[str, str] | None = None) -> None:
        super().__init__()
        self.url = url
        self.custom_parameters = custom_parameters or {}
        self.stream_sid = str(uuid.uuid4())
        self.call_sid = str(uuid.uuid4())
        self.received: list[Received] = []
        self.echoed: list[str] = []  # mark names sent back, in order
        self.dropped: list[str] = []  # marks a clear dropped and the provider does not echo
        self.playback = Playback()  # the provider's buffer of reply audio
        self._ws: Any = None
        self._chunk = 0
        self._sequence = 0
        self._started = 0.0
        self._send_lock = asyncio.Lock()
        self._line: deque[bytes] = deque()
        self._said: deque[tuple[int, Said]] = deque()  # (frame number of its last frame, said)

    # -- the stream ---------------------------------------------------------

    async def connect(self) -> None:
        self._ws = await websockets.connect(
            self.url, open_timeout=30, max_size=4 << 20, **self.connect_options()
        )
        for message in self.opening():
            await self._send(message)
        self._started = time.monotonic()
        self._tasks = [
            asyncio.create_task(self._read(), name="line-read"),
            asyncio.create_task(self._send_media(), name="line-media"),
            asyncio.create_task(self._play(), name="line-play"),
        ]

    async def _send(self, message: Outgoing) -> None:
        """Send, numbering each JSON message that has the sequence field in send order."""
        async with self._send_lock:
            await self._ws.send(self.wire(message))

    def wire(self, message: Outgoing) -> str | bytes:
        """A message as it goes out: JSON numbered in send order, or the binary frame."""
        if isinstance(message, bytes):
            return message
        if self.sequence_key is not None and self.sequence_key in message:
            self._sequence += 1
            number = self._sequence
            message[self.sequence_key] = str(number) if self.sequence_as_text else number
        return json.dumps(message)

    async def _send_media(self) -> None:
        frames = 0
        silence = self.encode(bytes(self.frame_bytes * 2 // self.width))
        frame_s = self.frame_ms / 1000
        while True:
            await asyncio.sleep(max(0.0, self._started + frames * frame_s - time.monotonic()))
            payload = self._line.popleft() if self._line else silence
            self._chunk += 1
            timestamp = round((time.monotonic() - self._started) * 1000)
            await self._send(self.media(payload, self._chunk, timestamp))
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
            async for raw in self._ws:
                await self._on(raw)
        finally:
            self._changed.set()  # the server closed: a waiter may be waiting for that

    async def _on(self, raw: str | bytes) -> None:
        got = self.read_binary(raw) if isinstance(raw, bytes) else self.read(json.loads(raw))
        now = got.at = time.monotonic()
        self.received.append(got)
        if got.kind == MEDIA:
            self.playback.audio(now, len(got.pcm) / 2 / self.rate)
        elif got.kind == MARK:
            self.playback.mark(now, got.mark)
        elif got.kind == CLEAR:
            dropped = self.playback.clear(now)
            if not self.echoes_cleared_marks:
                self.dropped.extend(dropped)
            for message in self.after_clear(dropped):
                await self._send(message)
            if self.echoes_cleared_marks:
                self.echoed.extend(dropped)
        self._changed.set()

    async def _play(self) -> None:
        """The provider's playback clock: echo each mark when the audio before it has played."""
        while True:
            await asyncio.sleep(PLAYER_TICK_S)
            now = time.monotonic()
            while (mark := self.playback.next_due(now)) is not None:
                self.echoed.append(mark)
                await self._send(self.echo(mark))
                self._changed.set()

    # -- the caller ---------------------------------------------------------

    def say(self, audio: np.ndarray, rate: int) -> Said:
        """Queue speech (float mono at ``rate``) on the line after whatever is queued."""
        wire = self.encode(float_to_pcm16(resample(audio, rate, self.rate)))
        size = self.frame_bytes
        chunks = [wire[i : i + size] for i in range(0, len(wire), size)]
        chunks[-1] = chunks[-1] + self.encode(bytes((size - len(chunks[-1])) * 2 // self.width))
        said = Said(len(chunks))
        self._line.extend(chunks)
        self._said.append((self._chunk + len(self._line), said))
        return said

    async def press(self, digit: str) -> None:
        await self._send(self.key(digit))

    async def send_raw(self, text: str | bytes) -> None:
        await self._ws.send(text)

    @property
    def received_s(self) -> float:
        """Reply audio received."""
        return self.playback.received_s

    @property
    def cleared_s(self) -> float:
        """Reply audio a clear dropped before it played."""
        return self.playback.cleared_s

    @property
    def buffered_s(self) -> float:
        """Reply audio received and not yet played."""
        return self.playback.buffered_s

    @property
    def played_s(self) -> float:
        """Reply audio the caller has heard so far."""
        return self.received_s - self.cleared_s - self.buffered_s

    def played_out(self) -> bool:
        """Nothing is left to play and every mark received is echoed (or dropped by a
        clear). A probe, so that marks still on the wire when a test starts waiting count."""
        settled = len(self.echoed) + len(self.dropped)
        return self.buffered_s == 0 and settled == len(self.of(MARK))

    def of(self, kind: str, since: float = 0.0) -> list[Received]:
        return [r for r in self.received if r.kind == kind and r.at >= since]

    async def hang_up(self) -> int | None:
        """End the call as the provider does; the server's close code."""
        await self._stop_tasks()
        stop = self.stop()
        if stop is None:
            await self._ws.close()
        else:
            await self._send(stop)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._ws.wait_closed(), 10)
        code: int | None = self._ws.close_code
        return code

    async def close(self) -> None:
        await super().close()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()


__all__ = [
    "CLEAR",
    "MARK",
    "MEDIA",
    "Outgoing",
    "PhoneLine",
    "Received",
    "Said",
    "read_media_mark_clear",
]
