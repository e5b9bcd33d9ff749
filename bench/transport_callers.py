"""One caller interface over the four transports, for ``python -m bench transports``.

Each :class:`Caller` wraps the transport's own client (native, OpenAI Realtime,
Twilio, WebRTC), which already speaks at real-time pace and plays the reply
like a phone. On top of it, every caller measures the two instants of
voice-to-voice latency the same way, so the transports compare fairly:

- instants of the caller's speech ("marks", seconds into the clip, such as its
  last loud sample): when the 20 ms frame holding each one left the client;
- the start of the reply: when the first reply audio with a voiced 20 ms window
  (RMS over :data:`VOICED_RMS`) arrived. "First reply byte" would not do:
  WebRTC sends silence all the time, and a reply may open with silence.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from voxpipe.audio.pcm import (
    StreamResampler,
    float_to_pcm16,
    pcm16_to_float,
    resample,
    ulaw_decode,
    ulaw_encode,
)
from voxpipe.clients.native_client import AUDIO_HEADER, NativeClient, Utterance
from voxpipe.clients.twilio_client import TwilioLine
from voxpipe.clients.webrtc_client import WebRTCClient

VOICED_RMS = 300.0  # PCM16 RMS of a 20 ms window (about -40 dBFS): louder is not silence
KEPT_CHUNKS = 30000  # reply chunks kept with their arrival (10 min of 20 ms frames)
PLAYED_TAIL_S = 0.3  # the caller's pause after the reply has played out
TRANSPORTS = ("native", "openai_realtime", "twilio", "webrtc")


def voiced(pcm: bytes, rate: int, threshold: float = VOICED_RMS) -> bool:
    """Whether any 20 ms window of PCM16 ``pcm`` (a shorter chunk: all of it) is louder."""
    x = np.frombuffer(pcm[: len(pcm) // 2 * 2], "<i2").astype(np.float64)
    if x.size == 0:
        return False
    window = max(1, rate // 50)
    n = x.size // window
    windows = x[: n * window].reshape(n, window) if n else x.reshape(1, -1)
    return bool((np.sqrt(np.mean(windows**2, axis=1)) > threshold).any())


def first_voiced(
    chunks: Iterable[tuple[int, bytes]], rate: int, after_ns: int, threshold: float = VOICED_RMS
) -> int | None:
    """Arrival (ns) of the first chunk at or after ``after_ns`` that holds voiced audio."""
    for at_ns, pcm in chunks:
        if at_ns >= after_ns and voiced(pcm, rate, threshold):
            return at_ns
    return None


WIRE_RATES = {"native": 16000, "openai_realtime": 24000, "twilio": 8000, "webrtc": 48000}


def as_the_server_hears(transport: str, audio: np.ndarray, rate: int) -> np.ndarray:
    """A clip at 16 kHz the way ``transport`` brings it to the session's VAD: PCM16 (μ-law
    for Twilio) at the transport's rate, resampled as the session does. WebRTC's Opus is
    not modelled."""
    wire = WIRE_RATES[transport]
    pcm = float_to_pcm16(resample(audio, rate, wire))
    if transport == "twilio":
        pcm = ulaw_decode(ulaw_encode(pcm))
    return StreamResampler(wire, 16000).process(pcm16_to_float(pcm), last=True)


def frames_through(mark_s: float, rate: int, frame: int) -> int:
    """How many ``frame``-sample frames hold the audio up to ``mark_s`` (at least one)."""
    return max(1, math.ceil(round(mark_s * rate) / frame))


def cut_at_marks(
    audio: np.ndarray, rate: int, marks_s: Sequence[float], frame: int
) -> list[np.ndarray]:
    """The clip in ``len(marks_s) + 1`` pieces, each of the first ending on the frame that
    holds its mark (ascending marks; a piece may be empty)."""
    cuts = [min(audio.shape[0], frames_through(m, rate, frame) * frame) for m in marks_s]
    edges = [0, *cuts, audio.shape[0]]
    return [audio[a:b] for a, b in itertools.pairwise(edges)]


class Caller(Protocol):
    """One call on one transport, driven turn by turn by the benchmark."""

    transport: str
    session_id: str

    async def open(self) -> None: ...

    async def say(self, audio: np.ndarray, rate: int, marks_s: Sequence[float]) -> list[int]:
        """Queue a clip on the line; once the frames holding each of the ascending
        ``marks_s`` have left, return when each left (monotonic ns)."""
        ...

    def first_voiced_after(self, after_ns: int) -> int | None: ...

    async def played_out(self) -> None:
        """Return once the reply received so far has played, plus a short pause."""
        ...

    async def close(self) -> None: ...


# -- native ---------------------------------------------------------------------


class _Tap:
    """The native client's WebSocket, with each binary frame's arrival recorded."""

    def __init__(self, ws: Any, chunks: deque[tuple[int, bytes]]) -> None:
        self._ws = ws
        self._chunks = chunks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for message in self._ws:
            if isinstance(message, bytes):
                self._chunks.append((time.monotonic_ns(), message[AUDIO_HEADER.size :]))
            yield message


class _TappedNativeClient(NativeClient):
    """The native client, recording reply arrivals and marking any instant of its speech.

    It reaches into the client's line (``_line``, ``_unsent``, ``_frames_sent``) because
    :meth:`NativeClient.say` marks only the end of the loud speech.
    """

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.chunks: deque[tuple[int, bytes]] = deque(maxlen=KEPT_CHUNKS)

    async def _open(self, url: str, start: dict[str, Any]) -> dict[str, Any]:
        started = await super()._open(url, start)
        self._ws = _Tap(self._ws, self.chunks)
        return started

    def say_marked(self, audio: np.ndarray, rate: int, marks_s: Sequence[float]) -> list[Utterance]:
        frame = self.input_rate * self.frame_ms // 1000
        pcm = float_to_pcm16(resample(audio, rate, self.input_rate))
        chunks = [pcm[i : i + frame * 2] for i in range(0, len(pcm), frame * 2)]
        base = self._frames_sent + len(self._line)
        marks = [
            Utterance(len(chunks), base + frames_through(m, self.input_rate, frame))
            for m in marks_s
        ]
        self._line.extend(chunks)
        self._unsent.extend(marks)
        return marks


class NativeCaller:
    transport = "native"

    def __init__(self, ws_base: str, instructions: str | None = None) -> None:
        self.client = _TappedNativeClient(f"{ws_base}/v1/voice")
        self.session_id = ""
        self.instructions = instructions  # the call's system prompt; None: the server's

    async def open(self) -> None:
        start = {} if self.instructions is None else {"instructions": self.instructions}
        started = await self.client.connect(**start)
        self.session_id = started["session_id"]

    async def say(self, audio: np.ndarray, rate: int, marks_s: Sequence[float]) -> list[int]:
        marks = self.client.say_marked(audio, rate, marks_s)
        for mark in marks:
            await mark.sent.wait()
        return [mark.speech_end_sent_ns for mark in marks]

    def first_voiced_after(self, after_ns: int) -> int | None:
        return first_voiced(self.client.chunks, self.client.output_rate, after_ns)

    async def played_out(self) -> None:
        await self.client.wait_playback_done(PLAYED_TAIL_S)

    async def close(self) -> None:
        await self.client.close()


# -- OpenAI Realtime --------------------------------------------------------------


class RealtimeCaller:
    transport = "openai_realtime"

    def __init__(self, ws_base: str) -> None:
        from voxpipe.clients.realtime_client import RealtimeLine  # needs the openai SDK

        self.line = RealtimeLine(f"{ws_base}/v1")
        self.rate = 24000
        self.session_id = ""

    async def open(self) -> None:
        await self.line.connect()
        self.session_id = self.line.session_id

    async def say(self, audio: np.ndarray, rate: int, marks_s: Sequence[float]) -> list[int]:
        marks = self.line.say(audio, rate, marks_s)
        for mark in marks:
            await mark.sent.wait()
        return [mark.sent_ns for mark in marks]

    def first_voiced_after(self, after_ns: int) -> int | None:
        return first_voiced(self.line.audio, self.rate, after_ns)

    async def played_out(self) -> None:
        await asyncio.sleep(self.line.buffered_s + PLAYED_TAIL_S)

    async def close(self) -> None:
        await self.line.close()


# -- Twilio -----------------------------------------------------------------------


class TwilioCaller:
    transport = "twilio"
    rate = 8000

    def __init__(self, ws_base: str, instructions: str | None = None) -> None:
        parameters = {} if instructions is None else {"instructions": instructions}
        self.line = TwilioLine(f"{ws_base}/v1/twilio", parameters)
        self.session_id = self.line.stream_sid  # the server names the session after the stream

    async def open(self) -> None:
        await self.line.connect()

    async def say(self, audio: np.ndarray, rate: int, marks_s: Sequence[float]) -> list[int]:
        pieces = cut_at_marks(resample(audio, rate, self.rate), self.rate, marks_s, 160)
        said = [self.line.say(piece, self.rate) if piece.shape[0] else None for piece in pieces]
        sent, at = [], time.monotonic_ns()
        for piece in said[: len(marks_s)]:
            if piece is not None:  # an empty piece: its mark is in the frame before
                await piece.sent.wait()
                at = time.monotonic_ns()
            sent.append(at)
        return sent

    def first_voiced_after(self, after_ns: int) -> int | None:
        media = self.line.of("media", since=after_ns / 1e9)
        chunks = (
            (int(r.at * 1e9), ulaw_decode(base64.b64decode(r.message["media"]["payload"])))
            for r in media
        )
        return first_voiced(chunks, self.rate, after_ns)

    async def played_out(self) -> None:
        await self.line.wait_for(lambda: self.line.buffered_s == 0, 120)
        await asyncio.sleep(PLAYED_TAIL_S)

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # the stream may already be gone
            await self.line.hang_up()
        await self.line.close()


# -- WebRTC -----------------------------------------------------------------------


class WebRTCCaller:
    transport = "webrtc"
    rate = 48000
    frame_bytes = 960 * 2  # each entry of frame_times is 20 ms of the reply track

    def __init__(self, http_base: str) -> None:
        self.client = WebRTCClient(http_base)
        self.session_id = ""

    async def open(self) -> None:
        started = await self.client.connect()
        self.session_id = started["session_id"]

    async def say(self, audio: np.ndarray, rate: int, marks_s: Sequence[float]) -> list[int]:
        """Piece by piece: the microphone is idle once a piece's last frame has left."""
        line = self.client.line
        pieces = cut_at_marks(resample(audio, rate, self.rate), self.rate, marks_s, 960)
        sent, at = [], time.monotonic_ns()
        for piece in pieces[: len(marks_s)]:
            if piece.shape[0]:
                line.say(piece, self.rate)
                await line.idle.wait()
                at = time.monotonic_ns()
            sent.append(at)
        if pieces[-1].shape[0]:
            line.say(pieces[-1], self.rate)
        return sent

    def _frames(self, since_s: float) -> list[tuple[int, bytes]]:
        times, audio, step = self.client.frame_times, self.client.audio, self.frame_bytes
        first = next((i for i in range(len(times) - 1, -1, -1) if times[i] < since_s), -1) + 1
        return [
            (int(times[i] * 1e9), bytes(audio[i * step : (i + 1) * step]))
            for i in range(first, min(len(times), len(audio) // step))
        ]

    def first_voiced_after(self, after_ns: int) -> int | None:
        return first_voiced(self._frames(after_ns / 1e9), self.rate, after_ns)

    async def played_out(self, quiet_s: float = 0.5, timeout_s: float = 120.0) -> None:
        """The track carries silence between replies: wait for ``quiet_s`` of it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            recent = self._frames(time.monotonic() - quiet_s)
            if recent and not any(voiced(pcm, self.rate) for _, pcm in recent):
                break
        await asyncio.sleep(PLAYED_TAIL_S)

    async def close(self) -> None:
        await self.client.close()


def make_caller(transport: str, port: int) -> Caller:
    ws_base, http_base = f"ws://127.0.0.1:{port}", f"http://127.0.0.1:{port}"
    if transport == "native":
        return NativeCaller(ws_base)
    if transport == "openai_realtime":
        return RealtimeCaller(ws_base)
    if transport == "twilio":
        return TwilioCaller(ws_base)
    if transport == "webrtc":
        return WebRTCCaller(http_base)
    raise ValueError(f"unknown transport {transport!r}; one of {', '.join(TRANSPORTS)}")
