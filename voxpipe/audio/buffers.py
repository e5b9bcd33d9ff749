"""Audio buffers bounded by duration, each with a named overflow policy."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from enum import StrEnum


class Overflow(StrEnum):
    DROP_OLDEST = "drop_oldest"  # keep the newest audio: the caller's now matters most
    DROP_NEWEST = "drop_newest"
    CLOSE = "close"  # the peer cannot keep up: end the call


@dataclass(frozen=True)
class Chunk:
    pcm: bytes  # PCM16 mono
    arrived_ns: int


class JitterBuffer:
    """Caller audio between the socket and the VAD, at most ``max_ms`` of it.

    The receive loop only appends, so a slow VAD never stalls the socket; when
    the consumer falls behind by more than the bound, the policy decides which
    audio goes, and every dropped millisecond is counted.
    """

    def __init__(self, sample_rate: int, max_ms: int, policy: Overflow = Overflow.DROP_OLDEST):
        self.rate = sample_rate
        self.max_bytes = sample_rate * max_ms // 1000 * 2
        self.policy = policy
        self._chunks: deque[Chunk] = deque()
        self._bytes = 0
        self.dropped_bytes = 0

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def buffered_ms(self) -> float:
        return self._bytes / 2 * 1000 / self.rate

    @property
    def filling(self) -> bool:
        """Over half the bound is waiting: the consumer is behind."""
        return self._bytes * 2 > self.max_bytes

    def put(self, pcm: bytes, now_ns: int | None = None) -> int:
        """Append; returns the bytes dropped to stay within the bound."""
        chunk = Chunk(pcm, now_ns or time.monotonic_ns())
        dropped = 0
        if self.policy is Overflow.DROP_NEWEST and self._bytes + len(pcm) > self.max_bytes:
            self.dropped_bytes += len(pcm)
            return len(pcm)
        self._chunks.append(chunk)
        self._bytes += len(pcm)
        while self._bytes > self.max_bytes and len(self._chunks) > 1:
            old = self._chunks.popleft()
            self._bytes -= len(old.pcm)
            dropped += len(old.pcm)
        self.dropped_bytes += dropped
        return dropped

    def take(self) -> list[Chunk]:
        """Everything buffered, oldest first."""
        chunks = list(self._chunks)
        self._chunks.clear()
        self._bytes = 0
        return chunks
