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
import functools
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
from voxpipe.conversation.reply_status import ReplyOutcome, ReplyStatus
from voxpipe.conversation.services import CallRecord, Services
from voxpipe.engines.base import CancelToken, ChatMessage, LlmUsage
from voxpipe.engines.runner import EngineBusy, JobClock
from voxpipe.observability.timeline import BargeIn, TurnTimeline

log = logging.getLogger("voxpipe.reply")

TTS_MARGIN_NS = 300_000_000  # a later clause is due this long before its audio is needed


@dataclass
class ReplyContext:
    """What a reply borrows from its session."""

    session_id: str
    record: CallRecord  # where the turns are recorded
    services: Services
    send_event: SendEvent
    send_audio: SendAudio
    next_seq: Callable[[], int]
    pacer: Pacer
    output_rate: int
    history: Callable[[], list[ChatMessage]]
    closed: bool = False  # the call is over: nothing more is sent


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
        self._outcome = ReplyOutcome()  # the status: only this reply's methods move it
        self._paused = False
        self._sendable = asyncio.Event()  # confirmed, not paused (or cancelled: wake and stop)
        self._held_events: list[Event] = []
        self._filler_frames = 0  # frames at the head of the reply that are the filler
        self._decided = asyncio.Event()  # a held reply was confirmed or thrown away
        self.cancel.on_cancel(self._sendable.set)
        self.cancel.on_cancel(self._decided.set)
        self._update_sendable()
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
        self.timeline.marks_ns["speech_end"] = speech_end_ns
        self.timeline.mark("eot")
        store = self.ctx.services.store
        if store is not None and self.timeline.has("stt_done") and self.transcript:
            store.message(self.ctx.record, self.turn_id, "user", self.transcript)
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
        tl = self.timeline
        services = self.ctx.services
        try:
            if self.previous is not None:
                await self.previous.wait()
                self.previous = None  # else every reply of the call stays reachable
            if self.audio is None:  # a client asked for a reply (OpenAI response.create)
                await self._speak()
                self._outcome.ran_out(self.cancel.cancelled)
                return
            clock = JobClock()
            stt = services.engines.stt
            audio = self.audio
            transcript = await services.runners.stt.call(lambda: stt.transcribe(audio), clock)
            tl.mark("stt_done")
            self._check_deadline("stt", services.config.deadlines.stt_ms)
            tl.compute_s["stt"], tl.queue_s["stt"] = clock.compute_s, clock.queue_s
            self.transcript = transcript.text.strip()
            tl.counters["transcript"] = self.transcript
            if services.store is not None and not self.held and self.transcript:
                services.store.message(self.ctx.record, self.turn_id, "user", self.transcript)
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
        cfg = self.ctx.services.config
        services = self.ctx.services
        tl, cancel, turn_id = self.timeline, self.cancel, self.turn_id
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

        deltas = 0  # LLM deltas (tokens) received: how many the first phrase waited for

        async def queue_clause(clause: str) -> None:
            if not tl.has("first_clause"):
                tl.mark("first_clause")
                tl.counters["first_clause"] = clause
                tl.counters["first_clause_tokens"] = deltas
                if llm_clock.started_ns:
                    first_clause_ns = tl.marks_ns["first_clause"] - llm_clock.started_ns
                    tl.compute_s["llm_first_clause"] = first_clause_ns / 1e9
            await clauses.put(clause)

        async def think() -> None:
            chunker = ClauseChunker(cfg.chunker)
            engine = services.engines.llm
            tl.mark("llm_request")
            stream = services.runners.llm.stream(
                lambda: engine.stream(self.ctx.session_id, messages, cancel, usage),
                llm_clock,
                gate=llm_gate,
            )
            try:
                async with contextlib.aclosing(stream):
                    async for delta in stream:
                        if cancel.cancelled:
                            break
                        tl.mark("llm_first_token")
                        first_token.set()
                        nonlocal deltas
                        deltas += 1
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
            engine = services.engines.tts
            resampler = StreamResampler(engine.sample_rate, self.ctx.output_rate)
            framer = Pcm16Framer(self.ctx.output_rate * cfg.audio.out_frame_ms // 1000)
            try:
                while (clause := await clauses.get()) is not None:
                    if cancel.cancelled:
                        continue
                    clock = JobClock()
                    if not spoken:
                        llm_gate.clear()
                    stream = services.runners.tts.stream(
                        functools.partial(engine.synthesize, clause, cancel),
                        clock,
                        deadline_ns=self._dry_at_ns(frames.qsize()) if spoken else None,
                    )
                    self.tracker.add_clause(clause)
                    async with contextlib.aclosing(stream):
                        async for chunk in stream:
                            tl.mark("tts_first_chunk")
                            llm_gate.set()
                            audio = resampler.process(chunk.astype(np.float32) / 32768.0)
                            self.tracker.add_samples(audio.shape[0])
                            for frame in framer.push(float_to_pcm16(audio)):
                                await frames.put(frame)
                    if clock.first_item_ns:  # the caller waits for the first chunk, not all
                        first_chunk_s = (clock.first_item_ns - clock.started_ns) / 1e9
                        tl.compute_s.setdefault("tts_first", first_chunk_s)
                    tl.queue_s.setdefault("tts_first", clock.queue_s)
                    tl.compute_s["tts_total"] = tl.compute_s.get("tts_total", 0.0) + clock.compute_s
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
                if self._filler_frames > 0:
                    self._filler_frames -= 1
                    tl.mark("filler_sent", now)
                else:
                    if not tl.has("first_audio_sent"):
                        self._check_deadline("tts_first_chunk", cfg.deadlines.tts_first_chunk_ms)
                    tl.mark("first_audio_sent", now)
                self.last_frame_ns = now
                duration_ns = int(len(frame) * ns_per_byte)
                self.audio_ns += duration_ns
                self.tracker.sent(seq, len(frame) // 2, pacer.sent(now, duration_ns))

        async def fill_silence() -> None:
            """Say the filler if the first token misses its deadline (the frames queue is
            still empty then: no token, no clause, no reply audio)."""
            due_ns = tl.marks_ns["speech_end"] + cfg.deadlines.llm_first_token_ms * 1_000_000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    first_token.wait(), max(0.0, (due_ns - time.monotonic_ns()) / 1e9)
                )
                return
            self._missed("llm_first_token")
            filler = self.ctx.services.filler
            if cancel.cancelled or filler is None or not cfg.deadlines.filler:
                return
            services.metrics.fillers.inc()
            tl.counters["filler"] = cfg.deadlines.filler
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
            self._missed("turn")
            cancel.cancel()
            self._outcome.move(ReplyStatus.FAILED, f"reply exceeded {cfg.deadlines.turn_s:g} s")
            await self._emit(ErrorEvent.of(ErrorCode.DEADLINE_EXCEEDED, self._outcome.reason))
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

    def _dry_at_ns(self, frames_waiting: int) -> int:
        """When the client will have played everything sent and queued: a later clause
        is due a little before that, so it can wait for a first clause of another call."""
        cfg = self.ctx.services.config.audio
        now = time.monotonic_ns()
        queued_ns = frames_waiting * cfg.out_frame_ms * 1_000_000
        return max(now, self.ctx.pacer.ends_at_ns) + queued_ns - TTS_MARGIN_NS

    def _check_deadline(self, stage: str, due_ms: int) -> None:
        """Count a miss if ``stage`` came later than ``due_ms`` after the caller's speech."""
        start = self.timeline.marks_ns.get("speech_end")
        if start is not None and time.monotonic_ns() - start > due_ms * 1_000_000:
            self._missed(stage)

    def _missed(self, stage: str) -> None:
        self.ctx.services.metrics.deadline_misses.labels(stage).inc()
        self.timeline.counters.setdefault("deadline_misses", []).append(stage)

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
        if self.status is ReplyStatus.DISCARDED:
            return  # held work thrown away: the caller never knew of it
        tl.mark("response_done")
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
        if services.store is not None:
            call = self.ctx.record
            if self.kept_text:
                services.store.message(call, self.turn_id, "assistant", self.kept_text, self.status)
            services.store.turn_finished(call, record)
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
