"""One call: turn-taking policy between the caller and the replies.

Audio flows one way: transport -> :meth:`Session.push_audio` -> resample ->
VAD -> turn detector. The session decides what each detector event means:

* the end of a turn starts a :class:`~voxpipe.conversation.reply.Reply`, or
  confirms the one already started *held* during the pause (preemption);
* speech that resumes after preemption began discards the held reply;
* speech during a reply pauses its audio at once, interrupts it once it has
  lasted ``min_interruption_ms`` (barge-in), and otherwise, being only a
  backchannel or a cough, lets it resume and is not a turn.

Closing the session cancels every reply and waits for it, so no task or
engine job outlives the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from voxpipe.audio.buffers import DropNotice, DropReports, JitterBuffer
from voxpipe.audio.pcm import pcm16_to_float
from voxpipe.audio.resample import StreamResampler
from voxpipe.config import TurnConfig
from voxpipe.conversation.events import (
    AudioDropped,
    ErrorCode,
    HistorySnapshot,
    SpeechStarted,
    SpeechStopped,
)
from voxpipe.conversation.history import History
from voxpipe.conversation.partials import PartialTranscripts
from voxpipe.conversation.playback import Pacer, PlaybackTracker
from voxpipe.conversation.reply import Reply, ReplyContext, SendAudio, SendEvent
from voxpipe.conversation.services import CallRecord, Runners, Services
from voxpipe.conversation.summarizer import Summarizer
from voxpipe.conversation.turn_detector import TurnDetector, TurnEvent, TurnEventKind
from voxpipe.engines.base import STT_SAMPLE_RATE, CancelToken, ChatMessage, LlmUsage, Role
from voxpipe.engines.runner import JobClock
from voxpipe.observability.timeline import BargeIn, TurnTimeline

__all__ = ["CallRecord", "Runners", "Services", "Session", "new_call_id", "new_session_id"]

log = logging.getLogger("voxpipe.session")

RESUME_AFTER_SILENCE_MS = 96  # a backchannel is over once it has been silent this long
REMEMBERED_TURNS = 128  # finished turns whose messages a client may still edit
MIN_COMMIT_MS = 100  # less committed audio is not a turn (as the OpenAI Realtime API says)


def new_session_id() -> str:
    """A server-issued session id: 128 random bits, so knowing one call's id tells nothing
    about another's (a session id is what a reconnect presents)."""
    return secrets.token_hex(16)


def new_call_id() -> str:
    """The key of one call's record; a session id may be reused by a later call."""
    return secrets.token_hex(8)


def continued_record(state: dict[str, Any], session_id: str) -> CallRecord:
    """The record of a call restored from its saved ``state``: the same call, one epoch on,
    so the copy it was saved from can no longer overwrite it."""
    return CallRecord(
        str(state.get("call_id") or new_call_id()),
        session_id,
        state_owner(state),
        int(state.get("epoch", 0)) + 1,
    )


def state_owner(state: dict[str, Any]) -> str:
    """Who started the call a saved state belongs to (states saved before owners were
    recorded belong to the anonymous principal of a server without keys)."""
    return str(state.get("owner") or "anonymous")


@dataclass
class TurnMessages:
    """What a finished turn left in the history, so a client can edit it later."""

    user: ChatMessage | None
    assistant: ChatMessage | None
    tracker: PlaybackTracker  # which reply audio spoke which words


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
        owner: str = "anonymous",
        record: CallRecord | None = None,
    ) -> None:
        """``owner`` is the principal that started the call; ``record`` continues a call
        another worker recorded (a restore), else a new call record is begun."""
        self.id = session_id
        self.record = record or CallRecord(new_call_id(), session_id, owner)
        self.services = services
        self.cfg = services.config
        self._send_event = send_event
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
        self._reply: Reply | None = None  # the latest confirmed reply
        self._held: Reply | None = None  # preemptive reply waiting for the end of the turn
        self._overlap = False  # the caller's current speech began during a reply
        self.ctx = ReplyContext(
            session_id=session_id,
            record=self.record,
            services=services,
            send_event=send_event,
            send_audio=send_audio,
            next_seq=self._next_seq,
            pacer=Pacer(self.cfg.audio.playback_lead_ms),
            output_rate=output_sample_rate,
            history=self.history.messages,
        )
        self.summarizer = Summarizer(session_id, services, self.history)
        self.partials = PartialTranscripts(services, send_event)
        self.closed = False
        self._inbound = JitterBuffer(input_sample_rate, self.cfg.limits.inbound_buffer_ms)
        self.transport = "unknown"  # set by Call.attach; labels the dropped-audio counter
        self._drops = DropReports()
        self._drop_cause = ""
        self._drop_notices: asyncio.Task[None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._last_activity_ns = time.monotonic_ns()
        self.turns: list[dict[str, object]] = []
        self.counts: Counter[str] = Counter()
        self.server_vad = True  # False: the client ends turns itself (commit_input)
        self.auto_respond = True  # False: a turn's end starts no reply (respond asks)
        self._manual: deque[np.ndarray] = deque()  # 16 kHz audio awaiting commit_input
        self._manual_samples = 0
        self._finished: dict[int, TurnMessages] = {}  # oldest first, REMEMBERED_TURNS
        # Where the caller's audio is accounted for, for a restore on another worker: the end
        # (16 kHz sample, from the start of the call) of the last turn whose reply finished.
        self._sample_offset = 0  # 16 kHz samples of the call before this worker's first
        self._turn_ends: dict[int, int] = {}
        self._answered_until = 0
        self._rebuild: asyncio.Task[LlmUsage] | None = None  # the restored context's prefill
        self._rebuild_cancel = CancelToken()
        if services.store is not None:
            services.store.call_started(
                self.record,
                {
                    "input_sample_rate": input_sample_rate,
                    "output_sample_rate": output_sample_rate,
                    "turn": self.turn_config.model_dump(),
                },
            )

    @property
    def owner(self) -> str:
        """The principal that started the call (its record says)."""
        return self.record.owner

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def update_turn_config(self, turn_config: TurnConfig) -> None:
        """New turn-taking settings; a turn already in speech finishes under the old ones."""
        self.turn_config = turn_config
        self._next_detector = TurnDetector(turn_config, self._window, STT_SAMPLE_RATE)

    # -- inbound ------------------------------------------------------------

    def feed(self, pcm: bytes) -> None:
        """Queue inbound PCM16 at the session's input rate; never waits for the VAD."""
        dropped = self._inbound.put(pcm)
        if dropped:
            self.counts["inbound_dropped_ms"] += round(dropped / 2 * 1000 / self.input_sample_rate)
            self._dropped(
                dropped / 2 / self.input_sample_rate,
                f"caller audio arrived faster than real time and more than "
                f"{self.cfg.limits.inbound_buffer_ms} ms of it waited for the VAD "
                f"(limits.inbound_buffer_ms); the oldest went first",
            )
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._drain_inbound(), name=f"inbound-{self.id}")

    def _dropped(self, seconds: float, cause: str) -> None:
        """Caller audio is gone: count it, log the episode once, and tell the client (soon,
        and at most once a second during a flood, but every millisecond of it)."""
        policy = self._inbound.policy.value
        self.services.metrics.audio_dropped.labels("inbound", policy, self.transport).inc(seconds)
        self._drop_cause = cause
        if self._drops.add(seconds * 1000, time.monotonic()):
            log.warning(
                "session %s (%s): %s; %.0f ms dropped (%.0f ms in this call); counted in "
                "voxpipe_audio_dropped_seconds_total and told to the client (audio_dropped) "
                "where its protocol has errors; not logged again in this episode",
                self.id,
                self.transport,
                cause,
                seconds * 1000,
                self._drops.total_ms,
            )
        if self._drop_notices is None or self._drop_notices.done():
            self._drop_notices = asyncio.create_task(
                self._tell_drops(), name=f"audio-dropped-{self.id}"
            )

    async def _tell_drops(self) -> None:
        """Send the ``audio_dropped`` notices as they fall due, until none is pending."""
        while not self.closed and (due := self._drops.due_at()) is not None:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            notice = self._drops.take(time.monotonic())
            if notice is not None:
                await self._send_event(self._drop_event(notice))

    def _drop_event(self, notice: DropNotice) -> AudioDropped:
        return AudioDropped(
            ErrorCode.AUDIO_DROPPED.value,
            f"{notice.ms:.0f} ms of caller audio dropped ({notice.total_ms:.0f} ms in this "
            f"call): {self._drop_cause}",
            dropped_ms=round(notice.ms, 1),
            total_dropped_ms=round(notice.total_ms, 1),
        )

    async def keep_up(self, max_wait_s: float | None = None) -> None:
        """Backpressure for a burst: while over half the inbound bound waits for the VAD, hold
        the sender (up to ``limits.inbound_wait_ms``), so a client sending faster than real
        time, or catching up after a reconnect, is taken at the VAD's pace rather than
        dropped. A transport that stops reading makes TCP slow the sender. A VAD stalled
        for longer still loses the oldest audio, as the bound says, and the client is told."""
        if max_wait_s is None:
            max_wait_s = self.cfg.limits.inbound_wait_ms / 1000
        pump = self._pump
        if max_wait_s > 0 and pump is not None and not pump.done() and self._inbound.filling:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(pump), max_wait_s)

    async def push_audio(self, pcm: bytes) -> None:
        """Feed inbound PCM16 and wait until the VAD has seen it (tests, simple transports)."""
        self.feed(pcm)
        if self._pump is not None:
            await asyncio.shield(self._pump)

    async def _drain_inbound(self) -> None:
        age = self.services.metrics.buffer_age.labels("inbound")
        while not self.closed and len(self._inbound):
            for chunk in self._inbound.take():
                age.observe((time.monotonic_ns() - chunk.arrived_ns) / 1e9)
                await self._process(chunk.pcm, chunk.arrived_ns)

    def idle_s(self, now_ns: int) -> float:
        """Seconds with neither caller speech nor a reply (the idle timeout's clock)."""
        if self._detector.in_speech or self._speaking_reply() is not None or self._held:
            self._last_activity_ns = now_ns
        return (now_ns - self._last_activity_ns) / 1e9

    async def _process(self, pcm: bytes, arrived: int) -> None:
        audio = self._resampler.process(pcm16_to_float(pcm))
        if not self.server_vad:  # the client ends turns itself: no VAD, just keep it
            self._keep_manual(audio)
            return
        buf = np.concatenate([self._pending, audio]) if self._pending.size else audio
        n = buf.shape[0] // self._window
        self._pending = buf[n * self._window :]
        if n == 0:
            return
        windows = buf[: n * self._window]
        probs = await self.services.runners.vad.call(lambda: self._vad.process(windows), JobClock())
        for i, prob in enumerate(probs):
            window = windows[i * self._window : (i + 1) * self._window]
            self._received_samples += self._window
            self._arrivals.append((self._received_samples, arrived))
            if self._next_detector is not None and not self._detector.in_speech:
                self._next_detector.samples = self._detector.samples
                self._detector, self._next_detector = self._next_detector, None
            event = self._detector.push(window, prob)
            await self._on_window(prob, event)

    def _arrival_of(self, sample: int) -> int:
        for end, arrived in self._arrivals:
            if end >= sample:
                return arrived
        return time.monotonic_ns()

    def _speaking_reply(self) -> Reply | None:
        reply = self._reply
        return reply if reply is not None and reply.active and reply.respond else None

    async def _on_window(self, prob: float, event: TurnEvent | None) -> None:
        cfg, detector = self.turn_config, self._detector
        if event is not None and event.kind is TurnEventKind.SPEECH_STARTED:
            reply = self._speaking_reply()
            self._overlap = reply is not None and cfg.interrupt
            if reply is not None and self._overlap:  # hold the audio first, then tell the client
                now = time.monotonic_ns()
                # event.sample starts the first speech window: when did that window arrive?
                reply.barge_in = BargeIn(self._arrival_of(event.sample + 1))
                reply.pause(now)
            self.partials.speech_started(self._turn_ids + 1, self._arrival_of(event.sample + 1))
            await self._send_event(SpeechStarted(round(event.sample / 16, 1)))
            return
        if event is not None:
            await self._on_turn_end(event)
            return
        if not detector.in_speech:
            return
        if prob >= cfg.threshold:
            self.partials.speaking(round(detector.speech_ms() * 16), detector.turn_audio)
        reply = self._speaking_reply()
        if self._overlap and reply is not None:
            if detector.speech_ms() >= cfg.min_interruption_ms:
                await self._interrupt(reply)
            elif prob >= cfg.threshold:
                reply.pause(time.monotonic_ns())
            elif detector.silence_ms() >= RESUME_AFTER_SILENCE_MS:
                reply.resume()  # only a backchannel so far
        held = self._held
        if held is not None and (cfg.preempt_ms is None or detector.silence_ms() < cfg.preempt_ms):
            self._discard_held()  # the pause is over (any sound above release_threshold)
        elif (
            held is None
            and cfg.preempt_ms is not None
            and detector.silence_ms() >= cfg.preempt_ms
            and not (self._overlap and detector.speech_ms() < cfg.min_interruption_ms)
        ):
            self._start_held()

    async def _interrupt(self, reply: Reply) -> None:
        await reply.interrupt(time.monotonic_ns())
        self.counts["interruptions"] += 1
        self._overlap = False

    async def _on_turn_end(self, event: TurnEvent) -> None:
        assert event.audio is not None
        partials = self.partials.turn_ended().as_dict()
        overlap, self._overlap = self._overlap, False
        reply = self._speaking_reply()
        if overlap and event.speech_ms < self.turn_config.min_interruption_ms:
            # A backchannel or a cough over the reply: not a turn.
            self.counts["backchannels"] += 1
            self._discard_held()
            if reply is not None:
                reply.resume()
            await self._send_event(SpeechStopped(round(event.sample / 16, 1), 0))
            return
        await self._send_event(SpeechStopped(round(event.sample / 16, 1), self._turn_ids + 1))
        self._turn_ends[self._turn_ids + 1] = self._sample_offset + event.sample
        while len(self._turn_ends) > REMEMBERED_TURNS:
            del self._turn_ends[next(iter(self._turn_ends))]
        speech_end_ns = self._arrival_of(event.sample)
        held, self._held = self._held, None
        if held is not None and held.active:
            self._turn_ids += 1
            self.counts["preempt_used"] += 1
            self.services.metrics.preemptions.labels("used").inc()
            self._reply = held
            held.timeline.counters["partials"] = partials
            await held.confirm(speech_end_ns)
            return
        if reply is not None and self.turn_config.interrupt:
            await self._interrupt(reply)
        self._turn_ids += 1
        timeline = TurnTimeline(self._turn_ids)
        timeline.mark("speech_end", speech_end_ns)
        timeline.mark("eot")
        timeline.counters["partials"] = partials
        self._reply = self._new_reply(timeline, event.audio, held=False, respond=self.auto_respond)

    def _start_held(self) -> None:
        """Preemption: answer the turn so far while the caller is still (maybe) pausing."""
        if not self.auto_respond:
            return
        timeline = TurnTimeline(self._turn_ids + 1)
        timeline.mark("speech_end", self._arrival_of(self._detector.last_speech_end_sample))
        timeline.counters["preempted"] = True
        self._held = self._new_reply(timeline, self._detector.turn_audio(), held=True)
        self.counts["preempt_started"] += 1

    def _discard_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.discard()
            self.counts["preempt_wasted"] += 1
            self.services.metrics.preemptions.labels("wasted").inc()

    def _new_reply(
        self, timeline: TurnTimeline, audio: np.ndarray | None, held: bool, respond: bool = True
    ) -> Reply:
        # A summary may run while the caller speaks; the reply needs the LLM after its STT.
        self.summarizer.pause()
        return Reply(
            self.ctx,
            timeline,
            audio,
            held=held,
            previous=self._reply,
            on_finish=self._on_reply_finished,
            respond=respond,
        )

    def _on_reply_finished(self, reply: Reply) -> None:
        """Runs inside the reply task, before the next reply reads the history."""
        user = assistant = None
        if any(ch.isalnum() for ch in reply.transcript):
            user = self.history.add_user(reply.transcript)
        if reply.kept_text and (user is not None or reply.audio is None):
            assistant = self.history.add_assistant(reply.kept_text)
        self._remember(reply.turn_id, TurnMessages(user, assistant, reply.tracker))
        if reply.record is not None:
            reply.record["session_counts"] = dict(self.counts)
            self.turns.append(reply.record)
        self._last_activity_ns = time.monotonic_ns()
        end = self._turn_ends.pop(reply.turn_id, None)
        if end is not None:
            self._answered_until = max(self._answered_until, end)
        self.persist()
        if not self._detector.in_speech:  # else the caller's next reply needs the LLM first
            self.summarizer.after_turn(reply.timeline.counters.get("llm", {}))

    # -- client reports and requests ------------------------------------------

    def history_snapshot(self) -> HistorySnapshot:
        return HistorySnapshot(
            [{"role": m.role, "content": m.content} for m in self.history.turns],
            self.history.summary,
            self.history.summarized_messages,
        )

    def playback_ack(self, seq: int) -> bool:
        """The client finished playing frame ``seq``; False if no reply owns it."""
        reply = self._reply
        if reply is not None and reply.playback_ack(seq):
            return True
        # A frame of an earlier reply, still playing when the next turn ended: nothing to cut.
        return 0 < seq <= self._seq

    # -- lifecycle ------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What a new server needs to carry this conversation on (persistence, restore)."""
        return {
            "messages": [{"role": m.role, "content": m.content} for m in self.history.turns],
            "summary": self.history.summary,
            "summarized_messages": self.history.summarized_messages,
            "system_prompt": self.history.system_prompt,
            "turns": self._turn_ids,
            "audio_seq": self._seq,
            # caller audio to resend on a restore starts here (the session's input rate)
            "input_samples": self._answered_until * self.input_sample_rate // STT_SAMPLE_RATE,
            "input_sample_rate": self.input_sample_rate,
            "counts": dict(self.counts),
            "epoch": self.record.epoch,
            "owner": self.record.owner,
            "call_id": self.record.call_id,
        }

    def persist(self) -> None:
        """Save :meth:`state` to the store (queued; a no-op without one)."""
        if self.services.store is not None:
            self.services.store.save_state(self.record, self.state())

    def restore(self, state: dict[str, Any], audio_seq: int = 0) -> int:
        """Carry on a conversation another worker saved: its history, turn numbering and
        reply sequence numbers (past ``audio_seq`` too, the last frame the client has, so no
        frame number is used twice). Returns the input sample from which this session needs
        the caller's audio again: the end of the last answered turn."""
        rate = int(state.get("input_sample_rate") or self.input_sample_rate)
        input_samples = int(state.get("input_samples", 0)) * self.input_sample_rate // rate
        self.history.turns = [
            ChatMessage(m["role"], m["content"]) for m in state.get("messages", [])
        ]
        self.history.summary = str(state.get("summary", ""))
        self.history.summarized_messages = int(state.get("summarized_messages", 0))
        if state.get("system_prompt"):
            self.history.system_prompt = str(state["system_prompt"])
        self._turn_ids = int(state.get("turns", 0))
        self._seq = max(int(state.get("audio_seq", 0)), audio_seq)
        self.counts.update({k: v for k, v in state.get("counts", {}).items() if isinstance(v, int)})
        self.counts["restores"] += 1
        self._sample_offset = input_samples * STT_SAMPLE_RATE // self.input_sample_rate
        self._answered_until = self._sample_offset
        if self.history.turns or self.history.summary:
            self._rebuild = asyncio.create_task(self._rebuild_context(), name=f"rebuild-{self.id}")
        return input_samples

    async def _rebuild_context(self) -> LlmUsage:
        """Evaluate the restored history on this worker's LLM now, while the caller's audio
        is still being resent, so the next turn pays only for its own tokens. The seconds it
        takes are the cost of losing the worker that held the context."""
        llm, messages = self.services.engines.llm, self.history.messages()
        clock = JobClock()
        try:
            usage = await self.services.runners.llm.call(
                lambda: llm.prefill(self.id, messages, self._rebuild_cancel), clock
            )
        except Exception as exc:  # the next turn prefills it itself, only slower
            log.warning("session %s: context rebuild failed: %s", self.id, exc)
            return LlmUsage()
        self.counts["context_rebuild_ms"] = round(clock.compute_s * 1000)
        self.counts["context_rebuild_tokens"] = usage.prefill_tokens
        self.services.metrics.context_rebuild.observe(clock.compute_s)
        log.info(
            "session %s: rebuilt %d tokens of context in %.0f ms",
            self.id,
            usage.prefill_tokens,
            clock.compute_s * 1000,
        )
        return usage

    async def close(self, reason: str = "hangup") -> None:
        """Cancel the replies in flight and wait until their engine work has stopped."""
        if self.closed:
            return
        self.closed = self.ctx.closed = True
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        await self._last_drop_notice()
        await self.partials.close()
        if self._rebuild is not None:
            self._rebuild_cancel.cancel()
            self._rebuild.cancel()
            await asyncio.gather(self._rebuild, return_exceptions=True)
        for reply in (self._held, self._reply):
            if reply is not None and not reply.task.done():
                reply.cancel.cancel()
                reply.task.cancel()
                await reply.wait()
        await self.summarizer.close()
        self.services.engines.llm.forget(self.id)
        if self.services.store is not None:
            self.services.store.call_ended(self.record, reason, dict(self.counts))

    async def _last_drop_notice(self) -> None:
        """Drops not told yet are told now, while the client may still hear it."""
        if self._drop_notices is not None and not self._drop_notices.done():
            self._drop_notices.cancel()
            await asyncio.gather(self._drop_notices, return_exceptions=True)
        notice = self._drops.flush(time.monotonic())
        if notice is not None:
            with contextlib.suppress(Exception):  # the client may be gone: still counted
                await self._send_event(self._drop_event(notice))

    async def wait_idle(self) -> None:
        """Wait for the reply in flight, if any (tests and graceful shutdown)."""
        if self._reply is not None:
            await self._reply.wait()
        await self.summarizer.wait()

    # -- client-driven turns (OpenAI Realtime: commit, response.create, item edits) ----

    def set_turn_taking(self, server_vad: bool, auto_respond: bool) -> None:
        """Who ends the caller's turns: the VAD (the default) or the client
        (:meth:`commit_input`); and whether a turn's end starts a reply, or the client
        asks for one (:meth:`respond`). Speech or audio in progress under the old mode
        is dropped."""
        if server_vad != self.server_vad:
            self._reset_detector()
            self._take_manual()
        if not auto_respond:
            self._discard_held()
        self.server_vad, self.auto_respond = server_vad, auto_respond

    def set_system_prompt(self, text: str) -> None:
        """New instructions for the replies to come."""
        self.history.system_prompt = text

    def _reset_detector(self) -> None:
        fresh = TurnDetector(self.turn_config, self._window, STT_SAMPLE_RATE)
        fresh.samples = self._detector.samples
        self._detector, self._next_detector = fresh, None
        self._discard_held()
        self._overlap = False
        reply = self._speaking_reply()
        if reply is not None:
            reply.resume()  # paused for speech that is now forgotten

    def _keep_manual(self, audio: np.ndarray) -> None:
        """Bounded to ``max_turn_s``: the oldest audio goes first, and is counted."""
        self._manual.append(audio)
        self._manual_samples += audio.shape[0]
        limit = int(self.turn_config.max_turn_s * STT_SAMPLE_RATE)
        while self._manual_samples > limit and len(self._manual) > 1:
            dropped = self._manual.popleft()
            self._manual_samples -= dropped.shape[0]
            self.counts["manual_dropped_ms"] += round(dropped.shape[0] / 16)
            self._dropped(
                dropped.shape[0] / STT_SAMPLE_RATE,
                f"more than turn.max_turn_s ({self.turn_config.max_turn_s:g} s) of caller audio "
                f"waited for a commit; the oldest went first",
            )

    def _take_manual(self) -> np.ndarray:
        audio = np.concatenate(list(self._manual)) if self._manual else np.zeros(0, np.float32)
        self._manual.clear()
        self._manual_samples = 0
        return audio

    def clear_input(self) -> None:
        """Forget the caller audio that is not part of a turn yet (unprocessed, buffered for
        a commit, or speech the VAD is in the middle of)."""
        self._inbound.take()
        self._take_manual()
        if self._detector.in_speech:
            self._reset_detector()

    async def commit_input(self) -> int | None:
        """Manual turns: the audio received since the last commit is one caller turn. It is
        transcribed and joins the history unanswered (:meth:`respond` asks for a reply).
        Returns its turn id; None if under ``MIN_COMMIT_MS`` of audio was buffered."""
        if self._pump is not None and not self._pump.done():
            await asyncio.shield(self._pump)  # what was sent before the commit belongs to it
        if self._manual_samples < MIN_COMMIT_MS * STT_SAMPLE_RATE // 1000:
            return None
        self._turn_ids += 1
        timeline = TurnTimeline(self._turn_ids)
        timeline.mark("speech_end")
        timeline.mark("eot")
        self._reply = self._new_reply(timeline, self._take_manual(), held=False, respond=False)
        return self._turn_ids

    @property
    def responding(self) -> bool:
        """A reply is being prepared or spoken."""
        return self._speaking_reply() is not None

    def respond(self) -> int:
        """Answer the conversation as it stands, with no new caller audio (a client asked,
        e.g. OpenAI ``response.create``). It starts once the turn before it is done.
        Returns the reply's turn id."""
        self._turn_ids += 1
        timeline = TurnTimeline(self._turn_ids)
        timeline.mark("speech_end")  # the request: voice-to-voice runs from here
        timeline.mark("eot")
        self._reply = self._new_reply(timeline, None, held=False)
        return self._turn_ids

    async def cancel_response(self) -> bool:
        """Stop the reply in flight; the history keeps what the caller heard of it.
        False if none is in flight."""
        reply = self._speaking_reply()
        if reply is None:
            return False
        await reply.cancel_by_client(time.monotonic_ns())
        return True

    async def truncate_reply(self, turn_id: int, audio_end_ms: float) -> str | None:
        """The client played reply ``turn_id`` only up to ``audio_end_ms`` of its audio
        (its own report, e.g. OpenAI ``conversation.item.truncate``): the history keeps
        just the words spoken until then. A reply still in flight stops there. Returns the
        text kept; None if that reply is unknown (never finished here, or too old)."""
        reply = self._reply
        if reply is not None and reply.turn_id == turn_id and not reply.task.done():
            reply.tracker.ack_ms(audio_end_ms)
            if not reply.cancel.cancelled:
                await reply.interrupt(time.monotonic_ns())
                self.counts["truncations"] += 1
            await reply.wait()
        turn = self._finished.get(turn_id)
        if turn is None:
            return None
        tracker = turn.tracker
        heard = min(tracker.sent_samples, int(audio_end_ms * tracker.rate / 1000))
        text = tracker.text_until(heard)
        if turn.assistant is not None:
            if text:
                turn.assistant = self.history.replace(turn.assistant, text)
            else:
                self.history.remove(turn.assistant)
                turn.assistant = None
        elif text and turn.user is not None:
            message = ChatMessage("assistant", text)
            if self.history.insert_after(turn.user, message):
                turn.assistant = message
        return text

    def add_message(self, role: Role, text: str) -> ChatMessage:
        """A message the client writes into the conversation (text, no audio)."""
        return self.history.add(role, text)

    def delete_message(self, message: ChatMessage) -> bool:
        """Take a message out of the history; False if it is already gone."""
        for turn in self._finished.values():
            if turn.user is message:
                turn.user = None
            if turn.assistant is message:
                turn.assistant = None
        return self.history.remove(message)

    def turn_messages(self, turn_id: int) -> TurnMessages | None:
        """What finished turn ``turn_id`` left in the history; None while it is in flight
        (or when it is too old to be remembered)."""
        return self._finished.get(turn_id)

    def _remember(self, turn_id: int, messages: TurnMessages) -> None:
        self._finished[turn_id] = messages
        while len(self._finished) > REMEMBERED_TURNS:
            del self._finished[next(iter(self._finished))]
