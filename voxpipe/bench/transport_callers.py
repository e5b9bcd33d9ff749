"""One caller interface over the four transports, for ``voxpipe bench-transports``.

Each :class:`Caller` wraps the transport's own client (native, OpenAI Realtime,
Twilio, WebRTC), which already speaks at real-time pace and plays the reply
like a phone. On top of it, every caller measures the two instants of
voice-to-voice latency the same way, so the transports compare fairly:

- the end of the caller's speech: when the frame holding the last loud sample
  of the clip left (:func:`speech_end_sample`, 35 dB below the loudest frame);
- the start of the reply: when the first reply audio with a voiced 20 ms window
  (RMS over :data:`VOICED_RMS`) arrived. "First reply byte" would not do:
  WebRTC sends silence all the time, and a reply may open with silence.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any, Protocol

import numpy as np

from voxpipe.audio.g711 import ulaw_decode
from voxpipe.audio.resample import resample
from voxpipe.clients.native_client import AUDIO_HEADER, NativeClient, speech_end_sample
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


def split_at_speech_end(audio: np.ndarray, rate: int) -> tuple[np.ndarray, np.ndarray]:
    """The clip up to its last loud 20 ms frame (whole frames), and the quiet rest."""
    frame = rate // 50
    cut = min(audio.shape[0], -(-speech_end_sample(audio, rate) // frame) * frame)
    return audio[:cut], audio[cut:]


class Caller(Protocol):
    """One call on one transport, driven turn by turn by the benchmark."""

    transport: str
    session_id: str

    async def open(self) -> None: ...

    async def say(self, audio: np.ndarray, rate: int) -> int:
        """Queue a clip on the line; return (monotonic ns) once its last loud frame has left."""
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
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.chunks: deque[tuple[int, bytes]] = deque(maxlen=KEPT_CHUNKS)

    async def _open(self, url: str, start: dict[str, Any]) -> dict[str, Any]:
        started = await super()._open(url, start)
        self._ws = _Tap(self._ws, self.chunks)
        return started


class NativeCaller:
    transport = "native"

    def __init__(self, ws_base: str) -> None:
        self.client = _TappedNativeClient(f"{ws_base}/v1/voice")
        self.session_id = ""

    async def open(self) -> None:
        started = await self.client.connect()
        self.session_id = started["session_id"]

    async def say(self, audio: np.ndarray, rate: int) -> int:
        utterance = self.client.say(audio, rate)
        await utterance.sent.wait()
        return utterance.speech_end_sent_ns

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

    async def say(self, audio: np.ndarray, rate: int) -> int:
        spoken = self.line.say(audio, rate)
        await spoken.sent.wait()
        return spoken.speech_end_sent_ns

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

    def __init__(self, ws_base: str) -> None:
        self.line = TwilioLine(f"{ws_base}/v1/twilio")
        self.session_id = self.line.stream_sid  # the server names the session after the stream

    async def open(self) -> None:
        await self.line.connect()

    async def say(self, audio: np.ndarray, rate: int) -> int:
        speech, rest = split_at_speech_end(resample(audio, rate, self.rate), self.rate)
        said = self.line.say(speech, self.rate)
        if rest.shape[0]:
            self.line.say(rest, self.rate)
        await said.sent.wait()
        return time.monotonic_ns()

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

    async def say(self, audio: np.ndarray, rate: int) -> int:
        speech, rest = split_at_speech_end(resample(audio, rate, self.rate), self.rate)
        self.client.line.say(speech, self.rate)
        await self.client.line.idle.wait()  # the last speech frame has left the microphone
        at = time.monotonic_ns()
        if rest.shape[0]:
            self.client.line.say(rest, self.rate)
        return at

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
