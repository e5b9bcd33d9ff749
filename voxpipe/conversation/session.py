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

Closing the session cancels every reply and waits for it, and for the tools still running
(up to their timeout), so no task or engine job outlives the call.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import numpy as np

from voxpipe.agent.call_context import CallContext, checked_caller
from voxpipe.audio.pcm import pcm16_to_float
from voxpipe.audio.resample import StreamResampler
from voxpipe.config import TurnConfig
from voxpipe.conversation.client_commands import ClientCommands
from voxpipe.conversation.client_reports import ClientReports, ReportOutcome
from voxpipe.conversation.events import (
    CallEnded,
    CallTransfer,
    HistorySnapshot,
    SpeechStarted,
    SpeechStopped,
)
from voxpipe.conversation.history import History
from voxpipe.conversation.inbound import Arrivals, Inbound, Uncommitted
from voxpipe.conversation.keypad import Keypad, keypad_message
from voxpipe.conversation.partials import PartialTranscripts
from voxpipe.conversation.playback import Pacer
from voxpipe.conversation.record import CallRecorder
from voxpipe.conversation.reply import Reply, ReplyContext, SendAudio, SendEvent
from voxpipe.conversation.reply_status import ReplyStatus
from voxpipe.conversation.saved_state import AnsweredAudio, ContextRebuild, new_call_id
from voxpipe.conversation.services import CallRecord, Services
from voxpipe.conversation.summarizer import Summarizer
from voxpipe.conversation.tool_ledger import UNKNOWN_SAID, ToolLedger, ToolRun
from voxpipe.conversation.turn_detector import TurnDetector, TurnEvent, TurnEventKind, Verdict
from voxpipe.conversation.turn_judge import TurnJudge
from voxpipe.conversation.turn_messages import FinishedTurns, TurnMessages
from voxpipe.conversation.turn_taking import TurnTaking, Yield
from voxpipe.engines.base import STT_SAMPLE_RATE, ChatMessage, Transcription
from voxpipe.engines.runner import JobClock
from voxpipe.observability.latency_split import ClientTiming
from voxpipe.observability.timeline import BargeIn, TurnTimeline

__all__ = ["Session"]


class Session(ClientCommands):
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
        """``owner`` is the principal that started the call; ``record`` continues a call
        another worker recorded (a restore), else a new call record is begun. The call's
        trace span opens here (``transport`` labels it) and closes with the session.
        ``caller``: the caller's number or SIP URI, where the transport carries one.
        ``flushes``: the transport can drop its client's buffered reply audio and send more
        of the same reply after (``PlaybackFlush``)."""
        self.id = session_id
        self.caller = checked_caller(caller)
        self.record = record or CallRecord(new_call_id(), session_id, owner)
        self.recorder = CallRecorder(services.store, self.record)  # every write to the store
        self.services = services
        self.cfg = services.config
        self._send_event = send_event
        self.input_sample_rate = input_sample_rate
        self.output_sample_rate = output_sample_rate
        self.turn_config = turn_config or self.cfg.turn
        self._flushes = flushes
        self._vad = services.vad.new_stream()
        self._window = services.vad.window_samples
        self._detector = TurnDetector(self.turn_config, self._window, STT_SAMPLE_RATE)
        self._next_detector: TurnDetector | None = None
        self._checks: list[dict[str, Any]] = []  # the turn model's verdicts in this turn
        self._barged: Reply | None = None  # the reply this turn's speech interrupted
        self._keypad = Keypad(self.turn_config.keypad_idle_ms, self.turn_config.keypad_max_digits)
        self._samples_in = 0  # the call's inbound audio at 16 kHz: the keypad's clock
        self._ending: CallEnded | CallTransfer | None = None  # a tool's, after this reply
        self._end_task: asyncio.Task[None] | None = None
        self._resampler = StreamResampler(input_sample_rate, STT_SAMPLE_RATE)
        self._pending = np.zeros(0, dtype=np.float32)
        self._arrivals = Arrivals()
        self.history = History(system_prompt or services.instructions)
        self._turn_ids = 0
        self._seq = 0
        self._turns: TurnTaking[Reply] = TurnTaking(self.turn_config)
        self.closed = False
        self.ledger = ToolLedger(
            services.toolbox,
            self.history,
            self.recorder,
            self.persist,
            services.metrics,
            send_event,
            lambda: self.closed,
            self.call_context,
        )
        self.ctx = ReplyContext(
            session_id=session_id,
            recorder=self.recorder,
            services=services,
            send_event=send_event,
            send_audio=send_audio,
            next_seq=self._next_seq,
            pacer=Pacer(self.cfg.audio.playback_lead_ms),
            output_rate=output_sample_rate,
            history=self.history.messages,
            trace=services.tracing.call(self.record.call_id, session_id, transport),
            ledger=self.ledger,
            commit_turn=self._commit_turn,
        )
        self.summarizer = Summarizer(session_id, services, self.history, self.ledger.offered)
        self.partials = PartialTranscripts(services, send_event)
        self.counts: Counter[str] = Counter()
        self._turn_judge = TurnJudge(session_id, services, self.counts)
        self._inbound = Inbound(
            session_id, services, input_sample_rate, send_event, self._process, self.counts
        )
        self._last_activity_ns = time.monotonic_ns()
        self.turns: list[dict[str, object]] = []
        self._reports = ClientReports(services.metrics, self.recorder, self.turns)
        self.server_vad = True  # False: the client ends turns itself (commit_input)
        self.auto_respond = True  # False: a turn's end starts no reply (respond asks)
        self._uncommitted = Uncommitted(self._inbound, self.counts)  # for commit_input
        self._finished = FinishedTurns(self.history)
        self._answered = AnsweredAudio()
        self._rebuild: ContextRebuild | None = None
        self._restored_answer: asyncio.Task[None] | None = None
        self.recorder.started(
            {
                "input_sample_rate": input_sample_rate,
                "output_sample_rate": output_sample_rate,
                "turn": self.turn_config.model_dump(),
            }
        )

    @property
    def owner(self) -> str:
        """The principal that started the call (its record says)."""
        return self.record.owner

    def call_context(self) -> CallContext:
        """Who this call is for, as its tools are told (``agent/call_context.py``)."""
        return CallContext(
            self.owner,
            self.record.call_id,
            self.id,
            self.transport,
            self.caller,
            lambda reason: self._after_reply(CallEnded(reason)),
            lambda target: self._after_reply(CallTransfer(target)),
        )

    def _after_reply(self, event: CallEnded | CallTransfer) -> bool:
        """A tool ended or transferred the call: the transport is told once the reply in
        progress has been heard (:meth:`_on_reply_finished`). False if the call is over."""
        if self.closed:
            return False
        self._ending = event
        return True

    async def _end_after_playback(self, event: CallEnded | CallTransfer) -> None:
        """The last reply is done; the caller hears it out, then the call ends or moves."""
        await asyncio.sleep(max(0.0, self.ctx.pacer.ends_at_ns - time.monotonic_ns()) / 1e9)
        if not self.closed:
            self.counts["ended_by_agent" if isinstance(event, CallEnded) else "transfers"] += 1
            await self._send_event(event)

    @property
    def transport(self) -> str:
        """Set by Call.attach; labels the dropped-audio counter."""
        return self._inbound.transport

    @transport.setter
    def transport(self, name: str) -> None:
        self._inbound.transport = name

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def update_turn_config(self, turn_config: TurnConfig) -> None:
        """New turn-taking settings; a turn already in speech finishes under the old ones."""
        self.turn_config = self._turns.config = turn_config
        self._next_detector = TurnDetector(turn_config, self._window, STT_SAMPLE_RATE)

    # -- inbound ------------------------------------------------------------

    def feed(self, pcm: bytes) -> None:
        """Queue inbound PCM16 at the session's input rate; never waits for the VAD."""
        self._inbound.feed(pcm)

    async def keep_up(self, max_wait_s: float | None = None) -> None:
        """Hold the sender of a burst while the VAD catches up (:meth:`Inbound.keep_up`)."""
        await self._inbound.keep_up(max_wait_s)

    async def push_audio(self, pcm: bytes) -> None:
        """Feed inbound PCM16 and wait until the VAD has seen it (tests, simple transports)."""
        self.feed(pcm)
        await self._inbound.processed()

    def idle_s(self, now_ns: int) -> float:
        """Seconds with neither caller speech nor a reply (the idle timeout's clock)."""
        turns = self._turns
        if self._detector.in_speech or turns.speaking() is not None or turns.held is not None:
            self._last_activity_ns = now_ns
        return (now_ns - self._last_activity_ns) / 1e9

    async def _process(self, pcm: bytes, arrived: int) -> None:
        audio = self._resampler.process(pcm16_to_float(pcm))
        self._samples_in += audio.shape[0]
        if (digits := self._keypad.due(self._samples_in)) is not None:
            await self._keys_entered(digits)
        if not self.server_vad:  # the client ends turns itself: no VAD, just keep it
            self._uncommitted.keep(audio, self.turn_config.max_turn_s)
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

    # -- the keypad ---------------------------------------------------------------

    async def key_pressed(self, digit: str) -> None:
        """A keypad key (DTMF: 0-9, *, #, A-D) from the phone line."""
        self.counts["dtmf"] += 1
        if (digits := self._keypad.press(digit, self._samples_in)) is not None:
            await self._keys_entered(digits)

    async def _keys_entered(self, digits: str) -> None:
        """The caller typed ``digits``: a turn of its own, answered like words. A reply
        still speaking stops first, as for a barge-in: a caller keying over a menu has
        heard enough of it."""
        self.counts["keypad_turns"] += 1
        speaking = self._turns.speaking()
        if speaking is not None and self.turn_config.interrupt:
            await self._interrupt(speaking)
            await speaking.wait()  # what was heard of it goes into the history first
        text = keypad_message(digits)
        self.history.add_user(text)
        self.recorder.message(self._turn_ids + 1, "user", text)
        if self.auto_respond:
            self.respond()

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
            self._barged = overlap.reply  # the turn's words may yet show it was no turn
            self._detector.check_overlap = self._may_resume()
            await self._interrupt(overlap.reply)
            if detector is not self._detector:
                return  # the speech was forgotten while the client was told (a reset)
        elif overlap is not None and overlap.action is Yield.PAUSE:
            await overlap.reply.pause(time.monotonic_ns(), self._flush_on_pause())
        elif overlap is not None:
            overlap.reply.resume()  # only a backchannel so far
        preempt = self._turns.pausing(
            detector.speech_ms(), detector.silence_ms(), may_hold=self.auto_respond
        )
        if preempt.discarded is not None:
            self._discard(preempt.discarded)
        elif preempt.start:
            self._start_held()

    async def _judge(self, event: TurnEvent) -> None:
        """The verdict on a silence that may end the turn (:class:`TurnJudge`). Awaited
        before the next window, so the detector's sample clock waits for it: the verdict
        lands on the same window whatever the engines' speed (the windows queue meanwhile,
        off the loop)."""
        detector = self._detector
        barged, cfg = self._barged, self.turn_config
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
        if not detector.smart:
            return  # the fixed silence ends the turn
        if self.services.turn_model is None or event.audio is None:
            detector.judged(Verdict.UNFINISHED)  # no model: the longest silence ends the turn
            return
        said, check = await self._turn_judge.judge(
            event,
            detector.as_ended(event.audio),
            self.turn_config,
            self._llm_may_judge,
            self.history.messages,
        )
        if detector is not self._detector:
            return  # the turn was reset (cleared, or turn-taking changed) meanwhile
        detector.judged(said)
        self._checks.append(check)

    def _may_resume(self) -> bool:
        """Speech that interrupted a reply may prove no turn, and the reply go on."""
        return self.auto_respond and self.turn_config.resume_false_interruptions

    def _flush_on_pause(self) -> bool:
        return self._flushes and self.turn_config.clear_on_pause

    def _llm_may_judge(self) -> bool:
        """The LLM judges words only where it is cheap: on the call's own sequence, which
        holds the conversation without tools (an agent with tools keeps it elsewhere), and
        while no reply of the call is speaking or generating on it."""
        turns = self._turns
        idle = turns.speaking() is None and turns.held is None
        return idle and not self.ledger.offered()

    async def _on_speech_started(self, event: TurnEvent) -> None:
        self._barged = None
        over = self._turns.speech_began()
        if over is not None:  # hold the audio first, then tell the client
            now = time.monotonic_ns()
            # event.sample starts the first speech window: when did that window arrive?
            over.barge_in = BargeIn(self._arrivals.of(event.sample + 1))
            await over.pause(now, self._flush_on_pause())
        self.partials.speech_started(self._turn_ids + 1, self._arrivals.of(event.sample + 1))
        await self._send_event(SpeechStarted(round(event.sample / 16, 1)))

    async def _on_turn_end(self, event: TurnEvent) -> None:
        assert event.audio is not None
        partials = self.partials.turn_ended().as_dict()
        checks, self._checks = self._checks, []
        end = self._turns.turn_ended(event.speech_ms)
        if end.backchannel:  # a backchannel or a cough over the reply: not a turn
            self.counts["backchannels"] += 1
            self._discard(end.discarded)
            if end.speaking is not None:
                end.speaking.resume()
            await self._send_event(SpeechStopped(round(event.sample / 16, 1), 0))
            return
        await self._send_event(SpeechStopped(round(event.sample / 16, 1), self._turn_ids + 1))
        self._answered.turn_ended(self._turn_ids + 1, event.sample)
        speech_end_ns = self._arrivals.of(event.sample)
        answer = self._turns.answer(end)
        if answer.confirm is not None:
            self._turn_judge.forget()  # the held reply took its transcript, if any
            self._turn_ids += 1
            self.counts["preempt_used"] += 1
            self.services.metrics.preemptions.labels("used").inc()
            answer.confirm.timeline.counters["partials"] = partials
            if checks:
                answer.confirm.timeline.counters["turn_model"] = checks
            await answer.confirm.confirm(speech_end_ns)
            return
        if answer.interrupt is not None:
            await self._interrupt(answer.interrupt)
        self._turn_ids += 1
        timeline = TurnTimeline(self._turn_ids)
        timeline.mark("speech_end", speech_end_ns)
        timeline.mark("eot")
        timeline.counters["partials"] = partials
        if checks:
            timeline.counters["turn_model"] = checks
        heard = self._turn_judge.transcript_of(event.start, event.sample)
        self._turn_judge.forget()
        reply = self._new_reply(
            timeline, event.audio, held=False, respond=self.auto_respond, heard=heard
        )
        self._turns.answered(reply)

    async def _interrupt(self, reply: Reply) -> None:
        await reply.interrupt(time.monotonic_ns())
        self.counts["interruptions"] += 1

    def _start_held(self) -> None:
        """Preemption: answer the turn so far while the caller is still (maybe) pausing."""
        timeline = TurnTimeline(self._turn_ids + 1)
        timeline.mark("speech_end", self._arrivals.of(self._detector.last_speech_end_sample))
        timeline.counters["preempted"] = True
        detector = self._detector
        heard = self._turn_judge.transcript_of(
            detector.speech_start_sample, detector.last_speech_end_sample
        )
        held = self._new_reply(timeline, detector.turn_audio(), held=True, heard=heard)
        self._turns.held_started(held)
        self.counts["preempt_started"] += 1

    def _discard(self, held: Reply | None) -> None:
        if held is not None:
            held.discard()
            self.counts["preempt_wasted"] += 1
            self.services.metrics.preemptions.labels("wasted").inc()

    def _new_reply(
        self,
        timeline: TurnTimeline,
        audio: np.ndarray | None,
        held: bool,
        respond: bool = True,
        text: str | None = None,
        tool_choice: str | None = None,
        heard: Transcription | None = None,
    ) -> Reply:
        # A summary may run while the caller speaks; the reply needs the LLM after its STT.
        self.summarizer.pause()
        return Reply(
            self.ctx,
            timeline,
            audio,
            held=held,
            previous=self._turns.reply,
            on_finish=self._on_reply_finished,
            respond=respond,
            text=text,
            tool_choice=tool_choice,
            resumes=self._barged if audio is not None else None,
            heard=heard,
        )

    def greet(self) -> int | None:
        """Say the agent's greeting, if it has one, as the call's first reply (a transport
        calls this once its call is up; a resumed call is not greeted again)."""
        greeting = self.services.greeting
        if not greeting or self._turn_ids or self.history.turns:
            return None
        return self.respond(say=greeting)

    def _commit_turn(self, turn_id: int, transcript: str) -> ChatMessage | None:
        """A reply is about to record a tool call: the caller's words of its turn go into
        the history first, and the turn counts as answered (its audio is not resent to
        another worker, which answers from the recorded call instead)."""
        self._answered.answered(turn_id)
        return self.history.add_user(transcript) if any(c.isalnum() for c in transcript) else None

    def _on_reply_finished(self, reply: Reply) -> None:
        """Runs inside the reply task, before the next reply reads the history."""
        user, assistant = reply.user_message, None
        if reply.continues:
            assistant = self._carry_on(reply)  # a second backchannel joins it again
        else:
            if user is None and any(ch.isalnum() for ch in reply.transcript):
                user = self.history.add_user(reply.transcript)
            if reply.answer_text and (user is not None or reply.audio is None):
                assistant = self.history.add_assistant(reply.answer_text)
        self._finished.remember(reply.turn_id, TurnMessages(user, assistant, reply.tracker))
        if reply.record is not None:
            reply.record["session_counts"] = dict(self.counts)
            self.turns.append(reply.record)
        self._last_activity_ns = time.monotonic_ns()
        self._answered.answered(reply.turn_id)
        self.persist()
        if self._ending is not None and self._end_task is None:
            if reply.status is ReplyStatus.INTERRUPTED:
                self._ending = None  # the caller talked over the goodbye: not over yet
            else:
                self._end_task = asyncio.create_task(
                    self._end_after_playback(self._ending), name=f"end-{self.id}"
                )
        if not self._detector.in_speech:  # else the caller's next reply needs the LLM first
            counters = reply.timeline.counters
            stale = bool(counters.get("tools")) or reply.status is ReplyStatus.INTERRUPTED
            self.summarizer.after_turn(counters.get("llm", {}), stale)

    def _carry_on(self, reply: Reply) -> ChatMessage | None:
        """A false interruption's reply said the rest of the one it stopped: the history
        holds the two as the one answer the caller heard, and no turn of the caller's.
        Returns the message that now holds the answer."""
        self.counts["false_interruptions"] += 1
        said, stopped = reply.answer_text, self._finished.get(reply.continues)
        held = stopped.assistant if stopped is not None else None
        if not said:
            return held
        if stopped is not None and held is not None:
            kept = held.content.split()
            kept = kept[: len(kept) - reply.repeats]  # the cut sentence is said again whole
            joined = self.history.replace(held, " ".join([*kept, said]))
            if joined is not None:
                stopped.assistant = joined
                return joined
        return self.history.add_assistant(said)

    # -- client reports and requests ------------------------------------------

    def history_snapshot(self) -> HistorySnapshot:
        return HistorySnapshot(
            [{"role": m.role, "content": m.content} for m in self.history.turns],
            self.history.summary,
            self.history.summarized_messages,
        )

    def playback_ack(self, seq: int) -> bool:
        """The client finished playing frame ``seq``; False if no reply owns it."""
        reply = self._turns.reply
        if reply is not None and reply.playback_ack(seq):
            return True
        # A frame of an earlier reply, still playing when the next turn ended: nothing to cut.
        return 0 < seq <= self._seq

    def client_turn(self, turn_id: int, timing: ClientTiming) -> ReportOutcome:
        """The client's own timing of turn ``turn_id`` (``client.turn``)."""
        return self._reports.take(turn_id, timing, self._turns.reply, self.transport)

    # -- lifecycle ------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a new server needs to carry this conversation on (persistence, restore)."""
        return {
            **self.history.saved(),
            **self.ledger.saved(),
            "turns": self._turn_ids,
            "audio_seq": self._seq,
            # caller audio to resend on a restore starts here (the session's input rate)
            "input_samples": self._answered.until * self.input_sample_rate // STT_SAMPLE_RATE,
            "input_sample_rate": self.input_sample_rate,
            "counts": dict(self.counts),
            "epoch": self.record.epoch,
            "owner": self.record.owner,
            "call_id": self.record.call_id,
        }

    def persist(self) -> None:
        """Save :meth:`state` to the store (queued; a no-op without one)."""
        self.recorder.save(self.state())

    def restore(self, state: dict[str, Any], audio_seq: int = 0) -> int:
        """Carry on a conversation another worker saved: its history, turn numbering and
        reply sequence numbers (past ``audio_seq`` too, the last frame the client has, so no
        frame number is used twice). Returns the input sample from which this session needs
        the caller's audio again: the end of the last answered turn."""
        rate = int(state.get("input_sample_rate") or self.input_sample_rate)
        input_samples = int(state.get("input_samples", 0)) * self.input_sample_rate // rate
        self.history.restore(state)
        self._turn_ids = int(state.get("turns", 0))
        self._seq = max(int(state.get("audio_seq", 0)), audio_seq)
        self.counts.update({k: v for k, v in state.get("counts", {}).items() if isinstance(v, int)})
        self.counts["restores"] += 1
        self._answered.restored(input_samples * STT_SAMPLE_RATE // self.input_sample_rate)
        reruns = self.ledger.restore(state, self._turn_ids)
        if self.history.turns or self.history.summary:
            self._rebuild = ContextRebuild(
                self.id, self.services, self.history.messages, self.counts, self.ledger.offered
            )
        if reruns or (self.history.turns and self.history.turns[-1].role == "tool"):
            # A tool's result (or its unknown outcome) comes after the last word: answer it.
            said = None if reruns or not self.ledger.unknown_after_restore else UNKNOWN_SAID
            self._restored_answer = asyncio.create_task(self._answer_restored(reruns, said))
        return input_samples

    async def _answer_restored(self, reruns: list[ToolRun], said: str | None) -> None:
        """``said``: the words for calls whose outcome is unknown, rather than the model's."""
        await asyncio.gather(*(run.task for run in reruns), return_exceptions=True)
        if not self.closed:
            self.respond(say=said)

    async def close(self, reason: str = "hangup") -> None:
        """Cancel the replies in flight and wait until their engine work has stopped."""
        if self.closed:
            return
        self.closed = self.ctx.closed = True
        await self._inbound.close()
        await self.partials.close()
        if self._rebuild is not None:
            await self._rebuild.close()
        for task in (self._restored_answer, self._end_task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for reply in (self._turns.held, self._turns.reply):
            if reply is not None and not reply.task.done():
                reply.cancel.cancel()
                reply.task.cancel()
                await reply.wait()
        await self.ledger.close()  # a tool that changes something may run to its end
        await self.summarizer.close()
        self.services.llm.forget(self.id)
        self.recorder.ended(reason, dict(self.counts))
        self.ctx.trace.end({"voxpipe.call.end": reason, "voxpipe.call.turns": self._turn_ids})

    def _reset_detector(self) -> None:
        fresh = TurnDetector(self.turn_config, self._window, STT_SAMPLE_RATE)
        fresh.samples = self._detector.samples
        self._detector, self._next_detector = fresh, None
        self._checks = []
        self._turn_judge.forget()
        forgotten = self._turns.reset()
        self._discard(forgotten.discarded)
        if forgotten.resume is not None:
            forgotten.resume.resume()  # paused for speech that is now forgotten

    async def wait_idle(self) -> None:
        """Wait for the reply in flight, if any (tests and graceful shutdown)."""
        if self._turns.reply is not None:
            await self._turns.reply.wait()
        await self.summarizer.wait()
