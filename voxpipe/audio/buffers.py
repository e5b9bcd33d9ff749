"""Audio buffers bounded by duration, each with a named overflow policy."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from enum import StrEnum


class Overflow(StrEnum):
    DROP_OLDEST = "drop_oldest"  # keep the newest audio: the caller's now matters most


@dataclass(frozen=True)
class Chunk:
    pcm: bytes  # PCM16 mono
    arrived_ns: int


class InboundAudioBuffer:
    """Caller audio between the socket and the VAD, at most ``max_ms`` of it.

    The receive loop only appends, so a slow VAD never stalls the socket; when
    the consumer falls behind by more than the bound, the oldest audio goes (its
    policy, as the metrics name it), and every dropped millisecond is counted.
    """

    def __init__(self, sample_rate: int, max_ms: int):
        self.rate = sample_rate
        self.max_bytes = sample_rate * max_ms // 1000 * 2
        self.policy = Overflow.DROP_OLDEST
        self._chunks: deque[Chunk] = deque()
        self._bytes = 0

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
        self._chunks.append(chunk)
        self._bytes += len(pcm)
        while self._bytes > self.max_bytes and len(self._chunks) > 1:
            old = self._chunks.popleft()
            self._bytes -= len(old.pcm)
            dropped += len(old.pcm)
        return dropped

    def take(self) -> list[Chunk]:
        """Everything buffered, oldest first."""
        chunks = list(self._chunks)
        self._chunks.clear()
        self._bytes = 0
        return chunks


@dataclass(frozen=True)
class DropNotice:
    """Dropped audio to tell the client about."""

    ms: float  # dropped since the previous notice
    total_ms: float  # dropped in the whole call


class DropReports:
    """When dropped audio is told to the client and to the log.

    A flood drops audio frame after frame; a message per frame would flood the client
    and the log in turn. Drops less than ``episode_gap_s`` apart form one episode: its
    first drop is told at once (and is the one the log hears of), later ones are summed
    and told at most once per ``interval_s``. Nothing is forgotten: every dropped
    millisecond is in exactly one notice, so what the client adds up is what the
    server's counter says.
    """

    def __init__(self, interval_s: float = 1.0, episode_gap_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self.episode_gap_s = episode_gap_s
        self.total_ms = 0.0
        self.episodes = 0
        self._pending_ms = 0.0
        self._last_drop = -math.inf
        self._last_notice = -math.inf

    def add(self, ms: float, now: float) -> bool:
        """Count a drop at ``now`` (monotonic seconds); True if it opens an episode."""
        opens = now - self._last_drop >= self.episode_gap_s
        if opens:
            self.episodes += 1
            self._last_notice = -math.inf  # an episode's first drop is told at once
        self._last_drop = now
        self._pending_ms += ms
        self.total_ms += ms
        return opens

    def due_at(self) -> float | None:
        """When the drops not told yet may be told; None if there are none."""
        return self._last_notice + self.interval_s if self._pending_ms > 0 else None

    def take(self, now: float) -> DropNotice | None:
        """The notice due at ``now``, if one is."""
        due = self.due_at()
        return self.flush(now) if due is not None and now >= due else None

    def flush(self, now: float) -> DropNotice | None:
        """Every drop not told yet, due or not (the call is ending)."""
        if self._pending_ms <= 0:
            return None
        notice = DropNotice(self._pending_ms, self.total_ms)
        self._pending_ms = 0.0
        self._last_notice = now
        return notice


class PlayoutBuffer:
    """Reply audio a real-time clock plays out (SIP's RTP, WebRTC's track): the session's
    numbered frames, cut into whatever size a tick sends, silence when there is none.

    Bounded at ``max_bytes``: the session paces its frames only a little ahead of the clock,
    so more means nothing is playing them; the oldest frames go (:attr:`Overflow.DROP_OLDEST`).
    """

    def __init__(self, max_bytes: int) -> None:
        self._frames: deque[tuple[int, bytes]] = deque()  # (seq, PCM16) not yet played out
        self._offset = 0  # bytes of the first frame already played out
        self._bytes = 0  # bytes waiting, not counting the played part of the first frame
        self._max_bytes = max_bytes

    @property
    def empty(self) -> bool:
        return not self._frames

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    def push(self, seq: int, pcm: bytes) -> int:
        """Queue reply frame ``seq``; the bytes the bound dropped to make room."""
        if not pcm:
            return 0
        self._frames.append((seq, pcm))
        self._bytes += len(pcm)
        dropped = 0
        while self._bytes > self._max_bytes and len(self._frames) > 1:
            _, old = self._frames.popleft()
            gone = len(old) - self._offset
            self._bytes -= gone
            dropped += gone
            self._offset = 0
        return dropped

    def clear(self) -> None:
        """Barge-in: drop every waiting frame now."""
        self._frames.clear()
        self._bytes = self._offset = 0

    def take(self, size: int) -> tuple[bytes, list[int]]:
        """``size`` bytes (silence after the last reply frame) and the frames they finish."""
        parts: list[bytes] = []
        finished: list[int] = []
        need = size
        while need and self._frames:
            seq, pcm = self._frames[0]
            chunk = pcm[self._offset : self._offset + need]
            parts.append(chunk)
            need -= len(chunk)
            self._offset += len(chunk)
            self._bytes -= len(chunk)
            if self._offset >= len(pcm):
                self._frames.popleft()
                self._offset = 0
                finished.append(seq)
        if need:
            parts.append(bytes(need))
        return b"".join(parts), finished
