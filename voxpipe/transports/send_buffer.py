"""Messages on their way to one client's socket, bounded by the audio they hold.

The session paces reply audio to ~400 ms ahead of real time, so a client that
reads keeps this buffer nearly empty. One that stops reading (or whose network
stalls) makes the socket's send wait; the messages then pile up here, and past
``max_audio_ms`` of audio the call is closed (``slow_consumer``): a stuck
client costs a bounded amount of memory, never the server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

MAX_EVENTS = 8192  # text events waiting (a replay after a reconnect may bring up to 4096)


class Observer(Protocol):
    def observe(self, amount: float) -> None: ...


class SendBuffer:
    def __init__(
        self,
        write: Callable[[str | bytes], Awaitable[None]],
        max_audio_ms: float,
        on_overflow: Callable[[], None],
        age: Observer | None = None,
    ) -> None:
        self._write = write
        self.max_audio_ms = max_audio_ms
        self._on_overflow = on_overflow
        self._age = age
        self._queue: deque[tuple[str | bytes, float, int]] = deque()
        self._audio_ms = 0.0
        self._ready = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self.overflowed = False
        self.broken = False  # the socket failed: the peer is gone

    @property
    def audio_ms(self) -> float:
        return self._audio_ms

    def put(self, message: str | bytes, audio_ms: float) -> None:
        """Queue without waiting; on overflow the policy is to close the call."""
        if self.overflowed or self.broken:
            return
        if self._audio_ms + audio_ms > self.max_audio_ms or len(self._queue) >= MAX_EVENTS:
            self.overflowed = True
            self._queue.clear()
            self._audio_ms = 0.0
            self._on_overflow()
            return
        self._queue.append((message, audio_ms, time.monotonic_ns()))
        self._audio_ms += audio_ms
        self._empty.clear()
        self._ready.set()

    async def run(self) -> None:
        """The writer: one send at a time, in order, until cancelled or the socket fails."""
        while True:
            await self._ready.wait()
            while self._queue:
                message, audio_ms, queued_ns = self._queue[0]
                if self._age is not None and audio_ms:
                    self._age.observe((time.monotonic_ns() - queued_ns) / 1e9)
                try:
                    await self._write(message)
                except Exception:  # disconnect, closed socket: the receive loop sees it too
                    self.broken = True
                    self._queue.clear()
                    self._audio_ms = 0.0
                    self._empty.set()
                    return
                if self._queue:  # not cleared meanwhile by an overflow
                    self._queue.popleft()
                    self._audio_ms -= audio_ms
            self._ready.clear()
            self._empty.set()

    async def flush(self, timeout_s: float) -> None:
        """Wait (bounded) until everything queued has gone out."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._empty.wait(), timeout_s)
