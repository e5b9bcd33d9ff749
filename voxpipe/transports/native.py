"""The native WebSocket protocol at ``/v1/voice`` (``docs/protocol.md``).

Decode and encode only: JSON text events and binary PCM16 frames in, typed
events and sequenced audio frames out. Every malformed message gets a typed
``error`` event and the connection carries on (but for a text frame that is not
UTF-8, which must end it: ``invalid_utf8``, close 1007); the policy lives in the session.

A call outlives a dropped connection: its session waits ``resume_grace_s`` for
a ``session.start`` with the same ``session_id`` and a ``resume`` position, then
gets the events and frames it missed from a bounded replay buffer, and says how
much caller audio it has, so the client resends the rest. Nothing is said twice
and nothing is lost. A hang-up (``session.end`` or any clean close) ends the
call at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxpipe.config import TurnConfig
from voxpipe.conversation import ownership
from voxpipe.conversation.events import (
    AudioOut,
    ErrorCode,
    ErrorEvent,
    Event,
    Pong,
    SessionStarted,
    SessionUpdated,
)
from voxpipe.conversation.saved_state import continued_record, new_session_id, state_owner
from voxpipe.conversation.services import Services
from voxpipe.conversation.session import Session
from voxpipe.transports.base import (
    Undecodable,
    call_send_buffer,
    decode_json,
    describe_error,
    end_on_invalid_text,
    invalid_text,
)
from voxpipe.transports.call import Call, CallEnd, CloseCode, Rates, SessionSinks
from voxpipe.transports.send_buffer import SendBuffer

log = logging.getLogger("voxpipe.native")

AUDIO_HEADER = struct.Struct("<II")  # seq, turn_id; then PCM16LE mono
# A connection that vanished (no close frame, or a missed heartbeat) may come back; any
# other close, by either side, is a hang-up. uvicorn reports a vanished peer as 1005 or
# 1006, so a client that hangs up sends session.end or closes with a code (1000).
DROPPED_CODES = (1005, 1006, 1011)
REPLAY_MAX_EVENTS = 4096


class TurnOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    threshold: float | None = Field(None, gt=0.0, lt=1.0)
    prefix_padding_ms: int | None = Field(None, ge=0, le=2000)
    silence_ms: int | None = Field(None, ge=32, le=5000)
    min_speech_ms: int | None = Field(None, ge=0, le=2000)
    interrupt: bool | None = None
    min_interruption_ms: int | None = Field(None, ge=0, le=3000)
    preempt_ms: int | None = Field(None, ge=0, le=5000)  # 0 = off


class ResumeFrom(BaseModel):
    """Where a reconnecting client is: the last event and frame it got."""

    model_config = ConfigDict(extra="forbid", strict=True)

    last_event_id: int = Field(0, ge=0)
    last_audio_seq: int = Field(0, ge=0)


class SessionStart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["session.start"]
    session_id: str | None = Field(None, min_length=1, max_length=128)
    input_sample_rate: int | None = None
    output_sample_rate: int | None = None
    instructions: str | None = Field(None, max_length=8000)
    turn: TurnOptions | None = None
    resume: ResumeFrom | None = None


class PlaybackAck(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["playback.ack"]
    seq: int = Field(ge=1, lt=2**32)


class SessionUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["session.update"]
    turn: TurnOptions | None = None


def native_decode_error(why: Undecodable) -> str:
    """The native protocol's words for a message that is not JSON (or too big to read)."""
    if why.code is ErrorCode.MESSAGE_TOO_LARGE:
        return f"text message {why.reason}"
    return f"not valid JSON: {why.reason}{why.where}"


def error_text(code: ErrorCode, message: str) -> str:
    return json.dumps(ErrorEvent.of(code, message).to_dict())


class NativeTransport:
    name = "native"
    path = "/v1/voice"

    def subprotocol(self, ws: WebSocket) -> str | None:
        return None

    def error_text(self, code: ErrorCode, message: str) -> str | None:
        return error_text(code, message)

    async def serve(self, ws: WebSocket, call: Call) -> None:
        await NativeConnection(ws, call).run()


@dataclass
class _Sent:
    event_id: int  # 0 for audio
    audio_seq: int  # 0 for events
    message: str | bytes
    audio_ms: float


class Outbound:
    """A session's outbound stream, across reconnects: numbers every event, keeps the
    recent messages for a replay, and hands each to the connection of the moment."""

    def __init__(self, rate: int, replay_ms: int) -> None:
        self.rate = rate
        self.replay_ms = replay_ms
        self.last_event_id = 0
        self.last_audio_seq = 0
        self._ring: deque[_Sent] = deque()
        self._ring_audio_ms = 0.0
        self.forgotten_event_id = 0  # replay cannot go back past these
        self.forgotten_audio_seq = 0
        self.sink: SendBuffer | None = None
        self.input_samples = 0  # caller audio received, at the session's input rate

    def event(self, event: Event) -> _Sent:
        self.last_event_id += 1
        body = {**event.to_dict(), "event_id": self.last_event_id}
        sent = _Sent(self.last_event_id, 0, json.dumps(body, separators=(",", ":")), 0.0)
        self._keep(sent)
        return sent

    def audio(self, frame: AudioOut) -> None:
        self.last_audio_seq = frame.seq
        ms = len(frame.pcm) / 2 * 1000 / self.rate
        self._keep(_Sent(0, frame.seq, AUDIO_HEADER.pack(frame.seq, frame.turn_id) + frame.pcm, ms))

    def _keep(self, sent: _Sent) -> None:
        self._ring.append(sent)
        self._ring_audio_ms += sent.audio_ms
        while self._ring and (
            self._ring_audio_ms > self.replay_ms or len(self._ring) > REPLAY_MAX_EVENTS
        ):
            old = self._ring.popleft()
            self._ring_audio_ms -= old.audio_ms
            self.forgotten_event_id = max(self.forgotten_event_id, old.event_id)
            self.forgotten_audio_seq = max(self.forgotten_audio_seq, old.audio_seq)
        if self.sink is not None:
            self.sink.put(sent.message, sent.audio_ms)

    def missed(self, since: ResumeFrom) -> tuple[list[_Sent], bool]:
        """What a client at ``since`` has not received; False if some of it is gone."""
        complete = (
            since.last_event_id >= self.forgotten_event_id
            and since.last_audio_seq >= self.forgotten_audio_seq
        )
        missed = [
            s
            for s in self._ring
            if (s.event_id and s.event_id > since.last_event_id)
            or (s.audio_seq and s.audio_seq > since.last_audio_seq)
        ]
        return missed, complete


class NativeConnection:
    def __init__(self, ws: WebSocket, call: Call) -> None:
        self.ws = ws
        self.call = call
        self.services = call.services
        self.cfg = call.services.config
        self.session: Session | None = None
        self.outbound: Outbound | None = None
        self.sink = call_send_buffer(ws, call, "the client")
        self.sinks = SessionSinks(self.send_event, self.send_audio)

    # -- sending ------------------------------------------------------------

    async def send_event(self, event: Event) -> None:
        if isinstance(event, ErrorEvent):
            self.services.metrics.errors.labels(event.code).inc()
        if self.outbound is not None:
            self.outbound.event(event)
        else:  # before session.start: not part of any session's stream
            self.sink.put(json.dumps(event.to_dict(), separators=(",", ":")), 0.0)

    async def send_audio(self, frame: AudioOut) -> None:
        assert self.outbound is not None
        self.outbound.audio(frame)

    async def error(self, code: ErrorCode, message: str) -> None:
        await self.send_event(ErrorEvent.of(code, message))

    async def _started(self, what: str) -> Session | None:
        """The session, or None after telling the client ``what`` needs session.start first."""
        if self.session is None:
            await self.error(ErrorCode.NOT_STARTED, f"send session.start before {what}")
        return self.session

    # -- receiving ----------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.create_task(self.sink.run(), name=f"send-{self.call.id}")
        deadline = time.monotonic() + self.cfg.server.start_timeout_s
        hangup = True
        try:
            while True:
                timeout = None if self.session else max(0.0, deadline - time.monotonic())
                try:
                    message = await asyncio.wait_for(self.ws.receive(), timeout)
                except TimeoutError:
                    await self.error(ErrorCode.START_TIMEOUT, "no session.start received in time")
                    await self.sink.flush(1.0)
                    await self.ws.close(CloseCode.POLICY, "start_timeout: no session.start in time")
                    return
                if message["type"] == "websocket.disconnect":
                    hangup = message.get("code", 1000) not in DROPPED_CODES
                    return
                if message.get("bytes") is not None:
                    await self._on_audio(message["bytes"])
                elif message.get("text") is not None:
                    if await self._on_text(message["text"]) == "end":
                        await self.sink.flush(2.0)
                        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                            await self.ws.close(CloseCode.NORMAL, "session.end")  # may be gone
                        return
                elif (detail := invalid_text(message)) is not None:
                    await end_on_invalid_text(self.call, detail)
                    return
        except WebSocketDisconnect as exc:
            hangup = exc.code not in DROPPED_CODES
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            await self._leave(hangup)

    async def _leave(self, hangup: bool) -> None:
        """Hang up, or keep the session for a reconnect after a dropped connection."""
        session, outbound = self.session, self.outbound
        if session is None or outbound is None:
            return
        if outbound.sink is self.sink:
            outbound.sink = None
        ended = self.call.ended
        replaced = ended is not None and ended.code is ErrorCode.SESSION_REPLACED
        grace = self.cfg.server.resume_grace_s
        dropped = not hangup and ended is None and not self.sink.overflowed
        if replaced or (dropped and grace > 0):
            log.info("session %s detached; waiting %.0f s for a reconnect", session.id, grace)
            self.call.registry.detach(session, outbound, grace, _close_session(self.services))
            return
        await _close_session(self.services)(session)

    async def _on_audio(self, data: bytes) -> None:
        if len(data) > self.cfg.server.max_message_bytes:
            await self.error(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"binary message of {len(data)} bytes exceeds {self.cfg.server.max_message_bytes}",
            )
            return
        session = await self._started("audio")
        if session is None or self.outbound is None:
            return
        rate = session.input_sample_rate
        max_bytes = rate * self.cfg.audio.max_frame_ms // 1000 * 2
        if not data or len(data) % 2 or len(data) > max_bytes:
            await self.error(
                ErrorCode.BAD_AUDIO_FRAME,
                f"audio frames must be PCM16 mono: an even, non-zero number of bytes up to "
                f"{max_bytes} ({self.cfg.audio.max_frame_ms} ms at {rate} Hz); got {len(data)}",
            )
            return
        self.outbound.input_samples += len(data) // 2
        session.feed(data)
        # A client sending faster than real time (catching up after a reconnect, or just
        # fast) waits for the VAD: this loop stops reading and TCP slows the sender.
        await session.keep_up()

    async def _on_text(self, text: str) -> str | None:
        payload = decode_json(text, self.cfg.server.max_message_bytes)
        if isinstance(payload, Undecodable):
            await self.error(payload.code, native_decode_error(payload))
            return None
        if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
            await self.error(
                ErrorCode.INVALID_EVENT, "an event is a JSON object with a string 'type'"
            )
            return None
        kind = payload["type"]
        if kind == "session.start":
            await self._start(payload)
        elif kind == "session.update":
            await self._update(payload)
        elif kind == "playback.ack":
            await self._ack(payload)
        elif kind == "history.get":
            if (session := await self._started("history.get")) is not None:
                await self.send_event(session.history_snapshot())
        elif kind == "ping":
            await self.send_event(Pong())
        elif kind == "session.end":
            return "end"
        else:
            await self.error(ErrorCode.UNKNOWN_EVENT, f"unknown event type {kind[:64]!r}")
        return None

    async def _ack(self, payload: dict[str, Any]) -> None:
        session = await self._started("playback.ack")
        if session is None:
            return
        try:
            ack = PlaybackAck.model_validate(payload)
        except ValidationError as exc:
            await self.error(ErrorCode.INVALID_EVENT, f"playback.ack: {describe_error(exc)}")
            return
        if not session.playback_ack(ack.seq):
            await self.error(ErrorCode.INVALID_EVENT, f"playback.ack: no reply frame {ack.seq}")

    def _check_rate(self, rate: int | None, default: int) -> int:
        rate = default if rate is None else rate
        lo, hi = self.cfg.audio.min_sample_rate, self.cfg.audio.max_sample_rate
        if not lo <= rate <= hi:
            raise _BadRate(f"sample rate {rate} is outside {lo}..{hi} Hz")
        return rate

    async def _start(self, payload: dict[str, Any]) -> None:
        if self.session is not None:
            await self.error(ErrorCode.ALREADY_STARTED, "this connection already has a session")
            return
        try:
            start = SessionStart.model_validate(payload)
            tts_rate = self.services.engines.tts.sample_rate
            in_rate = self._check_rate(start.input_sample_rate, self.cfg.audio.input_sample_rate)
            out_rate = self._check_rate(
                start.output_sample_rate, self.cfg.audio.output_sample_rate or tts_rate
            )
            turn = merge_turn(self.cfg.turn, start.turn)
        except ValidationError as exc:
            await self.error(ErrorCode.INVALID_EVENT, f"session.start: {describe_error(exc)}")
            return
        except _BadRate as exc:
            await self.error(ErrorCode.UNSUPPORTED_SAMPLE_RATE, str(exc))
            return
        if start.resume is not None:
            await self._resume(start, start.resume, Rates(in_rate, out_rate), turn)
            return
        principal = self.call.principal
        session_id = start.session_id or principal.session_id or new_session_id()
        refusal = await ownership.check_new(
            self.call.registry, self.services.store, principal, session_id
        )
        if refusal is not None:
            await self.error(refusal.code, refusal.message)
            return
        self.outbound = Outbound(out_rate, self.cfg.limits.replay_buffer_ms)
        self.outbound.sink = self.sink
        self.session = self.call.open_session(
            session_id, self.sinks, Rates(in_rate, out_rate), turn, start.instructions
        )
        self.session.persist()  # restorable elsewhere from its first word
        await self.send_event(self._started_event(self.session))

    def _started_event(self, session: Session, **resumed: Any) -> SessionStarted:
        engines = self.services.engines
        return SessionStarted(
            session_id=session.id,
            input_sample_rate=session.input_sample_rate,
            output_sample_rate=session.output_sample_rate,
            out_frame_ms=self.cfg.audio.out_frame_ms,
            config={"turn": session.turn_config.model_dump()},
            models={
                "vad": engines.vad.name,
                "stt": engines.stt.name,
                "llm": engines.llm.name,
                "tts": engines.tts.name,
            },
            **resumed,
        )

    async def _resume(
        self, start: SessionStart, since: ResumeFrom, rates: Rates, turn: TurnConfig
    ) -> None:
        """Take over a session whose connection dropped (or is about to be replaced)."""
        registry, principal = self.call.registry, self.call.principal
        session_id = start.session_id
        if session_id is None:
            await self.error(ErrorCode.INVALID_EVENT, "session.start: resume needs session_id")
            return
        owner = registry.owner_of(session_id)
        if owner is not None and not ownership.may_resume(principal, owner, session_id):
            log.warning(
                "refused a resume of session %s by %s: it belongs to another principal",
                session_id[:64],
                principal.id,
            )
            await self._not_found(session_id)  # counted by send_event, as every error
            return
        live = registry.find_attached(session_id)
        if live is not None and live is not self.call:
            await live.end(
                CallEnd(
                    ErrorCode.SESSION_REPLACED,
                    "the session reconnected on another connection",
                    CloseCode.REPLACED,
                )
            )
        entry = registry.reattach(session_id)
        if entry is None or not isinstance(entry.state, Outbound):
            if not await self._restore(start, since, rates, turn):
                await self._not_found(session_id)
            return
        session, outbound = entry.session, entry.state
        if await self._moved_on(session):
            # While it waited here the session went on on another worker: this copy is old.
            await _close_session(self.services)(session)  # its writes are fenced off
            if not await self._restore(start, since, rates, turn):
                await self.error(ErrorCode.RESUME_FAILED, "the session's state is gone")
            return
        self.session, self.outbound = session, outbound
        self.call.attach(session)
        missed, complete = outbound.missed(since)
        session.counts["resumes"] += 1
        # Not numbered: it belongs to this connection, not to the session's stream, and goes
        # out before the replay.
        started = self._started_event(
            session, resumed=True, input_samples=outbound.input_samples, replayed=len(missed)
        )
        self.sink.put(json.dumps(started.to_dict(), separators=(",", ":")), 0.0)
        for sent in missed:  # bounded by the replay buffer, not by the live send bound
            self.sink.put(sent.message, 0.0)
        outbound.sink = self.sink
        if not complete:
            await self.error(
                ErrorCode.RESUME_FAILED,
                "some events or audio from before the reconnect are older than the replay "
                f"buffer ({self.cfg.limits.replay_buffer_ms} ms) and were not resent",
            )

    async def _not_found(self, session_id: str) -> None:
        refusal = ownership.not_found(session_id)
        await self.error(refusal.code, refusal.message)

    async def _moved_on(self, session: Session) -> bool:
        """A shared store holds a newer epoch of ``session`` than this worker's copy."""
        store = self.services.store
        if store is None or not store.shared:
            return False
        state = await store.load_state(session.id)
        return state is not None and int(state.get("epoch", 0)) > session.record.epoch

    async def _restore(
        self, start: SessionStart, since: ResumeFrom, rates: Rates, turn: TurnConfig
    ) -> bool:
        """Carry on a session this worker never held (its worker died, or the load balancer
        moved it) from the state in the shared store. Nothing can be replayed: the client
        resends its audio from the last answered turn, which this worker answers again."""
        store, metrics = self.services.store, self.services.metrics
        session_id = start.session_id
        assert session_id is not None
        state = await store.load_state(session_id) if store is not None else None
        if state is None:
            metrics.restores.labels("not_found").inc()
            return False
        if not ownership.may_resume(self.call.principal, state_owner(state), session_id):
            log.warning(
                "refused a restore of session %s by %s: it belongs to another principal",
                session_id[:64],
                self.call.principal.id,
            )
            metrics.restores.labels("not_owner").inc()
            return False
        if self.call.registry.find_session(session_id):  # restored meanwhile by a twin
            return False
        outbound = Outbound(rates.output, self.cfg.limits.replay_buffer_ms)
        # Numbering goes on from where the client is; nothing before it can be replayed.
        outbound.last_event_id = outbound.forgotten_event_id = since.last_event_id
        outbound.forgotten_audio_seq = since.last_audio_seq
        session = self.call.open_session(
            session_id,
            self.sinks,
            rates,
            turn,
            start.instructions,
            record=continued_record(state, session_id),  # its owner: this principal
        )
        outbound.input_samples = session.restore(state, audio_seq=since.last_audio_seq)
        outbound.last_audio_seq = since.last_audio_seq
        self.session, self.outbound = session, outbound
        session.counts["resumes"] += 1
        metrics.restores.labels("restored").inc()
        log.info(
            "session %s restored from the store: %d messages, turn %d, resend from sample %d",
            session_id,
            len(session.history.turns),
            state.get("turns", 0),
            outbound.input_samples,
        )
        started = self._started_event(
            session, resumed=True, restored=True, input_samples=outbound.input_samples
        )
        self.sink.put(json.dumps(started.to_dict(), separators=(",", ":")), 0.0)
        outbound.sink = self.sink
        session.persist()
        return True

    async def _update(self, payload: dict[str, Any]) -> None:
        session = await self._started("session.update")
        if session is None:
            return
        try:
            update = SessionUpdate.model_validate(payload)
            turn = merge_turn(session.turn_config, update.turn)
        except ValidationError as exc:
            await self.error(ErrorCode.INVALID_EVENT, f"session.update: {describe_error(exc)}")
            return
        session.update_turn_config(turn)
        await self.send_event(SessionUpdated(config={"turn": turn.model_dump()}))


def _close_session(services: Services) -> Callable[[Session], Coroutine[Any, Any, None]]:
    """Hang up: cancel the session's work; the time it takes is the hang-up cleanup metric."""

    async def close(session: Session) -> None:
        started = time.monotonic()
        await session.close()
        services.metrics.hangup_cleanup.observe(time.monotonic() - started)

    return close


class _BadRate(ValueError):
    pass


def merge_turn(base: TurnConfig, options: TurnOptions | None) -> TurnConfig:
    if options is None:
        return base
    changes = {k: v for k, v in options.model_dump().items() if v is not None}
    if changes.get("preempt_ms") == 0:
        changes["preempt_ms"] = None
    return TurnConfig.model_validate({**base.model_dump(), **changes})
