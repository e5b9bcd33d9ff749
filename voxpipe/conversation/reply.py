"""One answer to one user turn: STT -> LLM -> clause chunker -> TTS -> paced frames.

A reply may start *held*: preemptive work begun during the caller's pause,
before the end of the turn is certain. A held reply computes everything but
sends nothing (events and audio wait) until the session confirms it, or is
discarded cheaply when the caller goes on talking. Once playing, a reply can
be paused (the caller may be starting to talk), resumed (it was only a
backchannel) or interrupted (barge-in): the LLM and TTS stop, the client is
told to clear its buffer, and the text kept is what the caller heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voxpipe.audio.framer import Pcm16Framer
from voxpipe.audio.pcm import float_to_pcm16
from voxpipe.audio.resample import StreamResampler
from voxpipe.conversation.chunker import ClauseChunker
from voxpipe.conversation.events import (
    AudioOut,
    ErrorCode,
    ErrorEvent,
    Event,
    PlaybackClear,
    ResponseDone,
    ResponseTextDelta,
    SendAudio,
    SendEvent,
    Transcript,
    TurnMetrics,
)
from voxpipe.conversation.playback import Pacer, PlaybackTracker
from voxpipe.conversation.record import CallRecorder
from voxpipe.conversation.reply_status import ReplyOutcome, ReplyStatus
from voxpipe.conversation.services import Services
from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage
from voxpipe.engines.runner import EngineBusy, JobClock
from voxpipe.observability.logs import log_context
from voxpipe.observability.stages import StageTimer
from voxpipe.observability.timeline import BargeIn, TurnTimeline
from voxpipe.observability.tracing import NO_CALL, CallTrace

log = logging.getLogger("voxpipe.reply")

TTS_MARGIN_NS = 300_000_000  # a later clause is due this long before its audio is needed


@dataclass
class ReplyContext:
    """What a reply borrows from its session."""

    session_id: str
    recorder: CallRecorder  # where the turns are recorded
    services: Services
    send_event: SendEvent
    send_audio: SendAudio
    next_seq: Callable[[], int]
    pacer: Pacer
    output_rate: int
    history: Callable[[], list[ChatMessage]]
    closed: bool = False  # the call is over: nothing more is sent
    trace: CallTrace = NO_CALL  # the call's span: each reply's turn span is its child


@dataclass
class Reply:
    ctx: ReplyContext
    timeline: TurnTimeline
    audio: np.ndarray | None  # None: answer the history as it stands, no new caller turn
    held: bool = False
    previous: Reply | None = None
    cancel: CancelToken = field(default_factory=CancelToken)
    transcript: str = ""
    generated: str = ""
    heard_text: str | None = None  # set when interrupted
    heard_ms: float | None = None
    audio_ns: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    barge_in: BargeIn | None = None
    on_finish: Callable[[Reply], None] | None = None

    record: dict[str, Any] | None = None
    last_frame_ns: int = 0  # when the latest frame was handed to the transport
    respond: bool = True  # False: only transcribe; the turn joins the history unanswered

    def __post_init__(self) -> None:
        self.tracker = PlaybackTracker(self.ctx.output_rate)
        services = self.ctx.services
        self.stages = StageTimer(
            self.timeline, services.metrics, services.config.deadlines, self.ctx.trace
        )
        self._outcome = ReplyOutcome()  # the status: only this reply's methods move it
        self._paused = False
        self._sendable = asyncio.Event()  # confirmed, not paused (or cancelled: wake and stop)
        self._held_events: list[Event] = []
        self._filler_frames = 0  # frames at the head of the reply that are the filler
        self._decided = asyncio.Event()  # a held reply was confirmed or thrown away
        self.cancel.on_cancel(self._sendable.set)
        self.cancel.on_cancel(self._decided.set)
        self._update_sendable()
        # The task copies the context now: every line it logs, and its engines' jobs, carry
        # the ids (docs/observability.md#logs), whichever task started the reply.
        ids = {"call_id": self.ctx.recorder.call.call_id, "session_id": self.ctx.session_id}
        with log_context(**ids, turn_id=self.turn_id):
            self.task: asyncio.Task[None] = asyncio.create_task(
                self._run(), name=f"reply-{self.ctx.session_id}-{self.timeline.turn_id}"
            )

    @property
    def turn_id(self) -> int:
        return self.timeline.turn_id

    @property
    def active(self) -> bool:
        return not self.task.done() and not self.cancel.cancelled

    @property
    def status(self) -> ReplyStatus:
        return self._outcome.status

    def _update_sendable(self) -> None:
        if self.cancel.cancelled or (not self.held and not self._paused):
            self._sendable.set()
        else:
            self._sendable.clear()

    # -- control from the session -------------------------------------------

    async def confirm(self, speech_end_ns: int) -> None:
        """The turn has ended as the held reply assumed: release what it computed."""
        self.stages.confirmed(speech_end_ns)
        if self.timeline.has("stt_done") and self.transcript:
            self.ctx.recorder.message(self.turn_id, "user", self.transcript)
        # Events the task emits while these sends wait are queued behind them, in order.
        while self._held_events:
            await self.ctx.send_event(self._held_events.pop(0))
        self.held = False
        self._update_sendable()
        self._decided.set()

    def discard(self) -> None:
        """Speech resumed: throw the held work away."""
        self._outcome.move(ReplyStatus.DISCARDED, "speech resumed before the end of the turn")
        self.cancel.cancel()

    def pause(self, now_ns: int) -> None:
        if not self._paused:
            self._paused = True
            self._update_sendable()
            if self.barge_in is not None and not self.barge_in.paused_ns:
                self.barge_in.paused_ns = now_ns

    def resume(self) -> None:
        self._paused = False
        self._update_sendable()

    async def interrupt(self, now_ns: int) -> None:
        """Barge-in: stop generating and sending; keep what the caller heard."""
        if self.cancel.cancelled:
            return
        if self.barge_in is not None:
            self.barge_in.decided_ns = now_ns
            self.barge_in.last_frame_ns = self.last_frame_ns
        heard = self.tracker.heard_samples(now_ns)
        self.heard_text = self.tracker.text_until(heard)
        self.heard_ms = round(heard * 1000 / self.ctx.output_rate, 1)
        self._outcome.move(ReplyStatus.INTERRUPTED, "the caller spoke over the reply")
        self.cancel.cancel()
        self.ctx.pacer.flushed(now_ns)
        await self.ctx.send_event(PlaybackClear(self.turn_id, self.last_seq))

    async def cancel_by_client(self, now_ns: int) -> None:
        """The client cancelled the reply: stopped as by a barge-in, reported as cancelled."""
        await self.interrupt(now_ns)
        self._outcome.move(ReplyStatus.CANCELLED, "cancelled by the client")

    def playback_ack(self, seq: int) -> bool:
        return self.tracker.ack(seq)

    async def wait(self) -> None:
        await asyncio.gather(self.task, return_exceptions=True)

    # -- the pipeline ---------------------------------------------------------

    async def _emit(self, event: Event) -> None:
        if self.held:
            self._held_events.append(event)
        else:
            await self.ctx.send_event(event)

    async def _run(self) -> None:
        try:
            if self.previous is not None:
                await self.previous.wait()
                self.previous = None  # else every reply of the call stays reachable
            if self.audio is None:  # a client asked for a reply (OpenAI response.create)
                await self._speak()
                self._outcome.ran_out(self.cancel.cancelled)
                return
            clock = JobClock()
            with self.stages.stt(clock):
                transcript = await self.ctx.services.stt.transcribe(self.audio, clock)
            self.transcript = transcript.text.strip()
            self.timeline.counters["transcript"] = self.transcript
            if not self.held and self.transcript:
                self.ctx.recorder.message(self.turn_id, "user", self.transcript)
            await self._emit(Transcript(self.turn_id, self.transcript))
            if self.cancel.cancelled:  # discarded or interrupted meanwhile: no LLM, no TTS
                self._outcome.ran_out(cancelled=True)
                return
            if not any(ch.isalnum() for ch in self.transcript):
                self._outcome.move(ReplyStatus.EMPTY, "no words in the transcript")
                return
            if not self.respond:  # the client commits turns and asks for replies itself
                self._outcome.move(ReplyStatus.COMMITTED, "transcribed; no reply was asked for")
                return
            await self._speak()
            self._outcome.ran_out(self.cancel.cancelled)
        except asyncio.CancelledError:
            self._outcome.move(ReplyStatus.CANCELLED, self._outcome.reason or "session closed")
            raise
        except EngineBusy as error:
            self._outcome.move(ReplyStatus.FAILED, str(error))
            await self._emit(ErrorEvent.of(ErrorCode.ENGINE_BUSY, str(error)))
        except Exception as error:
            log.exception("turn %s of %s failed", self.turn_id, self.ctx.session_id)
            self._outcome.move(ReplyStatus.FAILED, f"{type(error).__name__}: {error}")
            await self._emit(ErrorEvent.of(ErrorCode.TURN_FAILED, self._outcome.reason))
        finally:
            if self.barge_in is not None:
                self.barge_in.cancelled_ns = time.monotonic_ns()
            if self.held:  # an empty or failed held turn reports nothing until it is decided
                await self._decided.wait()
            await self._finish()

    async def _speak(self) -> None:
        """LLM -> chunker -> TTS -> paced frames, the three stages running concurrently."""
        services = self.ctx.services
        cfg = services.config
        stages, cancel, turn_id = self.stages, self.cancel, self.turn_id
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
        messages = self.ctx.history()
        if self.audio is not None:  # else the history already ends with what to answer
            messages.append(ChatMessage("user", self.transcript))
        spoken: list[str] = []
        first_token = asyncio.Event()
        cancel.on_cancel(first_token.set)

        async def queue_clause(clause: str) -> None:
            stages.clause(clause)
            await clauses.put(clause)

        async def think() -> None:
            chunker = ClauseChunker(cfg.chunker)
            with stages.llm(llm_clock, usage):
                stream = services.llm.stream(
                    self.ctx.session_id,
                    messages,
                    cancel,
                    usage,
                    llm_clock,
                    gate=llm_gate,
                    trace_headers=stages.trace_headers(),
                )
                try:
                    async with contextlib.aclosing(stream):
                        async for delta in stream:
                            if cancel.cancelled:
                                break
                            stages.token()
                            first_token.set()
                            self.generated += delta
                            await self._emit(ResponseTextDelta(turn_id, delta))
                            for clause in chunker.push(delta):
                                await queue_clause(clause)
                    if not cancel.cancelled:
                        for clause in chunker.flush():
                            await queue_clause(clause)
                finally:
                    first_token.set()  # done or failed: no filler from here on
                    await clauses.put(None)

        async def voice() -> None:
            resampler = StreamResampler(services.tts.sample_rate, self.ctx.output_rate)
            framer = Pcm16Framer(self.ctx.output_rate * cfg.audio.out_frame_ms // 1000)
            try:
                while (clause := await clauses.get()) is not None:
                    if cancel.cancelled:
                        continue
                    clock = JobClock()
                    if not spoken:
                        llm_gate.clear()
                    stream = services.tts.synthesize(
                        clause,
                        cancel,
                        clock,
                        deadline_ns=self._dry_at_ns(frames.qsize()) if spoken else None,
                    )
                    self.tracker.add_clause(clause)
                    with stages.tts(clock):
                        async with contextlib.aclosing(stream):
                            async for chunk in stream:
                                stages.tts_chunk()
                                llm_gate.set()
                                audio = resampler.process(chunk.astype(np.float32) / 32768.0)
                                self.tracker.add_samples(audio.shape[0])
                                for frame in framer.push(float_to_pcm16(audio)):
                                    await frames.put(frame)
                    spoken.append(clause)
                if not cancel.cancelled:
                    tail = float_to_pcm16(resampler.process(np.zeros(0, np.float32), last=True))
                    for frame in [*framer.push(tail), *framer.flush()]:
                        await frames.put(frame)
            finally:
                llm_gate.set()
                await frames.put(None)

        async def play() -> None:
            ns_per_byte = 1e9 / (2 * self.ctx.output_rate)
            pacer = self.ctx.pacer
            while (frame := await frames.get()) is not None:
                if cancel.cancelled:
                    continue
                await self._wait_until_sendable()
                delay = pacer.delay_s(time.monotonic_ns())
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._wait_until_sendable()
                if cancel.cancelled:
                    continue
                seq = self.ctx.next_seq()
                # Before the send, which may wait: a barge-in meanwhile must clear this frame too.
                self.first_seq = self.first_seq or seq
                self.last_seq = seq
                await self.ctx.send_audio(AudioOut(seq, turn_id, frame))
                now = time.monotonic_ns()
                filler = self._filler_frames > 0
                if filler:
                    self._filler_frames -= 1
                stages.audio_sent(now, filler)
                self.last_frame_ns = now
                duration_ns = int(len(frame) * ns_per_byte)
                self.audio_ns += duration_ns
                self.tracker.sent(seq, len(frame) // 2, pacer.sent(now, duration_ns))

        async def fill_silence() -> None:
            """Say the filler if the first token misses its deadline (the frames queue is
            still empty then: no token, no clause, no reply audio)."""
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(first_token.wait(), stages.first_token_wait_s())
                return
            stages.missed("llm_first_token")
            filler = services.filler
            if cancel.cancelled or filler is None or not cfg.deadlines.filler:
                return
            stages.filler(cfg.deadlines.filler)
            resampler = StreamResampler(filler.rate, self.ctx.output_rate)
            audio = resampler.process(filler.audio, last=True)
            framer = Pcm16Framer(self.ctx.output_rate * cfg.audio.out_frame_ms // 1000)
            pcm = [*framer.push(float_to_pcm16(audio)), *framer.flush(pad=True)]
            self.tracker.add_clause("", sum(len(f) // 2 for f in pcm))
            self._filler_frames = len(pcm)
            for frame in pcm:
                await frames.put(frame)

        try:
            async with asyncio.timeout(cfg.deadlines.turn_s), asyncio.TaskGroup() as group:
                group.create_task(think())
                group.create_task(voice())
                group.create_task(play())
                group.create_task(fill_silence())
        except TimeoutError:
            stages.missed("turn")
            cancel.cancel()
            self._outcome.move(ReplyStatus.FAILED, f"reply exceeded {cfg.deadlines.turn_s:g} s")
            await self._emit(ErrorEvent.of(ErrorCode.DEADLINE_EXCEEDED, self._outcome.reason))
        finally:
            stages.llm_done(llm_clock, usage)

    def _dry_at_ns(self, frames_waiting: int) -> int:
        """When the client will have played everything sent and queued: a later clause
        is due a little before that, so it can wait for a first clause of another call."""
        cfg = self.ctx.services.config.audio
        now = time.monotonic_ns()
        queued_ns = frames_waiting * cfg.out_frame_ms * 1_000_000
        return max(now, self.ctx.pacer.ends_at_ns) + queued_ns - TTS_MARGIN_NS

    async def _wait_until_sendable(self) -> None:
        """Held replies wait for confirmation, paused ones for resume; a cancel wakes both."""
        await self._sendable.wait()

    # -- the end ------------------------------------------------------------

    @property
    def kept_text(self) -> str:
        """The assistant text the history keeps: what was heard, or all of it."""
        return (self.heard_text if self.heard_text is not None else self.generated).strip()

    async def _finish(self) -> None:
        tl = self.timeline
        self.stages.done(self.status, self.kept_text)  # a discarded turn's span says so
        if self.status is ReplyStatus.DISCARDED:
            return  # held work thrown away: the caller never knew of it
        self.stages.split(self.tracker.started_playing_ns())
        tl.counters.update(
            status=self.status,
            reply=self.kept_text,
            generated=self.generated.strip(),
            session_id=self.ctx.session_id,
            preempted=tl.counters.get("preempted", False),
        )
        # Only an interrupt is a barge-in: a backchannel's pause is not reported.
        if self.barge_in is not None and self.status is ReplyStatus.INTERRUPTED:
            tl.counters["barge_in"] = self.barge_in.as_dict()
        record: dict[str, Any] = tl.as_dict()
        self.record = record
        if self.on_finish is not None:
            self.on_finish(self)
        services = self.ctx.services
        services.metrics.observe_turn(tl, self.status)
        if self.kept_text:
            self.ctx.recorder.message(self.turn_id, "assistant", self.kept_text, self.status)
        self.ctx.recorder.turn_finished(record)
        await asyncio.to_thread(services.turn_log.write, record)
        if self.ctx.closed:
            return  # nothing is sent on a closed call, not even response.done
        with contextlib.suppress(Exception):  # the connection may be gone: nothing to tell
            await self._emit(
                ResponseDone(
                    self.turn_id,
                    self.status,
                    self.kept_text,
                    round(self.audio_ns / 1e6, 1),
                    self.first_seq,
                    self.last_seq,
                    self._outcome.reason,
                    generated_text=self.generated.strip(),
                    heard_ms=self.heard_ms,
                )
            )
            await self._emit(TurnMetrics(self.turn_id, record))
