"""Caller audio on its way to the VAD: one bounded buffer, one pump, and what was dropped.

The transport hands PCM16 in as it arrives and :meth:`Inbound.feed` never waits; one pump
task takes it, in order, to the session. A burst (a client faster than real time, or one
catching up after a reconnect) is held back at the sender (:meth:`Inbound.keep_up`) rather
than dropped; a VAD stalled for longer still loses the oldest audio, as the bound says.
Audio lost anywhere in the call (here, or waiting for a client's commit in
:class:`Uncommitted`) is counted in ``voxpipe_audio_dropped_seconds_total``, logged once per
episode, and told to the client (``audio_dropped``) soon, at most once a second during a
flood, but every millisecond of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from voxpipe.audio.buffers import Overflow
from voxpipe.conversation.events import AudioDropped, ErrorCode, SendEvent
from voxpipe.conversation.services import Services
from voxpipe.engines.base import STT_SAMPLE_RATE

log = logging.getLogger("voxpipe.session")

Process = Callable[[bytes, int], Awaitable[None]]  # (PCM16, arrival in monotonic ns)


class Inbound:
    def __init__(
        self,
        session_id: str,
        services: Services,
        sample_rate: int,
        send_event: SendEvent,
        process: Process,
        counts: Counter[str],
    ) -> None:
        """``process`` is the session's: it takes each chunk in order. ``counts`` are the
        session's counters, where the dropped milliseconds are added up."""
        self._id = session_id
        self._services = services
        self._limits = services.config.limits
        self._rate = sample_rate
        self._send_event = send_event
        self._process = process
        self._counts = counts
        self._buffer = InboundAudioBuffer(sample_rate, self._limits.inbound_buffer_ms)
        self.transport = "unknown"  # set by Call.attach; labels the dropped-audio counter
        self._drops = DropReports()
        self._drop_cause = ""
        self._drop_notices: asyncio.Task[None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._closed = False

    def feed(self, pcm: bytes) -> None:
        """Queue inbound PCM16 at the session's input rate; never waits for the VAD."""
        dropped = self._buffer.put(pcm)
        if dropped:
            self._counts["inbound_dropped_ms"] += round(dropped / 2 * 1000 / self._rate)
            self.dropped(
                dropped / 2 / self._rate,
                f"caller audio arrived faster than real time and more than "
                f"{self._limits.inbound_buffer_ms} ms of it waited for the VAD "
                f"(limits.inbound_buffer_ms); the oldest went first",
            )
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._drain(), name=f"inbound-{self._id}")

    def clear(self) -> None:
        """Forget the audio not processed yet."""
        self._buffer.take()

    async def keep_up(self, max_wait_s: float | None = None) -> None:
        """Backpressure for a burst: while over half the bound waits for the VAD, hold the
        sender (up to ``limits.inbound_wait_ms``), so a client sending faster than real
        time, or catching up after a reconnect, is taken at the VAD's pace rather than
        dropped. A transport that stops reading makes TCP slow the sender. A VAD stalled
        for longer still loses the oldest audio, as the bound says, and the client is told."""
        if max_wait_s is None:
            max_wait_s = self._limits.inbound_wait_ms / 1000
        pump = self._pump
        if max_wait_s > 0 and pump is not None and not pump.done() and self._buffer.filling:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(pump), max_wait_s)

    async def processed(self) -> None:
        """Wait until everything fed so far has been processed."""
        if self._pump is not None and not self._pump.done():
            await asyncio.shield(self._pump)

    async def _drain(self) -> None:
        age = self._services.metrics.buffer_age.labels("inbound")
        while not self._closed and len(self._buffer):
            for chunk in self._buffer.take():
                age.observe((time.monotonic_ns() - chunk.arrived_ns) / 1e9)
                await self._process(chunk.pcm, chunk.arrived_ns)

    # -- what was dropped -------------------------------------------------------

    def dropped(self, seconds: float, cause: str) -> None:
        """Caller audio is gone: count it, log the episode once, and tell the client (soon,
        and at most once a second during a flood, but every millisecond of it)."""
        policy = self._buffer.policy.value
        self._services.metrics.audio_dropped.labels("inbound", policy, self.transport).inc(seconds)
        self._drop_cause = cause
        if self._drops.add(seconds * 1000, time.monotonic()):
            log.warning(
                "session %s (%s): %s; %.0f ms dropped (%.0f ms in this call); counted in "
                "voxpipe_audio_dropped_seconds_total and told to the client (audio_dropped) "
                "where its protocol has errors; not logged again in this episode",
                self._id,
                self.transport,
                cause,
                seconds * 1000,
                self._drops.total_ms,
            )
        if self._drop_notices is None or self._drop_notices.done():
            self._drop_notices = asyncio.create_task(
                self._tell_drops(), name=f"audio-dropped-{self._id}"
            )

    async def _tell_drops(self) -> None:
        """Send the ``audio_dropped`` notices as they fall due, until none is pending."""
        while not self._closed and (due := self._drops.due_at()) is not None:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            notice = self._drops.take(time.monotonic())
            if notice is not None:
                await self._send_event(self._drop_event(notice))

    def _drop_event(self, notice: DropNotice) -> AudioDropped:
        return AudioDropped(
            ErrorCode.AUDIO_DROPPED.value,
            f"{notice.ms:.0f} ms of caller audio dropped ({notice.total_ms:.0f} ms in this "
            f"call): {self._drop_cause}",
            dropped_ms=round(notice.ms, 1),
            total_dropped_ms=round(notice.total_ms, 1),
        )

    async def close(self) -> None:
        """Stop the pump; drops not told yet are told now, while the client may still hear."""
        self._closed = True
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        if self._drop_notices is not None and not self._drop_notices.done():
            self._drop_notices.cancel()
            await asyncio.gather(self._drop_notices, return_exceptions=True)
        notice = self._drops.flush(time.monotonic())
        if notice is not None:
            with contextlib.suppress(Exception):  # the client may be gone: still counted
                await self._send_event(self._drop_event(notice))


class Uncommitted:
    """Caller audio (16 kHz) waiting for the client's commit (manual turns). Bounded to
    ``max_turn_s``: the oldest goes first, and is counted and told as dropped."""

    def __init__(self, inbound: Inbound, counts: Counter[str]) -> None:
        self._inbound = inbound
        self._counts = counts
        self._chunks: deque[np.ndarray] = deque()
        self.samples = 0

    def keep(self, audio: np.ndarray, max_turn_s: float) -> None:
        self._chunks.append(audio)
        self.samples += audio.shape[0]
        limit = int(max_turn_s * STT_SAMPLE_RATE)
        while self.samples > limit and len(self._chunks) > 1:
            dropped = self._chunks.popleft()
            self.samples -= dropped.shape[0]
            self._counts["manual_dropped_ms"] += round(dropped.shape[0] / 16)
            self._inbound.dropped(
                dropped.shape[0] / STT_SAMPLE_RATE,
                f"more than turn.max_turn_s ({max_turn_s:g} s) of caller audio "
                f"waited for a commit; the oldest went first",
            )

    def take(self) -> np.ndarray:
        """All of it, now no longer kept."""
        audio = np.concatenate(list(self._chunks)) if self._chunks else np.zeros(0, np.float32)
        self._chunks.clear()
        self.samples = 0
        return audio


class Arrivals:
    """When each window of caller audio arrived: maps the 16 kHz sample clock of the turn
    detector to monotonic time (a turn's ``speech_end``, the start of a barge-in)."""

    def __init__(self, remembered: int = 4096) -> None:
        self._windows: deque[tuple[int, int]] = deque(maxlen=remembered)  # (end sample, ns)
        self._samples = 0

    def add(self, samples: int, arrived_ns: int) -> None:
        """The next ``samples`` of audio arrived at ``arrived_ns``."""
        self._samples += samples
        self._windows.append((self._samples, arrived_ns))

    def of(self, sample: int) -> int:
        """When the window holding ``sample`` arrived (now, if none has yet)."""
        for end, arrived in self._windows:
            if end >= sample:
                return arrived
        return time.monotonic_ns()


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
