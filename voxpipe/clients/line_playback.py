"""A telephony provider's playback of the reply, as a test line plays it: reply audio queues
and plays out in real time, a mark is due once the audio queued before it has played, and a
clear drops what has not played yet, the marks in it included.

Pure bookkeeping on the monotonic clock the line passes in; the line does the I/O
(``phone_line.py``: echoing the marks this says are due).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass


@dataclass
class _Buffered:
    ends_at: float  # when the audio up to and including this item has played
    mark: str | None = None  # a mark's name; None for audio


class Playback:
    """The provider's buffer of reply audio and marks, and what went through it."""

    def __init__(self) -> None:
        self.received_s = 0.0  # reply audio received
        self.cleared_s = 0.0  # of which a clear dropped this much unplayed
        self._buffer: deque[_Buffered] = deque()
        self._ends_at = 0.0

    def audio(self, now: float, duration_s: float) -> None:
        """``duration_s`` of reply audio arrived at ``now``: it plays after what is queued."""
        self.received_s += duration_s
        self._ends_at = max(self._ends_at, now) + duration_s
        self._buffer.append(_Buffered(self._ends_at))

    def mark(self, now: float, name: str) -> None:
        """A mark arrived: due once the audio queued before it has played."""
        self._buffer.append(_Buffered(max(self._ends_at, now), name))

    def clear(self, now: float) -> list[str]:
        """Drop everything not yet played; the marks dropped, in order."""
        dropped = [item.mark for item in self._buffer if item.mark is not None]
        self.cleared_s += self.buffered_s
        self._buffer.clear()
        self._ends_at = now
        return dropped

    def next_due(self, now: float) -> str | None:
        """The next mark whose audio has played by ``now`` (it leaves the buffer, with the
        audio before it), or None. One at a time: a clear may come while its echo is sent."""
        while self._buffer and self._buffer[0].ends_at <= now:
            item = self._buffer.popleft()
            if item.mark is not None:
                return item.mark
        return None

    @property
    def buffered_s(self) -> float:
        """Reply audio queued and not yet played."""
        return max(0.0, self._ends_at - time.monotonic())
