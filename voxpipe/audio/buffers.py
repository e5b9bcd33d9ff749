"""Audio buffers bounded by duration, each with a named overflow policy (the caller's inbound
buffer, :class:`~voxpipe.conversation.inbound.InboundAudioBuffer`, is its pump's)."""

from __future__ import annotations

from collections import deque
from enum import StrEnum


class Overflow(StrEnum):
    DROP_OLDEST = "drop_oldest"  # keep the newest audio: the caller's now matters most


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
