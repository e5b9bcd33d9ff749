"""One call: inbound audio in, turns detected, replies spoken back.

Audio flows one way: transport -> :meth:`Session.push_audio` -> resample ->
VAD -> turn detector; each finished user turn starts one reply task:
STT -> LLM (streamed) -> clause chunker -> TTS (streamed) -> paced outbound
frames. A new user turn supersedes a reply still in flight; closing the
session cancels everything it started and waits for it, so no task or engine
job outlives the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from voxpipe.audio.pcm import float_to_pcm16, pcm16_to_float
from voxpipe.audio.resample import StreamResampler
from voxpipe.config import Config, TurnConfig
from voxpipe.conversation.chunker import ClauseChunker
from voxpipe.conversation.events import (
    AudioOut,
    ErrorCode,
    ErrorEvent,
    Event,
    ResponseDone,
    ResponseTextDelta,
    SpeechStarted,
    SpeechStopped,
    Transcript,
    TurnMetrics,
)
from voxpipe.conversation.history import History
from voxpipe.conversation.turn_detector import TurnDetector, TurnEventKind
from voxpipe.engines.base import STT_SAMPLE_RATE, CancelToken, Engines, LlmUsage
from voxpipe.engines.runner import EngineBusy, EngineRunner, JobClock
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.timeline import TurnTimeline
from voxpipe.observability.turn_log import TurnLog

log = logging.getLogger("voxpipe.session")

SendEvent = Callable[[Event], Awaitable[None]]
SendAudio = Callable[[AudioOut], Awaitable[None]]


@dataclass(frozen=True)
class Runners:
    """One runner per engine: the server's whole thread budget."""

    vad: EngineRunner
    stt: EngineRunner
    llm: EngineRunner
    tts: EngineRunner

    def close(self) -> None:
        for runner in (self.vad, self.stt, self.llm, self.tts):
            runner.close()


@dataclass(frozen=True)
class Services:
    """What every session shares: engines, their runners, metrics, the turn log."""

    config: Config
    engines: Engines
    runners: Runners
    metrics: Metrics
    turn_log: TurnLog


class _Playback:
    """Models the client's playback buffer so we send at most ``lead`` ahead of real time."""

    def __init__(self, lead_ms: int) -> None:
        self.lead_ns = lead_ms * 1_000_000
        self.ends_at_ns = 0  # when the client will have played everything sent so far

    def delay_s(self, now_ns: int) -> float:
        return max(0.0, (self.ends_at_ns - now_ns - self.lead_ns) / 1e9)

    def sent(self, now_ns: int, duration_ns: int) -> None:
        self.ends_at_ns = max(self.ends_at_ns, now_ns) + duration_ns


class Session:
    def __init__(
        self,
        session_id: str,
        services: Services,
        send_event: SendEvent,
        send_audio: SendAudio,
        input_sample_rate: int,
        output_sample_rate: int,
        turn_config: TurnConfig | None = None,
        system_prompt: str | None = None,
    ) -> None:
        self.id = session_id
        self.services = services
        self.cfg = services.config
        self._send_event = send_event
        self._send_audio = send_audio
        self.input_sample_rate = input_sample_rate
        self.output_sample_rate = output_sample_rate
        self.turn_config = turn_config or self.cfg.turn
        engines = services.engines
        self._vad = engines.vad.new_stream()
        self._window = engines.vad.window_samples
        self._detector = TurnDetector(self.turn_config, self._window, STT_SAMPLE_RATE)
        self._next_detector: TurnDetector | None = None
        self._resampler = StreamResampler(input_sample_rate, STT_SAMPLE_RATE)
        self._pending = np.zeros(0, dtype=np.float32)
        # (end sample of a window, arrival time): maps the sample clock to monotonic time
        self._arrivals: deque[tuple[int, int]] = deque(maxlen=4096)
        self._received_samples = 0
        self.history = History(system_prompt or self.cfg.llm.system_prompt)
        self._turn_ids = 0
        self._seq = 0
        self._reply: asyncio.Task[None] | None = None
        self._reply_cancel: CancelToken | None = None
        self._playback = _Playback(self.cfg.audio.playback_lead_ms)
        self.closed = False
        self.turns: list[dict[str, object]] = []

    # -- inbound ------------------------------------------------------------

    async def push_audio(self, pcm: bytes) -> None:
        """Feed inbound PCM16 at the session's input rate."""
        arrived = time.monotonic_ns()
        audio = self._resampler.process(pcm16_to_float(pcm))
        buf = np.concatenate([self._pending, audio]) if self._pending.size else audio
        n = buf.shape[0] // self._window
        self._pending = buf[n * self._window :]
        if n == 0:
            return
        windows = buf[: n * self._window]
        clock = JobClock()
        probs = await self.services.runners.vad.call(lambda: self._vad.process(windows), clock)
        for i, prob in enumerate(probs):
            window = windows[i * self._window : (i + 1) * self._window]
            self._received_samples += self._window
            self._arrivals.append((self._received_samples, arrived))
            if self._next_detector is not None and not self._detector.in_speech:
                self._next_detector.samples = self._detector.samples
                self._detector, self._next_detector = self._next_detector, None
            event = self._detector.push(window, prob)
            if event is None:
                continue
            audio_ms = event.sample * 1000 / STT_SAMPLE_RATE
            if event.kind is TurnEventKind.SPEECH_STARTED:
                await self._send_event(SpeechStarted(round(audio_ms, 1)))
            elif event.audio is not None:
                await self._send_event(SpeechStopped(round(audio_ms, 1), self._turn_ids + 1))
                self._start_reply(event.audio, self._arrival_of(event.sample))

    def update_turn_config(self, turn_config: TurnConfig) -> None:
        """New end-pointing settings; a turn already in speech finishes under the old ones."""
        self.turn_config = turn_config
        self._next_detector = TurnDetector(turn_config, self._window, STT_SAMPLE_RATE)

    def _arrival_of(self, sample: int) -> int:
        for end, arrived in self._arrivals:
            if end >= sample:
                return arrived
        return time.monotonic_ns()

    def _start_reply(self, audio: np.ndarray, speech_end_ns: int) -> None:
        self._turn_ids += 1
        timeline = TurnTimeline(self._turn_ids)
        timeline.mark("speech_end", speech_end_ns)
        timeline.mark("eot")
        previous, previous_cancel = self._reply, self._reply_cancel
        cancel = CancelToken()
        self._reply_cancel = cancel
        self._reply = asyncio.create_task(
            self._reply_to(timeline, audio, cancel, previous, previous_cancel),
            name=f"reply-{self.id}-{self._turn_ids}",
        )

    # -- one reply ------------------------------------------------------------

    async def _reply_to(
        self,
        tl: TurnTimeline,
        audio: np.ndarray,
        cancel: CancelToken,
        previous: asyncio.Task[None] | None,
        previous_cancel: CancelToken | None,
    ) -> None:
        turn_id = tl.turn_id
        if previous is not None and not previous.done():
            assert previous_cancel is not None
            previous_cancel.cancel()
            await asyncio.gather(previous, return_exceptions=True)
        reply = _ReplyState()
        status, reason = "completed", ""
        try:
            clock = JobClock()
            stt = self.services.engines.stt
            transcript = await self.services.runners.stt.call(lambda: stt.transcribe(audio), clock)
            tl.mark("stt_done")
            tl.compute_s["stt"], tl.queue_s["stt"] = clock.compute_s, clock.queue_s
            text = transcript.text.strip()
            tl.counters["transcript"] = text
            await self._send_event(Transcript(turn_id, text))
            if not _has_words(text):
                status, reason = "empty", "no words in the transcript"
                return
            self.history.add_user(text)
            await self._speak(tl, cancel, reply)
            if cancel.cancelled:
                status, reason = "cancelled", "superseded by a new user turn"
        except asyncio.CancelledError:
            status, reason = "cancelled", "session closed"
            raise
        except EngineBusy as error:
            status, reason = "failed", str(error)
            await self._send_event(ErrorEvent.of(ErrorCode.ENGINE_BUSY, str(error)))
        except Exception as error:
            log.exception("turn %s of %s failed", turn_id, self.id)
            status, reason = "failed", f"{type(error).__name__}: {error}"
            await self._send_event(ErrorEvent.of(ErrorCode.TURN_FAILED, reason))
        finally:
            if reply.text:
                self.history.add_assistant(reply.text)
            await self._finish(tl, reply, status, reason)

    async def _speak(self, tl: TurnTimeline, cancel: CancelToken, reply: _ReplyState) -> None:
        """LLM -> chunker -> TTS -> paced frames, the three stages running concurrently."""
        cfg = self.cfg
        clauses: asyncio.Queue[str | None] = asyncio.Queue(maxsize=64)
        frames: asyncio.Queue[bytes | None] = asyncio.Queue(
            maxsize=max(1, cfg.audio.outbound_buffer_ms // cfg.audio.out_frame_ms)
        )
        usage = LlmUsage()
        llm_clock = JobClock()
        # Cleared while the first clause is synthesized: the caller is waiting for that audio,
        # and the LLM (already ahead of speech) would otherwise take both cores from the TTS.
        llm_gate = threading.Event()
        llm_gate.set()
        cancel.on_cancel(llm_gate.set)
        turn_id = tl.turn_id
        messages = self.history.messages()

        async def queue_clause(clause: str) -> None:
            if not tl.has("first_clause"):
                tl.mark("first_clause")
                tl.counters["first_clause"] = clause
                if llm_clock.started_ns:
                    first_clause_ns = tl.marks_ns["first_clause"] - llm_clock.started_ns
                    tl.compute_s["llm_first_clause"] = first_clause_ns / 1e9
            await clauses.put(clause)

        async def think() -> None:
            chunker = ClauseChunker(cfg.chunker)
            engine = self.services.engines.llm
            tl.mark("llm_request")
            stream = self.services.runners.llm.stream(
                lambda: engine.stream(self.id, messages, cancel, usage), llm_clock, gate=llm_gate
            )
            try:
                async with contextlib.aclosing(stream):
                    async for delta in stream:
                        if cancel.cancelled:
                            break
                        tl.mark("llm_first_token")
                        reply.generated += delta
                        await self._send_event(ResponseTextDelta(turn_id, delta))
                        for clause in chunker.push(delta):
                            await queue_clause(clause)
                if not cancel.cancelled:
                    for clause in chunker.flush():
                        await queue_clause(clause)
            finally:
                await clauses.put(None)

        async def voice() -> None:
            engine = self.services.engines.tts
            resampler = StreamResampler(engine.sample_rate, self.output_sample_rate)
            framer = _Framer(self.output_sample_rate * cfg.audio.out_frame_ms // 1000)
            try:
                while (clause := await clauses.get()) is not None:
                    if cancel.cancelled:
                        continue
                    clock = JobClock()
                    if not reply.spoken_clauses:
                        llm_gate.clear()
                    stream = self.services.runners.tts.stream(
                        functools.partial(engine.synthesize, clause, cancel), clock
                    )
                    async with contextlib.aclosing(stream):
                        async for chunk in stream:
                            tl.mark("tts_first_chunk")
                            llm_gate.set()
                            audio = resampler.process(chunk.astype(np.float32) / 32768.0)
                            for frame in framer.push(float_to_pcm16(audio)):
                                await frames.put(frame)
                    tl.compute_s.setdefault("tts_first", clock.compute_s)
                    tl.queue_s.setdefault("tts_first", clock.queue_s)
                    tl.compute_s["tts_total"] = tl.compute_s.get("tts_total", 0.0) + clock.compute_s
                    reply.spoken_clauses.append(clause)
                if not cancel.cancelled:
                    tail = float_to_pcm16(resampler.process(np.zeros(0, np.float32), last=True))
                    for frame in [*framer.push(tail), *framer.flush()]:
                        await frames.put(frame)
            finally:
                llm_gate.set()
                await frames.put(None)

        async def play() -> None:
            ns_per_byte = 1e9 / (2 * self.output_sample_rate)
            while (frame := await frames.get()) is not None:
                if cancel.cancelled:
                    continue
                delay = self._playback.delay_s(time.monotonic_ns())
                if delay > 0:
                    await asyncio.sleep(delay)
                if cancel.cancelled:
                    continue
                self._seq += 1
                await self._send_audio(AudioOut(self._seq, turn_id, frame))
                tl.mark("first_audio_sent")
                reply.first_seq = reply.first_seq or self._seq
                reply.last_seq = self._seq
                duration_ns = int(len(frame) * ns_per_byte)
                reply.audio_ns += duration_ns
                self._playback.sent(time.monotonic_ns(), duration_ns)

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(think())
                group.create_task(voice())
                group.create_task(play())
        finally:
            if llm_clock.started_ns and llm_clock.first_item_ns:
                tl.compute_s["llm_ttft"] = (llm_clock.first_item_ns - llm_clock.started_ns) / 1e9
            tl.queue_s["llm"] = llm_clock.queue_s
            tl.compute_s["llm_total"] = llm_clock.compute_s
            tl.counters["llm"] = {
                "prompt_tokens": usage.prompt_tokens,
                "reused_tokens": usage.reused_tokens,
                "prefill_tokens": usage.prefill_tokens,
                "completion_tokens": usage.completion_tokens,
                "state_restored": usage.state_restored,
                "finish_reason": usage.finish_reason,
            }
            reply.text = reply.generated.strip()

    async def _finish(self, tl: TurnTimeline, reply: _ReplyState, status: str, reason: str) -> None:
        tl.mark("response_done")
        tl.counters["status"] = status
        tl.counters["reply"] = reply.text
        tl.counters["session_id"] = self.id
        record = tl.as_dict()
        self.turns.append(record)
        self.services.metrics.observe_turn(tl, status)
        await asyncio.to_thread(self.services.turn_log.write, record)
        if self.closed:
            return
        with contextlib.suppress(Exception):  # the connection may be gone: nothing to tell
            await self._send_event(
                ResponseDone(
                    tl.turn_id,
                    status,
                    reply.text,
                    round(reply.audio_ns / 1e6, 1),
                    reply.first_seq,
                    reply.last_seq,
                    reason,
                )
            )
            await self._send_event(TurnMetrics(tl.turn_id, record))

    # -- lifecycle ------------------------------------------------------------

    async def close(self) -> None:
        """Cancel the reply in flight and wait until its engine work has stopped."""
        self.closed = True
        if self._reply_cancel is not None:
            self._reply_cancel.cancel()
        if self._reply is not None and not self._reply.done():
            self._reply.cancel()
            await asyncio.gather(self._reply, return_exceptions=True)
        self.services.engines.llm.forget(self.id)

    async def wait_idle(self) -> None:
        """Wait for the reply in flight, if any (tests and graceful shutdown)."""
        if self._reply is not None:
            await asyncio.gather(self._reply, return_exceptions=True)


@dataclass
class _ReplyState:
    generated: str = ""
    text: str = ""
    audio_ns: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    spoken_clauses: list[str] = field(default_factory=list)


class _Framer:
    """Cut a byte stream of PCM16 into fixed-size frames; the last one may be short."""

    def __init__(self, samples_per_frame: int) -> None:
        self.size = samples_per_frame * 2
        self._buf = bytearray()

    def push(self, pcm: bytes) -> list[bytes]:
        self._buf += pcm
        out = []
        while len(self._buf) >= self.size:
            out.append(bytes(self._buf[: self.size]))
            del self._buf[: self.size]
        return out

    def flush(self) -> list[bytes]:
        rest, self._buf = bytes(self._buf), bytearray()
        return [rest] if rest else []


def _has_words(text: str) -> bool:
    return any(ch.isalnum() for ch in text)
