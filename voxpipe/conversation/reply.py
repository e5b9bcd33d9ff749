"""One answer to one user turn: STT -> LLM -> clause chunker -> TTS -> paced frames.

A reply may start *held*: preemptive work begun during the caller's pause,
before the end of the turn is certain. A held reply computes everything but
sends nothing (events and audio wait) until the session confirms it, or is
discarded cheaply when the caller goes on talking. Once playing, a reply can
be paused (the caller may be starting to talk), resumed (it was only a
backchannel) or interrupted (barge-in): the LLM and TTS stop, the client is
told to clear its buffer, and the text kept is what the caller heard.

What the model is asked and where its words go is the reply's rounds (``reply_rounds.py``);
its voice, the filler and the pacing are ``reply_audio.py``. With tools, the model may call
one instead of answering: the call runs inside the reply (``tool_step.py``), the model is
asked again with its result (up to three times), and the caller hears the tool's phrase
meanwhile. Without tools a reply is one LLM request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from voxpipe.conversation.events import (
    ErrorCode,
    ErrorEvent,
    Event,
    PlaybackClear,
    PlaybackFlush,
    ResponseDone,
    Transcript,
    TurnMetrics,
)
from voxpipe.conversation.overlap_words import no_turn, resume_at, unheard
from voxpipe.conversation.reply_audio import PlaybackTracker, ReplyAudio
from voxpipe.conversation.reply_context import ReplyContext
from voxpipe.conversation.reply_rounds import Asked, ReplyRounds
from voxpipe.conversation.reply_status import TRANSITIONS, IllegalReplyTransition, ReplyStatus
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    JobClock,
    LlmUsage,
    PromptTooLong,
    Transcription,
    Urgency,
)
from voxpipe.engines.runner import EngineBusy
from voxpipe.observability.logs import log_context
from voxpipe.observability.timeline import BargeIn, StageTimer, TurnTimeline

log = logging.getLogger("voxpipe.reply")


class ReplyOwner(Protocol):
    """Who keeps the books of a call's finished replies (the session; it imports this
    module, so it is named here by what it does)."""

    def reply_finished(self, reply: Reply) -> None:
        """``reply`` is done: runs inside its task, before its record is written and before
        the next reply reads the history."""


@dataclass
class Reply:
    ctx: ReplyContext
    timeline: TurnTimeline
    audio: np.ndarray | None  # None: answer the history as it stands, no new caller turn
    held: bool = False
    previous: Reply | None = None
    cancel: CancelToken = field(default_factory=CancelToken)
    transcript: str = ""
    heard: Transcription | None = None  # made at the turn model's check: no STT of its own
    generated: str = ""
    heard_text: str | None = None  # set when interrupted
    heard_ms: float | None = None
    audio_ns: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    answer_seq: int | None = None
    barge_in: BargeIn | None = None
    owner: ReplyOwner | None = None  # told when the reply is done (None: nobody)

    turn_record: dict[str, Any] | None = None  # the turn's record, once the reply is done
    last_frame_ns: int = 0  # when the latest frame was handed to the transport
    respond: bool = True  # False: only transcribe; the turn joins the history unanswered
    text: str | None = None  # words to say as they are (a greeting): no LLM
    user_message: ChatMessage | None = None  # the caller's words, put in the history early
    tool_choice: str | None = None  # this reply's own (a Realtime response's); None: the session's
    # The reply this turn's speech barged in on: if the speech proves to be no turn (no
    # words, or a backchannel), this reply says the rest of that one instead of answering.
    resumes: Reply | None = None
    continues: int = 0  # it does: that reply's turn id (its message gets these words too)
    repeats: int = 0  # ... saying again this many of the words heard (the cut sentence's)
    # It does not: that reply had no word yet, so this one answers its turn, words or none.
    answers_unanswered: bool = False

    def __post_init__(self) -> None:
        self.tracker = PlaybackTracker(self.ctx.output_rate)
        services = self.ctx.services
        self.stages = StageTimer(
            self.timeline, services.metrics, services.config.deadlines, self.ctx.trace
        )
        self._outcome = ReplyOutcome()  # the status: only this reply's methods move it
        self._paused = False
        self._audio: ReplyAudio | None = None  # its voice, once it speaks (a pause flushes it)
        self._sendable = asyncio.Event()  # confirmed, not paused (or cancelled: wake and stop)
        self._held_events: list[Event] = []
        self.words_before = 0  # words said before a tool call: its message keeps them
        self._decided = asyncio.Event()  # a held reply was confirmed or thrown away
        # How a batching LLM ranks this reply's requests against other calls' (earliest
        # first; held work after every confirmed turn), updated as the reply is confirmed.
        self.urgency = Urgency(held=self.held)
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
        self.urgency.held = False
        if self.timeline.has("stt_done") and self.transcript and not self.continues:
            self.ctx.recorder.message(self.turn_id, "user", self.transcript)
        # Events the task emits while these sends wait are queued behind them, in order.
        while self._held_events:
            await self.ctx.outbox.send(self._held_events.pop(0))
        self.held = False
        self._update_sendable()
        self._decided.set()

    def discard(self) -> None:
        """Speech resumed: throw the held work away."""
        self._outcome.move(ReplyStatus.DISCARDED, "speech resumed before the end of the turn")
        self.cancel.cancel()

    async def pause(self, now_ns: int, flush: bool = False) -> None:
        """The caller may be starting to talk: send nothing more for now. ``flush``
        (``turn.clear_on_pause``, where the transport can): the client also drops what it
        has buffered, so the agent falls silent now rather than after the buffer plays out;
        if the sound proves to be no turn, the reply goes on from where the caller stopped
        hearing it."""
        if self._paused:
            return
        self._paused = True
        self._update_sendable()
        if self.barge_in is not None and not self.barge_in.paused_ns:
            self.barge_in.paused_ns = now_ns
        if flush and not self.held and self._audio is not None and self._audio.flush(now_ns):
            self.timeline.counters["flushes"] = int(self.timeline.counters.get("flushes", 0)) + 1
            await self.ctx.outbox.send(PlaybackFlush(self.turn_id))

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
        await self.ctx.outbox.send(PlaybackClear(self.turn_id, self.last_seq))

    async def cancel_by_client(self, now_ns: int) -> None:
        """The client cancelled the reply: stopped as by a barge-in, reported as cancelled."""
        await self.interrupt(now_ns)
        self._outcome.move(ReplyStatus.CANCELLED, "cancelled by the client")

    def playback_ack(self, seq: int) -> bool:
        return self.tracker.ack(seq)

    async def wait(self) -> None:
        await asyncio.gather(self.task, return_exceptions=True)

    # -- the pipeline ---------------------------------------------------------

    async def emit(self, event: Event) -> None:
        """The reply's events to the client: held back while the reply is held."""
        if self.held:
            self._held_events.append(event)
        else:
            await self.ctx.outbox.send(event)

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
                transcript = self.heard or await self.ctx.services.stt.transcribe(self.audio, clock)
            if self.heard is not None:
                self.timeline.counters["stt_at_check"] = True
            self.transcript = transcript.text.strip()
            self.timeline.counters["transcript"] = self.transcript
            rest = self._false_interruption()
            if rest is not None:
                await self._carry_on(rest)
                return
            if not self.held and self.transcript:
                self.ctx.recorder.message(self.turn_id, "user", self.transcript)
            await self.emit(Transcript(self.turn_id, self.transcript))
            if self.cancel.cancelled:  # discarded or interrupted meanwhile: no LLM, no TTS
                self._outcome.ran_out(cancelled=True)
                return
            if not any(ch.isalnum() for ch in self.transcript) and not self.answers_unanswered:
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
        except Exception as group:
            error = _alone(group)  # the reply's stages run in a task group, which wraps
            if isinstance(error, EngineBusy):
                self._outcome.move(ReplyStatus.FAILED, str(error))
                await self.emit(ErrorEvent.of(ErrorCode.ENGINE_BUSY, str(error)))
            elif isinstance(error, PromptTooLong):  # the session's tools: no bug, no traceback
                log.warning("turn %s of %s: %s", self.turn_id, self.ctx.session_id, error)
                self._outcome.move(ReplyStatus.FAILED, str(error))
                await self.emit(ErrorEvent.of(ErrorCode.CONTEXT_EXCEEDED, str(error)))
            else:
                log.error("turn %s of %s failed", self.turn_id, self.ctx.session_id, exc_info=group)
                self._outcome.move(ReplyStatus.FAILED, f"{type(error).__name__}: {error}")
                await self.emit(ErrorEvent.of(ErrorCode.TURN_FAILED, self._outcome.reason))
        finally:
            if self.barge_in is not None:
                self.barge_in.cancelled_ns = time.monotonic_ns()
            if self.held:  # an empty or failed held turn reports nothing until it is decided
                await self._decided.wait()
            await self._finish()

    def _false_interruption(self) -> str | None:
        """The unheard rest of the reply this turn's speech interrupted, when the speech
        was only a sound or an acknowledgement (``overlap_words``); None: it is a turn."""
        interrupted, self.resumes = self.resumes, None
        turn = self.ctx.services.config.turn
        if interrupted is None or not self.respond:
            return None
        if interrupted.status is not ReplyStatus.INTERRUPTED or interrupted.heard_text is None:
            return None  # finished before the barge-in landed, or cancelled by the client
        if not interrupted.meant.strip():
            # Not a word of it written yet: the caller was still talking after a pause, or
            # made a sound, not listening to a reply. The turn it cut short is this turn's,
            # whether false interruptions resume or not.
            self.answers_unanswered = True
            return None
        if not turn.resume_false_interruptions:
            return None
        if not no_turn(
            self.transcript,
            interrupted.meant,
            turn.backchannel_phrases,
            turn.backchannel_max_words,
        ):
            return None
        self.continues = interrupted.turn_id
        heard = interrupted.heard_text
        # Words the history holds that the rest says again: those of the cut sentence, or,
        # when the interrupted reply was itself a rest stopped before its first word, the
        # ones its own rest was to say again.
        self.repeats = (
            len(heard.split()) - resume_at(heard) if heard.split() else interrupted.repeats
        )
        return unheard(interrupted.meant, heard)

    @property
    def meant(self) -> str:
        """What the reply set out to say: its own words if it was given them (a greeting,
        the rest of a reply a backchannel stopped), else what the LLM wrote so far. A
        resumed reply stopped again before its first word still holds all its rest."""
        return self.text if self.text is not None else self.generated

    async def _carry_on(self, rest: str) -> None:
        """Not a turn: say ``rest`` (the interrupted reply's words the caller missed), with
        no LLM request, and keep the caller's sound out of the history."""
        self.timeline.counters["false_interruption"] = {"heard": self.transcript, "rest": rest}
        self.text = rest  # stopped before it speaks, this reply still means to say it all
        await self.emit(Transcript(self.turn_id, self.transcript))
        if self.cancel.cancelled or not rest:
            self._outcome.ran_out(self.cancel.cancelled)
            return
        await self._speak()
        self._outcome.ran_out(self.cancel.cancelled)

    async def _speak(self) -> None:
        """The model's rounds -> chunker -> TTS -> paced frames, all running at once: the
        rounds (``reply_rounds.py``) write clauses that the voice (``reply_audio.py``)
        synthesizes and paces, and the filler waits for the first words."""
        ctx, cfg, stages, cancel = self.ctx, self.ctx.services.config, self.stages, self.cancel
        audio = ReplyAudio(
            self, ctx.services, stages, cancel, self.tracker, ctx.pacer,
            (ctx.send_audio, ctx.frames), ctx.output_rate, self.urgency,
        )  # fmt: skip
        self._audio = audio
        asked = Asked(
            self.turn_id,
            self.transcript if self.audio is not None else None,
            self.text,
            self.tool_choice,
        )
        rounds = ReplyRounds(self, ctx, asked, cancel, stages, self.urgency, audio)
        usage, llm_clock = LlmUsage(), JobClock()
        try:
            async with asyncio.timeout(cfg.deadlines.turn_s), asyncio.TaskGroup() as group:
                group.create_task(rounds.run(usage, llm_clock))
                group.create_task(audio.voice())
                group.create_task(audio.play())
                group.create_task(audio.fill_silence(rounds.hold_the_line, rounds.may_call()))
        except TimeoutError:
            stages.missed("turn")
            cancel.cancel()
            self._outcome.move(ReplyStatus.FAILED, f"reply exceeded {cfg.deadlines.turn_s:g} s")
            await self.emit(ErrorEvent.of(ErrorCode.DEADLINE_EXCEEDED, self._outcome.reason))
        finally:
            stages.llm_done(llm_clock, usage)

    async def confirmed(self) -> bool:
        """A held reply waits for the end of the turn before it acts (a tool call): False
        if it was thrown away, or stopped, instead."""
        if self.held:
            await self._decided.wait()
        return not self.cancel.cancelled

    async def until_sendable(self) -> None:
        """Held replies wait for confirmation, paused ones for resume; a cancel wakes both."""
        await self._sendable.wait()

    # -- the end ------------------------------------------------------------

    @property
    def kept_text(self) -> str:
        """The assistant text the caller heard (all of it unless interrupted)."""
        return (self.heard_text if self.heard_text is not None else self.generated).strip()

    @property
    def answer_text(self) -> str:
        """What the history keeps as the answer: the kept text less the words said before
        a tool call (that call's message holds them)."""
        if not self.words_before:
            return self.kept_text
        return " ".join(self.kept_text.split()[self.words_before :])

    async def _finish(self) -> None:
        tl = self.timeline
        self.stages.done(self.status, self.kept_text)  # a discarded turn's span says so
        if self.status is ReplyStatus.DISCARDED:
            return  # held work thrown away: the caller never knew of it
        if self.ctx.ledger is not None:  # a readback is answered by one turn only
            self.ctx.ledger.confirmation.turn_done(self.turn_id)
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
        self.turn_record = record
        if self.owner is not None:
            self.owner.reply_finished(self)
        services = self.ctx.services
        services.metrics.observe_turn(tl, self.status)
        if self.kept_text:
            self.ctx.recorder.message(self.turn_id, "assistant", self.kept_text, self.status)
        self.ctx.recorder.turn_finished(record)
        await asyncio.to_thread(services.turn_log.write, record)
        # On a closed call the outbox sends nothing, not even response.done.
        with contextlib.suppress(Exception):  # the connection may be gone: nothing to tell
            await self.emit(
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
                    answer_seq=self.answer_seq,
                )
            )
            await self.emit(TurnMetrics(self.turn_id, record))


def _alone(error: BaseException) -> BaseException:
    """The one error a task group failed with, unwrapped (it wraps even a single one)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


class ReplyOutcome:
    """A reply's status and the reason for it. Only the reply holds one, and
    :meth:`move` is the one place either changes, so every move is checked."""

    __slots__ = ("_reason", "_status")

    def __init__(self) -> None:
        self._status = ReplyStatus.PENDING
        self._reason = ""

    @property
    def status(self) -> ReplyStatus:
        return self._status

    @property
    def reason(self) -> str:
        """Why the reply ended so (empty for a plain completion)."""
        return self._reason

    def move(self, to: ReplyStatus, reason: str | None = None) -> None:
        """Move to ``to``; ``reason`` None keeps the reason already given."""
        if to not in TRANSITIONS[self._status]:
            raise IllegalReplyTransition(f"a reply cannot go from {self._status} to {to}")
        self._status = to
        if reason is not None:
            self._reason = reason

    def ran_out(self, cancelled: bool) -> None:
        """The reply's work stopped by itself: completed, or cancelled if a cancel stopped
        it. An outcome decided meanwhile (interrupted, discarded, failed) stands."""
        if self._status is ReplyStatus.PENDING:
            self.move(ReplyStatus.CANCELLED if cancelled else ReplyStatus.COMPLETED)
