"""The two audio tracks of a WebRTC call, at Opus's 48 kHz: the caller's decoded frames
to PCM16 for the session, and the session's reply frames as a paced outbound track."""

from __future__ import annotations

import asyncio
import fractions
import time
from collections.abc import Awaitable, Callable

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from voxpipe.audio.buffers import PlayoutBuffer
from voxpipe.conversation.events import AudioOut

RATE = 48000  # Opus's clock: the caller's audio arrives, and the reply leaves, at this rate
FRAME_MS = 20
FRAME_SAMPLES = RATE * FRAME_MS // 1000
FRAME_BYTES = FRAME_SAMPLES * 2
TIME_BASE = fractions.Fraction(1, RATE)
MAX_LATE_S = 0.1  # a track this far behind its clock (a stalled loop) restarts the clock


class ReplyTrack(MediaStreamTrack):
    """The reply audio as a WebRTC track: 20 ms, 48 kHz mono frames on a real-time clock.

    aiortc's sender calls :meth:`recv` in a loop and encodes whatever it returns, so the
    pacing is ours: each frame is due ``FRAME_MS`` after the one before, on the monotonic
    clock; a track that fell behind (the loop stalled) restarts its clock instead of bursting,
    while ``pts`` stays continuous. Silence fills the gaps between replies.

    The buffer is bounded at ``max_buffer_ms``; the session paces its frames only
    ``playback_lead_ms`` ahead, so more means nothing is pulling (not yet connected) and the
    oldest audio is dropped (``on_dropped`` is told how many seconds).
    """

    kind = "audio"

    def __init__(
        self,
        max_buffer_ms: int,
        on_played: Callable[[int], None],
        on_dropped: Callable[[float], None],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__()
        self._clock, self._sleep = clock, sleep
        self._on_played = on_played
        self._on_dropped = on_dropped
        self._buffer = PlayoutBuffer(max(FRAME_BYTES, max_buffer_ms * RATE // 1000 * 2))
        self._clock_start: float | None = None
        self._pts = 0

    @property
    def buffered_ms(self) -> float:
        return self._buffer.buffered_bytes / 2 * 1000 / RATE

    def push(self, frame: AudioOut) -> None:
        dropped = self._buffer.push(frame.seq, frame.pcm)
        if dropped:
            self._on_dropped(dropped / 2 / RATE)

    def clear(self) -> None:
        """Barge-in: drop every buffered frame now."""
        self._buffer.clear()

    async def _pace(self) -> None:
        now = self._clock()
        if self._clock_start is None:
            self._clock_start = now
            return
        self._pts += FRAME_SAMPLES
        due = self._clock_start + self._pts / RATE
        if now - due > MAX_LATE_S:
            self._clock_start = now - self._pts / RATE
        elif due > now:
            await self._sleep(due - now)

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        await self._pace()
        pcm, finished = self._buffer.take(FRAME_BYTES)
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(pcm)
        frame.pts = self._pts
        frame.sample_rate = RATE
        frame.time_base = TIME_BASE
        if finished:
            self._on_played(finished[-1])
        return frame


async def read_caller_audio(track: MediaStreamTrack, feed: Callable[[bytes], None]) -> None:
    """A received track's decoded frames (``av.AudioFrame``, usually s16 stereo 48 kHz) to
    PCM16 mono at 48 kHz, until the track ends: the caller's audio here, the reply's in the
    WebRTC test client."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        if not isinstance(frame, av.AudioFrame):
            continue
        for out in resampler.resample(frame):
            pcm = out.to_ndarray().tobytes()
            if pcm:
                feed(pcm)
