"""Test helpers for ``/v1/realtime`` driven through the official ``openai`` SDK.

:class:`Listener` reads every server event of an SDK connection as raw JSON and
also parses it with the SDK (``connection.parse_event``), so a test sees exactly
what was on the wire and what the SDK made of it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from voxpipe.audio.pcm import float_to_pcm16, pcm16_to_float, resample

T = TypeVar("T")
RATE = 24000


def pcm24k(audio: np.ndarray, rate: int) -> bytes:
    """Float audio at ``rate`` -> PCM16 at 24 kHz, what the Realtime API expects."""
    return float_to_pcm16(resample(audio, rate, RATE))


class Listener:
    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.events: list[dict[str, Any]] = []
        self.parsed: list[Any] = []
        self.first_audio_at: dict[str, float] = {}  # response id -> monotonic time
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        with contextlib.suppress(Exception):  # the connection closed
            while True:
                raw = await self.connection.recv_bytes()
                event = json.loads(raw)
                if event.get("type", "").endswith("audio.delta"):
                    self.first_audio_at.setdefault(event["response_id"], time.monotonic())
                self.events.append(event)
                self.parsed.append(self.connection.parse_event(raw))

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    # -- reading ------------------------------------------------------------

    def of(self, kind: str, since: int = 0, **match: Any) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events[since:]
            if e["type"] == kind and all(e.get(k) == v for k, v in match.items())
        ]

    async def wait_for(self, probe: Callable[[], T | None], timeout_s: float) -> T:
        deadline = time.monotonic() + timeout_s
        while True:
            found = probe()
            if found is not None and found is not False:
                return found
            if time.monotonic() > deadline:
                kinds = [e["type"] for e in self.events[-40:]]
                raise TimeoutError(f"timed out; last events: {kinds}")
            await asyncio.sleep(0.01)

    async def next(
        self, kind: str, since: int = 0, timeout_s: float = 10.0, **match: Any
    ) -> dict[str, Any]:
        return await self.wait_for(
            lambda: next(iter(self.of(kind, since, **match)), None), timeout_s
        )

    def audio(self, response_id: str) -> bytes:
        """Every audio delta of one response, decoded (GA or beta names)."""
        return b"".join(
            base64.b64decode(e["delta"])
            for e in self.events
            if e["type"] in ("response.output_audio.delta", "response.audio.delta")
            and e["response_id"] == response_id
        )

    def transcript(self, response_id: str) -> str:
        return "".join(
            e["delta"]
            for e in self.events
            if e["type"]
            in ("response.output_audio_transcript.delta", "response.audio_transcript.delta")
            and e["response_id"] == response_id
        )

    # -- sending ------------------------------------------------------------

    async def send(self, event: dict[str, Any]) -> None:
        await self.connection.send(event)

    async def send_raw(self, text: str) -> None:
        """Bytes the SDK would never send (bad JSON, ...)."""
        send_raw = getattr(self.connection, "send_raw", None)
        if send_raw is not None:  # GA
            await send_raw(text)
        else:  # beta: the websockets connection underneath
            await self.connection._connection.send(text)

    async def stream(self, pcm: bytes, chunk_ms: int = 100, real_time: bool = True) -> None:
        """Append PCM16 24 kHz audio in ``chunk_ms`` pieces, at real-time pace."""
        step = RATE * chunk_ms // 1000 * 2
        start = time.monotonic()
        for i, offset in enumerate(range(0, len(pcm), step)):
            chunk = base64.b64encode(pcm[offset : offset + step]).decode()
            await self.send({"type": "input_audio_buffer.append", "audio": chunk})
            if real_time:
                await asyncio.sleep(max(0.0, start + (i + 1) * chunk_ms / 1000 - time.monotonic()))


def silence(seconds: float) -> bytes:
    return bytes(int(seconds * RATE) * 2)


def voiced_seconds(pcm: bytes, rate: int = RATE) -> float:
    """Seconds of 20 ms windows louder than -40 dBFS RMS (speech, not silence)."""
    samples = pcm16_to_float(pcm)
    n = rate // 50
    windows = samples[: samples.shape[0] // n * n].reshape(-1, n)
    return float((np.sqrt((windows**2).mean(axis=1)) > 0.01).sum()) / 50
