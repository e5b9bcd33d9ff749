"""A caller for the native protocol: streams audio at real-time pace, like a phone.

Used by ``voxpipe call``, the benchmark and the end-to-end tests. It keeps
sending silence after the speech (a real line never goes quiet), so the
server's end-pointing sees the pause, and it measures voice-to-voice latency
the way the caller feels it: from the moment the last speech sample left
until the first reply audio byte arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets

from voxpipe.audio.pcm import float_to_pcm16
from voxpipe.audio.resample import resample

AUDIO_HEADER = struct.Struct("<II")


def speech_end_sample(audio: np.ndarray, rate: int, floor_db: float = 35.0) -> int:
    """The sample after the last 20 ms frame within ``floor_db`` of the loudest frame."""
    frame = max(1, rate // 50)
    n = audio.shape[0] // frame
    if n == 0:
        return audio.shape[0]
    rms = np.sqrt(np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1) + 1e-12)
    db = 20 * np.log10(rms)
    loud = np.nonzero(db > db.max() - floor_db)[0]
    return int((loud[-1] + 1) * frame) if loud.size else audio.shape[0]


@dataclass
class TurnResult:
    transcript: str = ""
    reply: str = ""
    status: str = ""
    audio: bytearray = field(default_factory=bytearray)
    seqs: list[int] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    speech_end_sent_ns: int = 0
    first_audio_ns: int = 0
    turn_id: int = 0

    @property
    def voice_to_voice_ms(self) -> float | None:
        if self.first_audio_ns and self.speech_end_sent_ns:
            return (self.first_audio_ns - self.speech_end_sent_ns) / 1e6
        return None


class NativeClient:
    def __init__(self, url: str, frame_ms: int = 20, input_rate: int = 16000) -> None:
        self.url = url
        self.frame_ms = frame_ms
        self.input_rate = input_rate
        self.output_rate = 0
        self.session_id = ""
        self.started: dict[str, Any] = {}
        self._ws: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._current: TurnResult | None = None
        self._done: asyncio.Event = asyncio.Event()
        self.errors: list[dict[str, Any]] = []
        self.unsolicited: list[dict[str, Any]] = []

    async def __aenter__(self) -> NativeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self, **start: Any) -> dict[str, Any]:
        self._ws = await websockets.connect(self.url, max_size=4 << 20, open_timeout=30)
        await self._ws.send(
            json.dumps({"type": "session.start", "input_sample_rate": self.input_rate, **start})
        )
        started = json.loads(await asyncio.wait_for(self._ws.recv(), 30))
        if started.get("type") != "session.started":
            raise RuntimeError(f"session.start refused: {started}")
        self.started = started
        self.session_id = started["session_id"]
        self.output_rate = started["output_sample_rate"]
        self._reader = asyncio.create_task(self._read())
        return started

    async def _read(self) -> None:
        async for message in self._ws:
            turn = self._current
            if isinstance(message, bytes):
                seq, _turn_id = AUDIO_HEADER.unpack_from(message)
                if turn is not None:
                    if not turn.first_audio_ns:
                        turn.first_audio_ns = time.monotonic_ns()
                    turn.seqs.append(seq)
                    turn.audio += message[AUDIO_HEADER.size :]
                continue
            event = json.loads(message)
            if event["type"] == "error":
                self.errors.append(event)
            if turn is None:
                self.unsolicited.append(event)
                continue
            turn.events.append(event)
            kind = event["type"]
            if kind == "transcript":
                turn.transcript, turn.turn_id = event["text"], event["turn_id"]
            elif kind == "response.done":
                turn.reply, turn.status = event["text"], event["status"]
                if event["status"] in ("empty", "failed"):
                    self._done.set()
            elif kind == "turn.metrics":
                turn.metrics = event
                self._done.set()

    async def speak(
        self, audio: np.ndarray, rate: int, timeout_s: float = 60.0, tail_silence_s: float = 0.4
    ) -> TurnResult:
        """Send one utterance in real time, then silence until the reply is complete."""
        if rate != self.input_rate:
            audio = resample(audio, rate, self.input_rate)
        speech_end = speech_end_sample(audio, self.input_rate)
        frame = self.input_rate * self.frame_ms // 1000
        turn = TurnResult()
        self._current, self._done = turn, asyncio.Event()
        silence = bytes(frame * 2)
        start = time.monotonic()
        i = 0
        deadline = start + audio.shape[0] / self.input_rate + timeout_s
        while True:
            chunk_start = i * frame
            if chunk_start < audio.shape[0]:
                payload = float_to_pcm16(audio[chunk_start : chunk_start + frame])
            else:
                payload = silence
            await asyncio.sleep(max(0.0, start + i * self.frame_ms / 1000 - time.monotonic()))
            await self._ws.send(payload)
            if not turn.speech_end_sent_ns and chunk_start + frame >= speech_end:
                turn.speech_end_sent_ns = time.monotonic_ns()
            i += 1
            if self._done.is_set():
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no complete reply within {timeout_s} s")
        # A short tail of silence, as a caller who waits before speaking again.
        for _ in range(int(tail_silence_s * 1000 / self.frame_ms)):
            await asyncio.sleep(self.frame_ms / 1000)
            await self._ws.send(silence)
        self._current = None
        return turn

    async def send_raw(self, message: str | bytes) -> None:
        await self._ws.send(message)

    async def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.send(json.dumps({"type": "session.end"}))
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
