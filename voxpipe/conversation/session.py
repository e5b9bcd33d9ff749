"""One call: turn-taking policy between the caller and the replies.

Audio flows one way: transport -> :meth:`Session.feed` -> :class:`Inbound` (bounded, one
pump) -> resample -> VAD -> turn detector. :class:`TurnTaking` decides what each detector
event means for the replies, and the session acts on it:

* the end of a turn starts a :class:`~voxpipe.conversation.reply.Reply`, or
  confirms the one already started *held* during the pause (preemption);
* speech that resumes after preemption began discards the held reply;
* speech during a reply pauses its audio at once, interrupts it once it has
  lasted ``min_interruption_ms`` (barge-in), and otherwise, being only a
  backchannel or a cough, lets it resume and is not a turn.

The agent's tools run inside replies (``tool_step.py``); the session's
:class:`~voxpipe.conversation.tool_ledger.ToolLedger` keeps their calls and results, in the
history and the saved state. What a client may ask beyond audio (client-driven turns, edits,
its own tools) is :class:`~voxpipe.conversation.client_commands.ClientCommands`.

The session owns the collaborators of a call, each a named object it drives:

* ``outbox`` (:class:`~voxpipe.conversation.events.ClientOutbox`): every event to the client,
  from the session, its replies and tools; closing it is the end of the call for them all;
* ``replies`` (:class:`~voxpipe.conversation.replies.Replies`): starts every reply, numbers
  the turns, stops a reply;
* ``kept`` (:class:`~voxpipe.conversation.history.TurnHistory`): what the history keeps
  of each finished turn;
* ``saved`` (:class:`~voxpipe.conversation.saved_state.SavedCall`): the saved state, and a
  restore from another worker's;
* ``commands`` (:class:`~voxpipe.conversation.client_commands.ClientCommands`): a client's
  requests beyond audio;
* ``keypad`` (:class:`~voxpipe.conversation.keypad.KeypadTurns`): the caller's keys as turns;
* ``control`` (:class:`~voxpipe.conversation.call_control.CallControl`): a tool's end or
  transfer of the call.

Closing the session cancels every reply and waits for it, and for the tools still running
(up to their timeout), so no task or engine job outlives the call.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np

from voxpipe.agent.call_context import checked_caller
from voxpipe.audio.pcm import StreamResampler, pcm16_to_float
from voxpipe.config import TurnConfig
from voxpipe.conversation.call_control import CallControl
from voxpipe.conversation.client_commands import ClientCommands
from voxpipe.conversation.client_reports import ClientReports, ReportOutcome
from voxpipe.conversation.events import (
    ClientOutbox,
    SendAudio,
    SendEvent,
    SpeechStarted,
    SpeechStopped,
)
from voxpipe.conversation.history import (
    AnsweredAudio,
    CallRecorder,
    FinishedTurns,
    History,
    Summarizer,
    TurnHistory,
)
from voxpipe.conversation.inbound import Arrivals, Inbound
from voxpipe.conversation.keypad import KeypadTurns
from voxpipe.conversation.replies import Replies
from voxpipe.conversation.reply import Reply
from voxpipe.conversation.reply_audio import FrameNumbers, Pacer
from voxpipe.conversation.reply_context import ReplyContext
from voxpipe.conversation.reply_status import ReplyStatus
from voxpipe.conversation.saved_state import SavedCall, new_call_id
from voxpipe.conversation.services import CallRecord, Services
from voxpipe.conversation.tool_ledger import ToolLedger
from voxpipe.conversation.turn_detector import TurnDetector, TurnEvent, TurnEventKind, Verdict
from voxpipe.conversation.turn_judge import PartialTranscripts, TurnJudge
from voxpipe.conversation.turn_taking import TurnTaking, Yield
from voxpipe.engines.base import STT_SAMPLE_RATE, JobClock
from voxpipe.observability.latency_split import ClientTiming
from voxpipe.observability.timeline import BargeIn, TurnTimeline

__all__ = ["Session"]


class Session:
    """One call. ``owner`` is the principal that started it; ``record`` continues a call
    another worker recorded (a restore), else a new call record is begun. The call's trace
    span opens with the session (``transport`` labels it) and closes with it. ``caller``: the
    caller's number or SIP URI, where the transport carries one. ``flushes``: the transport
    can drop its client's buffered reply audio and send more of the same reply after
    (``PlaybackFlush``)."""

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
        owner: str = "anonymous",
        record: CallRecord | None = None,
        transport: str = "unknown",
        caller: str | None = None,
        flushes: bool = False,
    ) -> None:
        self.id, self.services = session_id, services
        self.caller = checked_caller(caller)
        self.record = record or CallRecord(new_call_id(), session_id, owner)
        self.recorder = CallRecorder(services.store, self.record)  # every write to the store
        cfg = self.cfg = services.config
        self.outbox = ClientOutbox(send_event)  # every event to the client; closed: call over
        self.input_sample_rate, self.output_sample_rate = input_sample_rate, output_sample_rate
        self.turn_config = turn_config or cfg.turn
        self.counts = Counter[str]()
        self.turns: list[dict[str, object]] = []  # the finished turns' records
        self.history = History(system_prompt or services.instructions)
        self.finished = FinishedTurns(self.history)
        # -- the caller's audio: inbound -> resample -> VAD -> turn detector ---------------
        self.inbound = Inbound(
            session_id, services, input_sample_rate, send_event, self._process, self.counts
        )
        self._resampler = StreamResampler(input_sample_rate, STT_SAMPLE_RATE)
        self._pending = np.zeros(0, dtype=np.float32)
        self._arrivals = Arrivals()
        self._vad, self._window = services.vad.new_stream(), services.vad.window_samples
        self._detector = TurnDetector(self.turn_config, self._window, STT_SAMPLE_RATE)
        self._next_detector: TurnDetector | None = None
        self._turn_judge = TurnJudge(session_id, services, self.counts, self.history)
        self._checks: list[dict[str, Any]] = []  # the turn model's verdicts in this turn
        self._last_activity_ns = time.monotonic_ns()
        self._flushes = flushes
        # -- the collaborators (module docstring), then who reports on the turns ----------
        answered, pacer = AnsweredAudio(), Pacer(cfg.audio.playback_lead_ms)
        self.kept = TurnHistory(self.history, self.finished, answered, self.counts)
        self.control = CallControl(
            self.record, self.caller, self.inbound, pacer, self.outbox, self.counts)  # fmt: skip
        self.ledger = ToolLedger(
            services.toolbox, self.history, self.recorder, lambda: self.saved.persist(),
            services.metrics, self.outbox, self.control,
        )  # fmt: skip
        ctx = ReplyContext(
            session_id=session_id, recorder=self.recorder, services=services,
            outbox=self.outbox, send_audio=send_audio, frames=FrameNumbers(), pacer=pacer,
            output_rate=output_sample_rate, history=self.history, ledger=self.ledger,
            turns=self.kept,
            trace=services.tracing.call(self.record.call_id, session_id, transport),
        )  # fmt: skip
        self.summarizer = Summarizer(session_id, services, self.history, self.ledger)
        self._turns: TurnTaking[Reply] = TurnTaking(self.turn_config)
        self.replies = Replies(
            ctx, self._turns, self.summarizer, self.counts, services.metrics, self)  # fmt: skip
        self.saved = SavedCall(
            self.recorder, services, self.history, self.ledger, self.replies, answered,
            self.counts, input_sample_rate,
        )  # fmt: skip
        self.commands = ClientCommands(
            self.replies, self.history, self.finished, self.ledger, self.inbound, self.counts,
            cfg.llm, self,
        )  # fmt: skip
        self.keypad = KeypadTurns(
            self.replies, self.commands, self.history, self.recorder, self.counts, self.turn_config
        )
        self.partials = PartialTranscripts(
            session_id, services, self.outbox, self.history, self.ledger)  # fmt: skip
        self._reports = ClientReports(services.metrics, self.recorder, self.turns)
        rates = {"input_sample_rate": input_sample_rate, "output_sample_rate": output_sample_rate}
        self.recorder.started({**rates, "turn": self.turn_config.model_dump()})

    @property
    def owner(self) -> str:
        """The principal that started the call (its record says)."""
        return self.record.owner

    @property
    def transport(self) -> str:
        """Set by Call.attach; labels the dropped-audio counter."""
        return self.inbound.transport

    @transport.setter
    def transport(self, name: str) -> None:
        self.inbound.transport = name

    def update_turn_config(self, turn_config: TurnConfig) -> None:
        """New turn-taking settings; a turn already in speech finishes under the old ones."""
        self.turn_config = self._turns.config = turn_config
        self._next_detector = TurnDetector(turn_config, self._window, STT_SAMPLE_RATE)

    # -- inbound ------------------------------------------------------------

    def feed(self, pcm: bytes) -> None:
        """Queue inbound PCM16 at the session's input rate; never waits for the VAD."""
        self.inbound.feed(pcm)

    async def keep_up(self, max_wait_s: float | None = None) -> None:
        """Hold the sender of a burst while the VAD catches up (:meth:`Inbound.keep_up`)."""
        await self.inbound.keep_up(max_wait_s)

    async def push_audio(self, pcm: bytes) -> None:
        """Feed inbound PCM16 and wait until the VAD has seen it (tests, simple transports)."""
        self.feed(pcm)
        await self.inbound.processed()

    def idle_s(self, now_ns: int) -> float:
        """Seconds with neither caller speech nor a reply (the idle timeout's clock)."""
        turns = self._turns
        if self._detector.in_speech or turns.speaking() is not None or turns.held is not None:
            self._last_activity_ns = now_ns
        return (now_ns - self._last_activity_ns) / 1e9

    async def _process(self, pcm: bytes, arrived: int) -> None:
        audio = self._resampler.process(pcm16_to_float(pcm))
        if self.keypad.waiting:
            await self.keypad.heard(audio.shape[0])
        if not self.commands.server_vad:  # the client ends turns itself: no VAD, just keep it
            self.commands.uncommitted.keep(audio, self.turn_config.max_turn_s)
            return
        buf = np.concatenate([self._pending, audio]) if self._pending.size else audio
        n = buf.shape[0] // self._window
        self._pending = buf[n * self._window :]
        if n == 0:
            return
        windows = buf[: n * self._window]
        probs = await self.services.vad.process(self._vad, windows, JobClock())
        for i, prob in enumerate(probs):
            window = windows[i * self._window : (i + 1) * self._window]
            self._arrivals.add(self._window, arrived)
            if self._next_detector is not None and not self._detector.in_speech:
                self._next_detector.samples = self._detector.samples
                self._detector, self._next_detector = self._next_detector, None
            self._detector.over_reply = self._turns.overlapped() is not None
            event = self._detector.push(window, prob)
            await self._on_window(prob, event)

    # -- turn-taking: what the detector heard, decided by self._turns -------------

    async def _on_window(self, prob: float, event: TurnEvent | None) -> None:
        if event is not None and event.kind is TurnEventKind.SPEECH_STARTED:
            await self._on_speech_started(event)
            return
        if event is not None and event.kind is TurnEventKind.END_CANDIDATE:
            await self._judge(event)
        elif event is not None:
            await self._on_turn_end(event)
            return
        cfg, detector = self.turn_config, self._detector
        if not detector.in_speech:
            return
        loud = prob >= cfg.threshold
        if loud:
            self.partials.speaking(round(detector.speech_ms() * 16), detector.turn_audio)
        overlap = self._turns.heard(loud, detector.speech_ms(), detector.silence_ms())
        if overlap is not None and overlap.action is Yield.INTERRUPT:
            self.replies.barged = overlap.reply  # the turn's words may yet show it was no turn
            self._detector.check_overlap = self._may_resume()
            await self.replies.interrupt(overlap.reply)
            if detector is not self._detector:
                return  # the speech was forgotten while the client was told (a reset)
        elif overlap is not None and overlap.action is Yield.PAUSE:
            await overlap.reply.pause(time.monotonic_ns(), self._flush_on_pause())
        elif overlap is not None:
            overlap.reply.resume()  # only a backchannel so far
        preempt = self._turns.pausing(
            detector.speech_ms(), detector.silence_ms(), may_hold=self.commands.auto_respond
        )
        if preempt.discarded is not None:
            self.replies.discard(preempt.discarded)
        elif preempt.start:
            self._start_held()

    async def _judge(self, event: TurnEvent) -> None:
        """The verdict on a silence that may end the turn (:class:`TurnJudge`). Awaited
        before the next window, so the detector's sample clock waits for it: the verdict
        lands on the same window whatever the engines' speed (the windows queue meanwhile,
        off the loop)."""
        detector = self._detector
        barged, cfg = self.replies.barged, self.turn_config
        if barged is not None and event.audio is not None and self._may_resume():
            no_turn, check = await self._turn_judge.overlap(
                event, detector.as_ended(event.audio), cfg, barged.meant
            )
            if detector is not self._detector:
                return  # the turn was reset meanwhile
            self._checks.append(check)
            if no_turn:  # a backchannel or a sound: the reply goes on sooner
                detector.judged(Verdict.NO_TURN)
                return
        elif event.audio is not None and cfg.interruption_phrases and self._turns.short_overlap():
            # Too short to interrupt the reply: its words may ask for the floor ("Wait, stop.").
            floor, check = await self._turn_judge.overlap_asks_for_floor(
                event, detector.as_ended(event.audio), cfg
            )
            if detector is not self._detector:
                return  # the turn was reset meanwhile
            self._checks.append(check)
            if floor and self._turns.short_overlap():
                reply = self._turns.interrupted_by_words()
                assert reply is not None  # short_overlap: a reply is speaking
                await self.replies.interrupt(reply)
        if not detector.smart:
            return  # the fixed silence ends the turn
        if self.services.turn_model is None or event.audio is None:
            detector.judged(Verdict.UNFINISHED)  # no model: the longest silence ends the turn
            return
        said, check = await self._turn_judge.judge(
            event,
            detector.as_ended(event.audio),
            self.turn_config,
            self,
        )
        if detector is not self._detector:
            return  # the turn was reset (cleared, or turn-taking changed) meanwhile
        detector.judged(said)
        self._checks.append(check)

    def _may_resume(self) -> bool:
        """Speech that interrupted a reply may prove no turn, and the reply go on."""
        return self.commands.auto_respond and self.turn_config.resume_false_interruptions

    def _flush_on_pause(self) -> bool:
        return self._flushes and self.turn_config.clear_on_pause

    def llm_may_judge(self) -> bool:
        """The LLM judges words only where it is cheap: on the call's own sequence, which
        holds the conversation without tools (an agent with tools keeps it elsewhere), and
        while no reply of the call is speaking or generating on it."""
        turns = self._turns
        idle = turns.speaking() is None and turns.held is None
        return idle and not self.ledger.offered()

    async def _on_speech_started(self, event: TurnEvent) -> None:
        self.replies.barged = None
        over = self._turns.speech_began()
        if over is not None:  # hold the audio first, then tell the client
            now = time.monotonic_ns()
            # event.sample starts the first speech window: when did that window arrive?
            over.barge_in = BargeIn(self._arrivals.of(event.sample + 1))
            self._detector.check_overlap = bool(self.turn_config.interruption_phrases)
            await over.pause(now, self._flush_on_pause())
        next_turn = self.replies.last_turn_id + 1
        self.partials.speech_started(next_turn, self._arrivals.of(event.sample + 1))
        await self.outbox.send(SpeechStarted(round(event.sample / 16, 1)))

    async def _on_turn_end(self, event: TurnEvent) -> None:
        assert event.audio is not None
        partials = self.partials.turn_ended().as_dict()
        checks, self._checks = self._checks, []
        replies = self.replies
        end = self._turns.turn_ended(event.speech_ms)
        if end.backchannel:  # a backchannel or a cough over the reply: not a turn
            self.counts["backchannels"] += 1
            replies.discard(end.discarded)
            if end.speaking is not None:
                end.speaking.resume()
            await self.outbox.send(SpeechStopped(round(event.sample / 16, 1), 0))
            return
        turn_id = replies.last_turn_id + 1
        await self.outbox.send(SpeechStopped(round(event.sample / 16, 1), turn_id))
        self.kept.turn_ended(turn_id, event.sample)
        speech_end_ns = self._arrivals.of(event.sample)
        answer = self._turns.answer(end)
        if answer.confirm is not None:
            self._turn_judge.forget()  # the held reply took its transcript, if any
            replies.last_turn_id += 1
            self.counts["preempt_used"] += 1
            self.services.metrics.preemptions.labels("used").inc()
            answer.confirm.timeline.counters["partials"] = partials
            if checks:
                answer.confirm.timeline.counters["turn_model"] = checks
            await answer.confirm.confirm(speech_end_ns)
            return
        if answer.interrupt is not None:
            await replies.interrupt(answer.interrupt)
        replies.last_turn_id += 1
        timeline = TurnTimeline(replies.last_turn_id)
        timeline.mark("speech_end", speech_end_ns)
        timeline.mark("eot")
        timeline.counters["partials"] = partials
        if checks:
            timeline.counters["turn_model"] = checks
        heard = self._turn_judge.transcript_of(event.start, event.sample)
        self._turn_judge.forget()
        auto = self.commands.auto_respond
        reply = replies.start(timeline, event.audio, held=False, respond=auto, heard=heard)
        self._turns.answered(reply)

    def _start_held(self) -> None:
        """Preemption: answer the turn so far while the caller is still (maybe) pausing."""
        timeline = TurnTimeline(self.replies.last_turn_id + 1)
        detector = self._detector
        start, end = detector.speech_span
        timeline.mark("speech_end", self._arrivals.of(end))
        timeline.counters["preempted"] = True
        heard = self._turn_judge.transcript_of(start, end)
        held = self.replies.start(timeline, detector.turn_audio(), held=True, heard=heard)
        self._turns.held_started(held)
        self.counts["preempt_started"] += 1

    def greet(self) -> int | None:
        """Say the agent's greeting, if it has one, as the call's first reply (a transport
        calls this once its call is up; a resumed call is not greeted again)."""
        greeting = self.services.greeting
        if not greeting or self.replies.last_turn_id or self.history.turns:
            return None
        return self.replies.respond(say=greeting)

    def reply_finished(self, reply: Reply) -> None:
        """A reply is done (it tells its owner, :class:`~voxpipe.conversation.reply.ReplyOwner`):
        runs inside the reply task, before the next reply reads the history."""
        self.kept.reply_finished(reply)
        if reply.turn_record is not None:
            reply.turn_record["session_counts"] = dict(self.counts)
            self.turns.append(reply.turn_record)
        self._last_activity_ns = time.monotonic_ns()
        self.saved.persist()
        self.control.reply_finished(reply)
        if not self._detector.in_speech:  # else the caller's next reply needs the LLM first
            counters = reply.timeline.counters
            stale = bool(counters.get("tools")) or reply.status is ReplyStatus.INTERRUPTED
            self.summarizer.after_turn(counters.get("llm", {}), stale)

    # -- client reports ----------------------------------------------------------

    def playback_ack(self, seq: int) -> bool:
        """The client finished playing frame ``seq``; False if no reply owns it."""
        reply = self._turns.reply
        if reply is not None and reply.playback_ack(seq):
            return True
        # A frame of an earlier reply, still playing when the next turn ended: nothing to cut.
        return 0 < seq <= self.replies.ctx.frames.last

    def client_turn(self, turn_id: int, timing: ClientTiming) -> ReportOutcome:
        """The client's own timing of turn ``turn_id`` (``client.turn``)."""
        return self._reports.take(turn_id, timing, self._turns.reply, self.transport)

    # -- lifecycle ------------------------------------------------------------

    async def close(self, reason: str = "hangup") -> None:
        """Cancel the replies in flight and wait until their engine work has stopped."""
        if self.outbox.closed:
            return
        ctx = self.replies.ctx
        self.outbox.close()  # from here nothing reaches the client
        await self.control.close()  # no tool ends the call now: it is ending
        await self.inbound.close()
        await self.partials.close()
        await self.saved.close()
        for reply in (self._turns.held, self._turns.reply):
            if reply is not None and not reply.task.done():
                reply.cancel.cancel()
                reply.task.cancel()
                await reply.wait()
        await self.ledger.close()  # a tool that changes something may run to its end
        await self.summarizer.close()
        self.services.llm.forget(self.id)
        self.recorder.ended(reason, dict(self.counts))
        turns = self.replies.last_turn_id
        ctx.trace.end({"voxpipe.call.end": reason, "voxpipe.call.turns": turns})

    def forget_speech(self, always: bool) -> None:
        """Drop the caller's speech in progress and what turn-taking made of it (a held
        reply goes, a paused one resumes): the client cleared its input, or took over the
        ends of turns. ``always``: renew the detector even between turns."""
        if not always and not self._detector.in_speech:
            return
        fresh = TurnDetector(self.turn_config, self._window, STT_SAMPLE_RATE)
        fresh.samples = self._detector.samples
        self._detector, self._next_detector = fresh, None
        self._checks = []
        self._turn_judge.forget()
        forgotten = self._turns.reset()
        self.replies.discard(forgotten.discarded)
        if forgotten.resume is not None:
            forgotten.resume.resume()  # paused for speech that is now forgotten

    async def wait_idle(self) -> None:
        """Wait for the reply in flight, if any (tests and graceful shutdown)."""
        if self._turns.reply is not None:
            await self._turns.reply.wait()
        await self.summarizer.wait()
