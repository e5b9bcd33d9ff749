"""A call on fake engines, for the session's tests: what it sent, in order, and helpers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from tests.support import order_violations
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.agent import RunningAgent
from voxpipe.audio.pcm import float_to_pcm16
from voxpipe.config import Config, TurnConfig
from voxpipe.conversation.events import AudioOut, Event, ResponseDone
from voxpipe.conversation.services import CallStore, Filler, Services
from voxpipe.conversation.session import Session
from voxpipe.engines.base import Engines, TurnModel, VadEngine
from voxpipe.engines.queued import Runners
from voxpipe.engines.runner import EngineRunner
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.tracing import Tracing
from voxpipe.observability.turn_log import TurnLog

W = 512  # the fake VAD's window: 32 ms at 16 kHz
RATE = 16000
FRAME = 320  # 20 ms, what a phone sends
LEAD_MS = 50

E = TypeVar("E", bound=Event)


class Call:
    """One session on fake engines, with everything it sent, in order.

    ``turn`` and ``llm`` override fields of the config's sections; ``turn_config`` is passed
    to the session itself, and so is ``flushes`` (a telephony transport's clear); ``agent``
    gives it instructions, a greeting and tools. Sends go one at a time, as a transport's
    do; ``send_yields`` makes each wait a moment, as a WebSocket send does, and clearing
    ``audio_flowing`` stalls the audio sends (a slow link) while still holding the transport.
    """

    def __init__(
        self,
        stt: FakeStt | None = None,
        llm: FakeLlm | None = None,
        tts: FakeTts | None = None,
        vad: VadEngine | None = None,
        output_rate: int = RATE,
        turn: dict[str, Any] | None = None,
        llm_config: dict[str, Any] | None = None,
        turn_config: TurnConfig | None = None,
        send_yields: bool = False,
        filler: Filler | None = None,
        deadlines: dict[str, Any] | None = None,
        stt_config: dict[str, Any] | None = None,
        store: CallStore | None = None,
        tracing: Tracing | None = None,
        agent: RunningAgent | None = None,
        phrases: dict[str, Filler] | None = None,
        turn_model: TurnModel | None = None,
        flushes: bool = False,
    ) -> None:
        self.config = Config.load(
            audio={"playback_lead_ms": LEAD_MS},
            turn=turn or {},
            llm=llm_config or {},
            deadlines=deadlines or {},
            # Partials take scripted transcripts in turn: off unless a test is about them.
            stt={"partial_interval_ms": 0, **(stt_config or {})},
        )
        self.stt, self.llm, self.tts = stt or FakeStt(), llm or FakeLlm(), tts or FakeTts()
        self.metrics = Metrics()
        runners = Runners(
            *(EngineRunner(name, observer=self.metrics) for name in ("vad", "stt", "llm", "tts"))
        )
        self.services = Services(
            self.config,
            Engines(vad or FakeVad(), self.stt, self.llm, self.tts, turn_model),
            runners,
            self.metrics,
            TurnLog(None),
            filler=filler,
            store=store,
            tracing=tracing or Tracing.off(),
            agent=agent,
            phrases=phrases or {},
        )
        self.send_yields = send_yields
        self._send_lock = asyncio.Lock()
        self.audio_flowing = asyncio.Event()
        self.audio_flowing.set()
        self.audio_stalled = 0  # audio sends waiting for audio_flowing
        self.sent: list[Event | AudioOut] = []
        self.session = Session(
            "call-1",
            self.services,
            self._event,
            self._audio,
            RATE,
            output_rate,
            turn_config,
            flushes=flushes,
        )

    async def _event(self, event: Event) -> None:
        async with self._send_lock:
            if self.send_yields:
                await asyncio.sleep(0.001)
            self.sent.append(event)

    async def _audio(self, frame: AudioOut) -> None:
        async with self._send_lock:
            if not self.audio_flowing.is_set():
                self.audio_stalled += 1
                await self.audio_flowing.wait()
                self.audio_stalled -= 1
            if self.send_yields:
                await asyncio.sleep(0.001)
            self.sent.append(frame)

    async def push(self, audio: np.ndarray, frame: int = FRAME) -> None:
        pcm = float_to_pcm16(audio)
        for start in range(0, len(pcm), 2 * frame):
            await self.session.push_audio(pcm[start : start + 2 * frame])

    async def say(self, loud_windows: int = 12, silence_windows: int = 30) -> None:
        """Some speech, then enough silence to end the turn (silence_ms = 16 windows)."""
        await self.push(speech(loud_windows))
        await self.push(silence(silence_windows))

    def of(self, kind: type[E], turn_id: int | None = None) -> list[E]:
        return [
            e
            for e in self.sent
            if isinstance(e, kind) and (turn_id is None or getattr(e, "turn_id", None) == turn_id)
        ]

    def frames(self, turn_id: int | None = None) -> list[AudioOut]:
        return [
            a
            for a in self.sent
            if isinstance(a, AudioOut) and (turn_id is None or a.turn_id == turn_id)
        ]

    def done(self, turn_id: int) -> ResponseDone | None:
        found = self.of(ResponseDone, turn_id)
        return found[0] if found else None

    def index(self, match: Callable[[Event | AudioOut], bool]) -> int:
        return next(i for i, e in enumerate(self.sent) if match(e))

    async def until(self, condition: Callable[[], object], within_s: float = 2.0) -> None:
        deadline = time.monotonic() + within_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out; sent so far: {self.kinds()}"
            await asyncio.sleep(0.005)

    async def idle(self) -> None:
        await asyncio.wait_for(self.session.wait_idle(), 3)

    def kinds(self) -> list[str]:
        return ["audio" if isinstance(e, AudioOut) else e.type for e in self.sent]

    def counted(self, status: str) -> float | None:
        return self.metrics.registry.get_sample_value("voxpipe_turns_total", {"status": status})


def speech(windows: int) -> np.ndarray:
    return np.full(windows * W, 0.5, np.float32)


def silence(windows: int) -> np.ndarray:
    return np.zeros(windows * W, np.float32)


def others_running() -> list[asyncio.Task[Any]]:
    me = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not me and not t.done()]


def assert_causal_stages(metrics: dict[str, Any]) -> None:
    """Every stage recorded is in causal order (a preempted turn may pass eot late)."""
    stages = metrics["stages_ms"]
    assert order_violations(stages) == [], stages
    assert stages["speech_end"] == 0.0
