"""The native WebSocket protocol at ``/v1/voice`` (``docs/protocol.md``).

Decode and encode only: JSON text events and binary PCM16 frames in, typed
events and sequenced audio frames out. Every malformed message gets a typed
``error`` event and the connection carries on (but for a text frame that is not
UTF-8, which must end it: ``invalid_utf8``, close 1007); the policy lives in the session.
The events and their handling are the native protocol's (``native_protocol.py``), shared
with WebRTC's data channel; this module adds the WebSocket: audio frames, session.start
and the connection's lifetime.

A call outlives a dropped connection: its session waits ``resume_grace_s`` for
a ``session.start`` with the same ``session_id`` and a ``resume`` position. Whether it gets
the session back is decided in ``conversation/resume.py``; this module then sends what the
client missed from the replay buffer (``replay.py``) and says how much caller audio it has,
so the client resends the rest. Nothing is said twice and nothing is lost. A hang-up
(``session.end`` or any clean close) ends the call at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxpipe.config import TurnConfig
from voxpipe.conversation import ownership
from voxpipe.conversation.events import AudioOut, ErrorCode, ErrorEvent, Event, SessionStarted
from voxpipe.conversation.hang_up import hang_up
from voxpipe.conversation.resume import Restored, resume
from voxpipe.conversation.saved_state import new_session_id
from voxpipe.conversation.services import CallRecord
from voxpipe.conversation.session import Session
from voxpipe.transports.base import (
    SocketConnection,
    call_send_buffer,
    close_when_sent,
    describe_error,
    end_on_invalid_text,
    invalid_text,
    receive_by,
)
from voxpipe.transports.call import Call, CloseCode, Rates, SessionSinks
from voxpipe.transports.native_protocol import (
    ClientEvents,
    ResumeFrom,
    SessionStart,
    UnsupportedRate,
    error_text,
    merge_turn,
    start_rates,
    started_event,
)
from voxpipe.transports.replay import Outbound, Sent

log = logging.getLogger("voxpipe.native")

# A connection that vanished (no close frame, or a missed heartbeat) may come back; any
# other close, by either side, is a hang-up. uvicorn reports a vanished peer as 1005 or
# 1006, so a client that hangs up sends session.end or closes with a code (1000).
DROPPED_CODES = (1005, 1006, 1011)


class NativeTransport:
    name = "native"
    path = "/v1/voice"

    def subprotocol(self, ws: WebSocket) -> str | None:
        return None

    def error_text(self, code: ErrorCode, message: str) -> str | None:
        return error_text(code, message)

    async def serve(self, ws: WebSocket, call: Call) -> None:
        await NativeConnection(ws, call).run()


class NativeConnection(SocketConnection):
    def __init__(self, ws: WebSocket, call: Call) -> None:
        super().__init__(ws, call)
        self.session: Session | None = None
        self.outbound: Outbound | None = None
        self.sink = call_send_buffer(ws, call, "the client")
        self.sinks = SessionSinks(self.send_event, self.send_audio)
        self.events = ClientEvents.of_call(call, self.send_event, lambda: self.session, self._start)

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

    def _hand_over(self, outbound: Outbound, started: SessionStarted, missed: list[Sent]) -> None:
        """Point a resumed session's stream at this connection. Its ``session.started`` is
        not numbered: it belongs to this connection, not to the session's stream, and goes
        out before the replay (bounded by the replay buffer, not by the live send bound)."""
        self.sink.put(json.dumps(started.to_dict(), separators=(",", ":")), 0.0)
        for sent in missed:
            self.sink.put(sent.message, 0.0)
        outbound.sink = self.sink

    # -- receiving ----------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.create_task(self.sink.run(), name=f"send-{self.call.id}")
        deadline = time.monotonic() + self.cfg.server.start_timeout_s
        hangup = True
        try:
            while True:
                message = await receive_by(self.ws, None if self.session else deadline)
                if message is None:
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
                    if await self.events.handle(message["text"]):  # session.end
                        await close_when_sent(self.ws, self.sink, "session.end")
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
            self.call.registry.detach(session, outbound, grace, hang_up)
            return
        await hang_up(session)

    async def _on_audio(self, data: bytes) -> None:
        if len(data) > self.cfg.server.max_message_bytes:
            await self.error(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"binary message of {len(data)} bytes exceeds {self.cfg.server.max_message_bytes}",
            )
            return
        session = await self.events.started("audio")
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

    # -- session.start --------------------------------------------------------

    async def _start(self, payload: dict[str, Any]) -> None:
        if self.session is not None:
            await self.error(ErrorCode.ALREADY_STARTED, "this connection already has a session")
            return
        try:
            start = SessionStart.model_validate(payload)
            rates = start_rates(start, self.cfg.audio, self.services.engines.tts.sample_rate)
            turn = merge_turn(self.cfg.turn, start.turn)
        except ValidationError as exc:
            await self.error(ErrorCode.INVALID_EVENT, f"session.start: {describe_error(exc)}")
            return
        except UnsupportedRate as exc:
            await self.error(ErrorCode.UNSUPPORTED_SAMPLE_RATE, str(exc))
            return
        if start.resume is not None:
            await self._resume(start, start.resume, rates, turn)
            return
        principal = self.call.principal
        session_id = start.session_id or principal.session_id or new_session_id()
        refusal = await ownership.check_new(
            self.call.registry, self.services.store, principal, session_id
        )
        if refusal is not None:
            await self.error(refusal.code, refusal.message)
            return
        self.outbound = Outbound(rates.output, self.cfg.limits.replay_buffer_ms)
        self.outbound.sink = self.sink
        self.session = self.call.open_session(
            session_id, self.sinks, rates, turn, start.instructions
        )
        self.session.saved.persist()  # restorable elsewhere from its first word
        await self.send_event(
            started_event(self.services, self.session, self.cfg.audio.out_frame_ms)
        )
        self.session.greet()  # the agent's greeting, if it has one

    async def _resume(
        self, start: SessionStart, since: ResumeFrom, rates: Rates, turn: TurnConfig
    ) -> None:
        """Take over a session whose connection dropped (or is about to be replaced), or
        carry on one this worker never held from the store."""
        session_id = start.session_id
        if session_id is None:
            await self.error(ErrorCode.INVALID_EVENT, "session.start: resume needs session_id")
            return

        def open_restored(record: CallRecord) -> Session:
            return self.call.open_session(
                session_id, self.sinks, rates, turn, start.instructions, record=record
            )

        outcome = await resume(
            self.call.registry,
            self.services,
            self.call.principal,
            session_id,
            state_type=Outbound,
            open_restored=open_restored,
            audio_seq=since.last_audio_seq,
        )
        if isinstance(outcome, ownership.Refusal):
            await self.error(outcome.code, outcome.message)  # counted, as every error
            return
        if isinstance(outcome, Restored):  # nothing can be replayed
            session = outcome.session
            outbound = Outbound.continuing(rates.output, self.cfg.limits.replay_buffer_ms, since)
            outbound.input_samples = outcome.input_samples
            self.session, self.outbound = session, outbound
            started = self._resumed_event(session, outbound, restored=True)
            self._hand_over(outbound, started, [])
            return
        session, outbound = outcome.session, outcome.state
        self.session, self.outbound = session, outbound
        self.call.attach(session)
        missed, complete = outbound.missed(since)
        started = self._resumed_event(session, outbound, replayed=len(missed))
        self._hand_over(outbound, started, missed)
        if not complete:
            await self.error(
                ErrorCode.RESUME_FAILED,
                "some events or audio from before the reconnect are older than the replay "
                f"buffer ({self.cfg.limits.replay_buffer_ms} ms) and were not resent",
            )

    def _resumed_event(self, session: Session, outbound: Outbound, **what: Any) -> SessionStarted:
        frame_ms, samples = self.cfg.audio.out_frame_ms, outbound.input_samples
        return started_event(
            self.services, session, frame_ms, resumed=True, input_samples=samples, **what
        )
