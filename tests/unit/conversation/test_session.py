"""Session orchestration with fake engines: what a call sees, in what order, and cleanup."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.audio.pcm import float_to_pcm16
from voxpipe.config import Config
from voxpipe.conversation.events import (
    AudioOut,
    ErrorEvent,
    Event,
    ResponseDone,
    ResponseTextDelta,
    SpeechStarted,
    SpeechStopped,
    Transcript,
    TurnMetrics,
)
from voxpipe.conversation.session import Runners, Services, Session
from voxpipe.engines.base import Engines
from voxpipe.engines.runner import EngineRunner
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.timeline import STAGES
from voxpipe.observability.turn_log import TurnLog

W = 512  # the fake VAD's window: 32 ms at 16 kHz
RATE = 16000
FRAME = 320  # 20 ms, what a phone sends
LEAD_MS = 50

E = TypeVar("E", bound=Event)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("VOXPIPE_"):
            monkeypatch.delenv(name)
    yield


class Call:
    """One session on fake engines, with everything it sent, in order."""

    def __init__(
        self,
        stt: FakeStt | None = None,
        llm: FakeLlm | None = None,
        tts: FakeTts | None = None,
        output_rate: int = RATE,
    ) -> None:
        self.config = Config.load(audio={"playback_lead_ms": LEAD_MS})
        self.stt, self.llm, self.tts = stt or FakeStt(), llm or FakeLlm(), tts or FakeTts()
        self.metrics = Metrics()
        runners = Runners(
            *(EngineRunner(name, observer=self.metrics) for name in ("vad", "stt", "llm", "tts"))
        )
        self.services = Services(
            self.config,
            Engines(FakeVad(), self.stt, self.llm, self.tts),
            runners,
            self.metrics,
            TurnLog(None),
        )
        self.sent: list[Event | AudioOut] = []
        self.session = Session("call-1", self.services, self._event, self._audio, RATE, output_rate)

    async def _event(self, event: Event) -> None:
        self.sent.append(event)

    async def _audio(self, frame: AudioOut) -> None:
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


@pytest.fixture
async def make_call() -> AsyncIterator[Callable[..., Call]]:
    calls: list[Call] = []

    def make(**kwargs: Any) -> Call:
        call = Call(**kwargs)
        calls.append(call)
        return call

    yield make
    for call in calls:
        await call.session.close()
        call.services.runners.close()


def others_running() -> list[asyncio.Task[Any]]:
    me = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not me and not t.done()]


def assert_monotonic_stages(metrics: dict[str, Any], complete: bool = True) -> None:
    stages = metrics["stages_ms"]
    if complete:
        assert list(stages) == list(STAGES), f"missing: {set(STAGES) - set(stages)}"
    values = list(stages.values())
    assert values == sorted(values), stages
    assert stages["speech_end"] == 0.0


async def test_a_turn_from_speech_to_reply(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(["Sure", " thing", ",", " I", " can", " help", "."])
    call = make_call(stt=FakeStt("hello there"), llm=llm)
    await call.push(silence(10))
    await call.say(loud_windows=12, silence_windows=30)
    await call.idle()

    events = [e for e in call.sent if not isinstance(e, AudioOut)]
    assert events[:3] == [
        SpeechStarted(320.0),  # window 10 is the first loud one: 10 * 32 ms
        SpeechStopped(704.0, 1),  # window 21 the last: it ends at 22 * 32 ms
        Transcript(1, "hello there"),
    ]
    deltas = call.of(ResponseTextDelta)
    assert [d.delta for d in deltas] == llm.replies[0]
    assert [type(e) for e in events] == [
        SpeechStarted,
        SpeechStopped,
        Transcript,
        *[ResponseTextDelta] * len(deltas),
        ResponseDone,
        TurnMetrics,
    ]

    # 9 windows of padding, 12 of speech and a 3-window tail went to STT.
    (stt_audio,) = call.stt.calls
    assert stt_audio.shape[0] == (9 + 12 + 3) * W
    assert call.llm.calls[0][-1].content == "hello there"
    assert call.tts.clauses == ["Sure thing,", "I can help."]

    # Two clauses of 100 ms in 20 ms frames, numbered from 1, between transcript and done.
    frames = call.frames(1)
    assert [f.seq for f in frames] == list(range(1, 11))
    assert all(len(f.pcm) == 2 * FRAME for f in frames)
    first_audio = call.index(lambda e: isinstance(e, AudioOut))
    last_audio = max(i for i, e in enumerate(call.sent) if isinstance(e, AudioOut))
    assert call.index(lambda e: isinstance(e, Transcript)) < first_audio
    assert last_audio < call.index(lambda e: isinstance(e, ResponseDone))

    done = call.done(1)
    assert done == ResponseDone(1, "completed", "Sure thing, I can help.", 200.0, 1, 10, "")
    (metrics,) = call.of(TurnMetrics)
    assert metrics.turn_id == 1
    assert_monotonic_stages(metrics.metrics)
    assert metrics.metrics["status"] == "completed"
    assert metrics.metrics["transcript"] == "hello there"
    assert metrics.metrics["first_clause"] == "Sure thing,"
    assert metrics.metrics["llm"]["completion_tokens"] == 7
    assert metrics.metrics["voice_to_voice_ms"] == metrics.metrics["stages_ms"]["first_audio_sent"]
    assert call.session.turns == [metrics.metrics]
    assert call.counted("completed") == 1

    assert [(m.role, m.content) for m in call.session.history.turns] == [
        ("user", "hello there"),
        ("assistant", "Sure thing, I can help."),
    ]


async def test_reply_audio_is_resampled_to_the_output_rate(make_call: Callable[..., Call]) -> None:
    tts = FakeTts(sample_rate=22050, samples_per_clause=2205)  # 100 ms per clause
    call = make_call(llm=FakeLlm(["One thing, then", " another."]), tts=tts, output_rate=24000)
    await call.say()
    await call.idle()
    done = call.done(1)
    assert done is not None and done.status == "completed"
    assert done.audio_ms == pytest.approx(200.0, abs=2.0)
    frames = call.frames(1)
    assert all(len(f.pcm) == 2 * 480 for f in frames[:-1])  # 20 ms at 24 kHz
    assert sum(len(f.pcm) for f in frames) / 2 / 24000 == pytest.approx(0.2, abs=0.002)


async def test_sequence_numbers_keep_increasing_across_turns(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(stt=FakeStt("one", "two"))
    await call.say()
    await call.idle()
    await call.say()
    await call.idle()
    seqs = [f.seq for f in call.frames()]
    assert seqs == list(range(1, len(seqs) + 1))
    first, second = call.done(1), call.done(2)
    assert first is not None and second is not None
    assert first.last_seq is not None and second.first_seq == first.last_seq + 1
    # The second prompt holds the whole first exchange.
    assert [m.content for m in call.llm.calls[1][1:]] == ["one", "Hello there.", "two"]


async def test_a_new_user_turn_cancels_a_long_reply(make_call: Callable[..., Call]) -> None:
    long_reply = ["word "] * 100
    llm = FakeLlm(long_reply, ["Okay", "."], delay_s=0.01)
    call = make_call(stt=FakeStt("tell me a story", "stop"), llm=llm)
    await call.say()
    await call.until(lambda: call.frames(1))
    started = time.monotonic()
    await call.say()  # barge-in
    await call.idle()
    assert time.monotonic() - started < 1.0

    first, second = call.done(1), call.done(2)
    assert first is not None and second is not None
    assert first.status == "cancelled" and first.reason == "superseded by a new user turn"
    assert second.status == "completed" and second.text == "Okay."
    assert llm.yielded[0] < len(long_reply)  # the LLM itself stopped, not just its reader
    assert llm.running == 0 and call.tts.running == 0

    # Turn 1 is over (done + metrics) before turn 2 is answered; no turn-1 audio after it.
    assert call.index(lambda e: e == first) < call.index(
        lambda e: isinstance(e, Transcript) and e.turn_id == 2
    )
    assert all(call.sent.index(f) < call.sent.index(first) for f in call.frames(1))
    seqs = [f.seq for f in call.frames()]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert first.last_seq == call.frames(1)[-1].seq
    (metrics1,) = [m for m in call.of(TurnMetrics) if m.turn_id == 1]
    assert metrics1.metrics["status"] == "cancelled"
    assert_monotonic_stages(metrics1.metrics, complete=False)
    assert call.counted("cancelled") == 1 and call.counted("completed") == 1


async def test_close_during_a_reply_cancels_it_and_leaves_nothing_running(
    make_call: Callable[..., Call],
) -> None:
    llm = FakeLlm(["word "] * 200, delay_s=0.005)
    call = make_call(llm=llm)
    await call.say()
    await call.until(lambda: call.frames(1))
    await asyncio.wait_for(call.session.close(), 1.0)

    assert others_running() == []
    assert llm.running == 0 and call.tts.running == 0
    assert llm.yielded[0] < 200
    assert llm.forgotten == ["call-1"]
    assert call.session.turns[-1]["status"] == "cancelled"
    assert call.counted("cancelled") == 1
    # Nothing is sent on a closed call, not even response.done.
    sent = len(call.sent)
    await asyncio.sleep(0.05)
    assert len(call.sent) == sent
    assert call.done(1) is None


async def test_close_when_idle(make_call: Callable[..., Call]) -> None:
    call = make_call()
    await call.session.close()
    assert call.llm.forgotten == ["call-1"] and others_running() == []


async def test_an_empty_transcript_ends_the_turn_without_a_reply(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(stt=FakeStt("  ...  "))
    await call.say()
    await call.idle()
    assert call.of(Transcript) == [Transcript(1, "...")]
    assert call.done(1) == ResponseDone(
        1, "empty", "", 0.0, None, None, "no words in the transcript"
    )
    assert call.of(ResponseTextDelta) == [] and call.frames() == []
    assert call.llm.calls == [] and call.session.history.turns == []
    (metrics,) = call.of(TurnMetrics)
    assert metrics.metrics["status"] == "empty"
    assert call.counted("empty") == 1


async def test_an_stt_failure_is_reported_and_the_call_goes_on(
    make_call: Callable[..., Call], caplog: pytest.LogCaptureFixture
) -> None:
    call = make_call(stt=FakeStt(RuntimeError("decoder exploded"), "are you there"))
    await call.say()
    await call.idle()
    (error,) = call.of(ErrorEvent)
    assert error.code == "turn_failed" and "RuntimeError: decoder exploded" in error.message
    done = call.done(1)
    assert done is not None and done.status == "failed"
    assert call.index(lambda e: e == error) < call.index(lambda e: e == done)
    assert "turn 1 of call-1 failed" in caplog.text

    await call.say()
    await call.idle()
    second = call.done(2)
    assert second is not None and second.status == "completed"
    assert [m.content for m in call.session.history.turns] == ["are you there", "Hello there."]
    assert call.counted("failed") == 1 and call.counted("completed") == 1


async def test_silence_and_short_blips_make_no_turn(make_call: Callable[..., Call]) -> None:
    call = make_call()
    await call.push(silence(40))
    await call.push(np.concatenate([speech(2), silence(20), speech(1), silence(20)]))
    await call.idle()
    assert call.sent == [] and call.stt.calls == []


async def test_updated_turn_config_applies_from_the_next_turn(
    make_call: Callable[..., Call],
) -> None:
    call = make_call()
    call.session.update_turn_config(call.config.turn.model_copy(update={"silence_ms": 96}))
    await call.say(silence_windows=5)  # 3 windows of silence now end the turn
    await call.idle()
    assert call.of(SpeechStopped) == [SpeechStopped(12 * 32.0, 1)]


# -- known bugs ----------------------------------------------------------------


async def test_speech_stopped_comes_before_the_next_speech_started(
    make_call: Callable[..., Call],
) -> None:
    call = make_call()
    await call.push(speech(12), frame=W)
    await call.push(silence(4), frame=W)
    # One 704 ms frame (the protocol accepts up to 1000 ms): the end of turn 1 and turn 2's start.
    await call.push(np.concatenate([silence(12), speech(10)]), frame=22 * W)
    await call.push(silence(30))
    await call.idle()
    vad = [e for e in call.sent if isinstance(e, SpeechStarted | SpeechStopped)]
    assert [type(e) for e in vad] == [SpeechStarted, SpeechStopped, SpeechStarted, SpeechStopped]


async def test_barge_in_during_the_first_clause_is_prompt(make_call: Callable[..., Call]) -> None:
    llm = FakeLlm(
        ["Once", " upon", " a", " time", ",", *[" word"] * 100], ["Okay", "."], delay_s=0.005
    )
    tts = FakeTts(delay_s=2.0)  # the first chunk of audio is far off
    call = make_call(stt=FakeStt("tell me a story", "stop"), llm=llm, tts=tts)
    await call.say()
    await call.until(lambda: tts.running)
    await asyncio.sleep(0.05)  # the LLM thread is now waiting on the gate
    started = time.monotonic()
    await call.say()  # barge-in: turn 1 is cancelled before any of its audio was made
    await call.until(lambda: call.done(1) is not None)
    assert time.monotonic() - started < 0.4


async def test_close_during_stt_waits_for_the_stt_job(make_call: Callable[..., Call]) -> None:
    gate = threading.Event()
    stt = FakeStt("hello", gate=gate)
    call = make_call(stt=stt)
    try:
        await call.say()
        await call.until(lambda: stt.running)
        threading.Timer(0.2, gate.set).start()  # the job can't be interrupted; it ends soon
        await asyncio.wait_for(call.session.close(), 1.0)
        assert not stt.running, "the STT job outlived close()"
        assert others_running() == []
    finally:
        gate.set()
