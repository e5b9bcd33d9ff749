"""One telephony media stream (a phone call over a provider's WebSocket), whoever the
provider: what ``base.py``'s providers translate, done here once.

- the session's lifecycle: created at the start (its id is the provider's stream id), greeted,
  fed, closed on the provider's stop, on hang-up, or by the agent's ``end_call`` (close 1000
  once the goodbye has played);
- the audio: decoding the caller's frames (:mod:`codec`: μ-law, A-law, L16 either way round)
  within ``audio.max_frame_ms``, encoding each reply frame, padded to whole 20 ms frames for
  providers that ask for them;
- what the caller heard: a mark after every reply frame, named ``seq:<frame seq>``, whose echo
  is the session's ``playback_ack``; a barge-in's ``playback.clear`` becomes the provider's
  clear, and the marks it dropped are known as not heard (whether or not the provider echoes
  them). Both tables are bounded (:data:`PENDING_MARKS`, the oldest forgotten);
- key presses to the session's keypad; the caller's number and the call's instructions from
  the start's parameters;
- bad input: no provider has an error channel, so a malformed message is logged (the first
  :data:`LOGGED_BAD_MESSAGES`) and counted in ``voxpipe_errors_total{code}``, and the call
  goes on; only an unusable start ends it (1008), and a text frame that is not UTF-8 (1007).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
import time
from collections import deque

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxpipe.conversation import ownership
from voxpipe.conversation.events import (
    AudioOut,
    ErrorCode,
    ErrorEvent,
    Event,
)
from voxpipe.conversation.hang_up import hang_up
from voxpipe.conversation.session import Session
from voxpipe.transports.base import (
    SocketConnection,
    Undecodable,
    act_on_line,
    call_send_buffer,
    close_reason,
    decode_json,
    describe_error,
    end_on_invalid_text,
    invalid_text,
    receive_by,
)
from voxpipe.transports.call import Call, CloseCode, Rates, SessionSinks
from voxpipe.transports.telephony.base import (
    MAX_INSTRUCTIONS,
    Audio,
    Digit,
    Ignored,
    Played,
    Provider,
    ProviderError,
    ProviderEvent,
    Refused,
    Started,
    Stopped,
)

MARK_PREFIX = "seq:"  # a mark's name is "seq:<frame seq>"
_MARK_NAME = re.compile(rf"^{re.escape(MARK_PREFIX)}([0-9]{{1,10}})$")
PENDING_MARKS = 1500  # marks awaiting their echo (30 s of 20 ms frames); the oldest is forgotten
LOGGED_BAD_MESSAGES = 10  # per call; later ones are only counted


class MediaStream(SocketConnection):
    """One provider WebSocket: one call, one session, created at the start."""

    def __init__(self, ws: WebSocket, call: Call, provider: Provider) -> None:
        super().__init__(ws, call)
        self.provider = provider
        self.log = logging.getLogger(f"voxpipe.{provider.name}")
        self.session: Session | None = None
        self.stream: Started | None = None
        self.bad_messages = 0
        self.problem = ""  # the last bad message: a refusal's close reason
        self._unplayed: deque[int] = deque(maxlen=PENDING_MARKS)  # marks sent, not echoed
        self._cleared_last = False  # the last thing sent was a clear: another is a no-op
        self._cleared: deque[int] = deque(maxlen=PENDING_MARKS)  # marks a clear dropped
        self.sink = call_send_buffer(ws, call, provider.title)

    @property
    def stream_id(self) -> str:
        return (self.stream.stream or "") if self.stream else ""

    # -- receiving ----------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.create_task(self.sink.run(), name=f"send-{self.call.id}")
        deadline = time.monotonic() + self.cfg.server.start_timeout_s
        try:
            while True:
                message = await receive_by(self.ws, None if self.session else deadline)
                if message is None:
                    self._bad(ErrorCode.START_TIMEOUT, "no start message received in time")
                    await self._close(CloseCode.POLICY)
                    return
                if message["type"] == "websocket.disconnect":
                    return
                if (detail := invalid_text(message)) is not None:
                    await end_on_invalid_text(self.call, detail)
                    return
                close = await self._on_message(message.get("text"), message.get("bytes"))
                if close is not None:
                    await self._close(close)
                    return
                if self.session is not None:
                    # Media in a burst (after a network stall) waits for the VAD: this loop
                    # stops reading and TCP holds the rest back, within limits.inbound_wait_ms.
                    await self.session.keep_up()
        except WebSocketDisconnect:
            pass
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            await self._hang_up()

    async def _close(self, code: CloseCode) -> None:
        """Close with ``code`` and a reason: the problem that ended the call, for a refusal."""
        reason = "stop: the stream ended" if code is CloseCode.NORMAL else self.problem
        await self.sink.flush(1.0)
        with contextlib.suppress(Exception):  # the provider may have closed first (after stop)
            await self.ws.close(int(code), close_reason(reason))

    async def _hang_up(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            await hang_up(session)
            self.log.info(
                "%s stream %s ended: %d DTMF, %d bad messages",
                self.provider.name,
                self.stream_id,
                session.counts["dtmf"],
                self.bad_messages,
            )

    def _bad(self, code: ErrorCode, message: str) -> None:
        """A message we cannot use: the provider cannot be told, so log (bounded) and count."""
        self.services.metrics.errors.labels(code).inc()
        self.bad_messages += 1
        self.problem = f"{code.value}: {message}"
        name = self.provider.name
        if self.bad_messages <= LOGGED_BAD_MESSAGES:
            self.log.warning("%s call %s: %s: %s", name, self.call.id, code.value, message)
        if self.bad_messages == LOGGED_BAD_MESSAGES:
            self.log.warning(
                "%s call %s: further bad messages are only counted", name, self.call.id
            )

    async def _on_message(self, text: str | None, data: bytes | None) -> CloseCode | None:
        """Handle one message; a close code ends the call."""
        if text is None:
            return await self._on_inbound(self.provider.binary(data or b""), "binary")
        payload = decode_json(text, self.cfg.server.max_message_bytes)
        if isinstance(payload, Undecodable):
            reason = f"a message {payload.reason}"
            if payload.code is ErrorCode.INVALID_JSON:
                reason = f"not valid JSON: {payload.reason}{payload.where}"
            self._bad(payload.code, reason)
            return None
        if not isinstance(payload, dict) or not isinstance(payload.get("event"), str):
            self._bad(ErrorCode.INVALID_EVENT, "a message is a JSON object with a string 'event'")
            return None
        kind = payload["event"]
        model = self.provider.messages.get(kind)
        if model is None:
            self._bad(ErrorCode.UNKNOWN_EVENT, f"unknown event {kind[:64]!r}")
            return None
        try:
            message = model.model_validate(payload)
        except ValidationError as exc:
            self._bad(ErrorCode.INVALID_EVENT, f"{kind}: {describe_error(exc, 'message')}")
            # A call cannot go on without its start: end it rather than wait for the timeout.
            starting = kind == self.provider.start_event and self.session is None
            return CloseCode.POLICY if starting else None
        return await self._on_inbound(self.provider.inbound(message), kind)

    async def _on_inbound(self, event: ProviderEvent | Refused, kind: str) -> CloseCode | None:
        if isinstance(event, Refused):
            self._bad(event.code, event.message)
            return CloseCode.POLICY if event.fatal and self.session is None else None
        if isinstance(event, Ignored):
            self.log.debug("%s %s %s", self.provider.name, kind, event.note)
            return None
        if isinstance(event, Started):
            return self._start(event)
        if isinstance(event, Stopped) and self.session is None:
            return CloseCode.NORMAL  # the stream ended before it started: nothing to answer
        session = self._session_of(event, kind)
        if session is None:
            pass
        elif isinstance(event, Audio):
            self._on_audio(session, event)
        elif isinstance(event, Played):
            self._on_mark(session, event.name)
        elif isinstance(event, Digit):
            await self._on_dtmf(session, event.digit)
        elif isinstance(event, ProviderError):
            self.log.warning("%s stream %s: the provider reports: %s", *self._who(), event.detail)
        elif isinstance(event, Stopped):
            self.log.info("%s stream %s stopped by the provider (%s)", *self._who(), event.reason)
            return CloseCode.NORMAL
        return None

    def _who(self) -> tuple[str, str]:
        return self.provider.name, self.stream_id

    def _session_of(self, event: ProviderEvent, kind: str) -> Session | None:
        """The session a message belongs to, or None (counted) if it belongs to none."""
        if self.session is None:
            self._bad(ErrorCode.NOT_STARTED, f"{kind} before start")
        elif event.stream is not None and event.stream != self.stream_id:
            self._bad(ErrorCode.INVALID_EVENT, f"stream {event.stream} is not this stream")
        else:
            return self.session
        return None

    def _start(self, start: Started) -> CloseCode | None:
        if self.session is not None:
            self._bad(ErrorCode.ALREADY_STARTED, "a second start on one stream")
            return None
        assert start.stream is not None and start.audio is not None, "a start names both"
        instructions = start.parameters.get("instructions")
        if instructions is not None and not 0 < len(instructions) <= MAX_INSTRUCTIONS:
            self._bad(ErrorCode.INVALID_EVENT, f"start: instructions over {MAX_INSTRUCTIONS} chars")
            instructions = None
        refusal = ownership.check_new_here(self.call.registry, self.call.principal, start.stream)
        if refusal is not None:
            self._bad(refusal.code, refusal.message)
            return CloseCode.POLICY
        self.stream = start
        self.session = self.call.open_session(
            start.stream,
            SessionSinks(self.send_event, self.send_audio, flushes=True),
            Rates.both(start.audio.rate),
            instructions=instructions,
            caller=start.caller_number,
        )
        self.log.info(
            "%s stream %s started: call %s, %s, %s, parameters %s",
            self.provider.name,
            start.stream,
            start.call_id,
            start.about,
            start.audio,
            sorted(start.parameters)[:16],  # names only: values may be private
        )
        self.session.greet()  # the agent's greeting, if it has one
        return None

    def _on_audio(self, session: Session, audio: Audio) -> None:
        data = audio.payload
        if isinstance(data, str):
            try:
                data = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                self._bad(ErrorCode.BAD_AUDIO_FRAME, f"{audio.label}: payload is not base64")
                return
        assert self.stream is not None and self.stream.audio is not None
        wire = self.stream.audio
        max_bytes = wire.bytes_for(self.cfg.audio.max_frame_ms)
        if not 0 < len(data) <= max_bytes or len(data) % wire.sample_bytes:
            self._bad(
                ErrorCode.BAD_AUDIO_FRAME,
                f"{audio.label}: {len(data)} bytes of {wire.encoding.value}; whole samples, "
                f"1 to {max_bytes} bytes accepted ({self.cfg.audio.max_frame_ms} ms)",
            )
            return
        session.feed(wire.decode(data))

    def _on_mark(self, session: Session, name: str) -> None:
        """The provider played everything up to this mark (or a clear dropped it)."""
        match = _MARK_NAME.match(name)
        seq = int(match.group(1)) if match else None
        if seq is not None and seq in self._unplayed:
            while self._unplayed and self._unplayed[0] <= seq:  # echoes come in order
                self._unplayed.popleft()
            session.playback_ack(seq)
        elif seq is not None and seq in self._cleared:
            self._cleared.remove(seq)  # echoed because a clear dropped it: it was not heard
        else:
            self._bad(ErrorCode.INVALID_EVENT, f"mark {name[:64]!r} was not sent on this stream")

    async def _on_dtmf(self, session: Session, digit: str) -> None:
        """A key press: counted (``voxpipe_dtmf_total``) and handed to the session, whose
        keypad makes the digits a turn (``conversation/keypad.py``)."""
        self.services.metrics.dtmf.labels(digit).inc()
        self.log.info("%s stream %s: DTMF %s", *self._who(), digit)
        await session.keypad.pressed(digit)

    async def transfer(self, target: str) -> None:
        """The provider puts the call through (which ends this stream); if it cannot, the
        call goes on here, and the error is logged and counted."""
        assert self.stream is not None
        try:
            await self.provider.transfer(self.cfg.telephony, self.stream, target)
        except Exception as exc:  # the provider's refusal, or no transfer on this provider
            self.services.metrics.errors.labels(ErrorCode.TRANSFER_FAILED).inc()
            self.log.error("%s call %s: the transfer failed: %s", *self._who(), exc)
            return
        self.log.info("%s call %s: transferred", self.provider.name, self.stream.call_id)

    # -- sending ------------------------------------------------------------

    async def send_event(self, event: Event) -> None:
        if not await act_on_line(self, event, self.services.metrics.errors):
            self.log.debug("%s stream %s: %s", *self._who(), event.type)

    async def end_call(self, reason: str) -> None:
        """The stream ends; so does the call (docs/telephony.md)."""
        self.log.info("%s stream %s: %s", *self._who(), reason)
        await self._close(CloseCode.NORMAL)

    def warn(self, error: ErrorEvent) -> None:
        self.log.warning("%s stream %s: %s: %s", *self._who(), error.code, error.message)

    async def send_audio(self, frame: AudioOut) -> None:
        assert self.stream is not None and self.stream.audio is not None
        wire = self.stream.audio
        data = wire.encode(frame.pcm)
        size = wire.bytes_for(self.provider.frame_ms) if self.provider.frame_ms else len(data)
        for start in range(0, len(data), size):
            chunk = data[start : start + size]
            chunk += wire.silence(size - len(chunk))  # the provider takes whole frames only
            audio_ms = len(chunk) / wire.sample_bytes * 1000 / wire.rate
            self.sink.put(self.provider.media(self.stream, chunk), audio_ms)
        self.sink.put(self.provider.mark(self.stream, f"{MARK_PREFIX}{frame.seq}"), 0.0)
        self._unplayed.append(frame.seq)
        self._cleared_last = False

    def clear_playback(self) -> None:
        """Barge-in (a clear or a flush): the provider drops its buffered audio; the marks in
        it were not heard. One clear a barge-in: none again while nothing was sent since the
        last (the interruption after a pause's flush)."""
        if self.stream is None or self._cleared_last:
            return
        self._cleared_last = True
        self.sink.put(self.provider.clear(self.stream), 0.0)
        self._cleared.extend(self._unplayed)
        self._unplayed.clear()


class TelephonyTransport:
    """A provider's route (``/v1/<name>``), as the server sees any transport."""

    def __init__(self, provider: type[Provider]) -> None:
        self.provider = provider
        self.name = provider.name
        self.path = f"/v1/{provider.name}"

    def subprotocol(self, ws: WebSocket) -> str | None:
        return None

    def error_text(self, code: ErrorCode, message: str) -> str | None:
        """Nothing: no provider has an error message to read, so a refusal (auth, capacity,
        drain) is only its close code, plus the server's log line and error counter."""
        return None

    async def serve(self, ws: WebSocket, call: Call) -> None:
        await MediaStream(ws, call, self.provider()).run()
