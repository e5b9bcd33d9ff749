"""Twilio Media Streams at ``/v1/twilio`` (``docs/twilio.md``): a phone call, bidirectional.

Twilio's ``<Connect><Stream url="wss://host/v1/twilio"/>`` opens this WebSocket
and sends JSON text messages: ``connected``, ``start`` (the stream's ids and its
8 kHz μ-law format), ``media`` every 20 ms, ``dtmf``, ``mark`` (echoes), ``stop``.
This module decodes them into :class:`Session` calls and encodes the session's
output back: each reply frame becomes a μ-law ``media`` message followed by a
``mark`` naming the frame's seq; Twilio echoes a mark once the audio before it
has played, and that echo is the session's ``playback_ack``, so a barge-in keeps
exactly the words the caller heard. A barge-in's ``playback.clear`` becomes
``clear``, which empties Twilio's playback buffer.

Twilio has no error channel (it ignores messages it does not know), so a
malformed message is logged and counted in ``voxpipe_errors_total{code}`` and
the call goes on (a text frame that is not UTF-8 must end it: close 1007). Types
and required fields are checked strictly; fields Twilio may add later are
ignored, so a live phone line never breaks on them. The ids are not: compatible
providers (SignalWire) send their own formats, and any bounded, printable id is
taken, its format logged.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import re
import time
from collections import deque
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxpipe.audio.g711 import ulaw_decode, ulaw_encode
from voxpipe.conversation import ownership
from voxpipe.conversation.events import (
    AudioDropped,
    AudioOut,
    CallEnded,
    CallTransfer,
    ErrorCode,
    ErrorEvent,
    Event,
    PlaybackClear,
)
from voxpipe.conversation.hang_up import hang_up
from voxpipe.conversation.session import Session
from voxpipe.observability.printable import PrintableId
from voxpipe.transports import twilio_rest
from voxpipe.transports.base import (
    Undecodable,
    call_send_buffer,
    close_reason,
    decode_json,
    describe_error,
    end_on_invalid_text,
    invalid_text,
)
from voxpipe.transports.call import Call, CloseCode, Rates, SessionSinks

log = logging.getLogger("voxpipe.twilio")

SAMPLE_RATE = 8000  # Twilio's only format: μ-law, 8 kHz, mono; one byte per sample
MARK_PREFIX = "seq:"  # a mark's name is "seq:<frame seq>"
_MARK_NAME = re.compile(rf"^{re.escape(MARK_PREFIX)}([0-9]{{1,10}})$")
PENDING_MARKS = 1500  # marks awaiting their echo (30 s of 20 ms frames); the oldest is forgotten
LOGGED_BAD_MESSAGES = 10  # per call; later ones are only counted
MAX_INSTRUCTIONS = 8000

_DIGITS = r"^[0-9]{1,20}$"
# Twilio's ids are a two-letter prefix and 32 hex digits; compatible providers send other
# shapes (SignalWire: UUIDs), so any id a client may choose is taken (PrintableId: a stream
# id becomes the session id), and its shape logged.
_TWILIO_SID = re.compile(r"^(MZ|CA|AC)[0-9a-fA-F]{32}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")

CALLER_PARAMETERS = ("From", "from", "caller")
"""The ``<Parameter>`` of the TwiML ``<Stream>`` that carries the caller's number (Twilio's
start message has none of its own): ``<Parameter name="From" value="{the webhook's From}"/>``.
"""


def caller_of(parameters: dict[str, str]) -> str | None:
    """The caller's number as the operator's TwiML passed it, if it did (the session keeps
    it only if it is a bounded, printable token)."""
    return next((parameters[k] for k in CALLER_PARAMETERS if parameters.get(k)), None)


class _Message(BaseModel):
    """Strict types (no "1" for 1), required fields required; unknown fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Connected(_Message):
    event: Literal["connected"]
    protocol: str
    version: str


class MediaFormat(_Message):
    encoding: Literal["audio/x-mulaw"]
    sampleRate: Literal[8000]
    channels: Literal[1]


class StartInfo(_Message):
    streamSid: PrintableId
    accountSid: PrintableId
    callSid: PrintableId
    tracks: list[Literal["inbound", "outbound"]] = Field(min_length=1, max_length=2)
    customParameters: dict[str, str] = Field(default_factory=dict)
    mediaFormat: MediaFormat

    @property
    def id_format(self) -> str:
        """Whose ids these look like, for the log: which provider is calling shows there."""
        ids = (self.streamSid, self.callSid, self.accountSid)
        if all(_TWILIO_SID.match(i) for i in ids):
            return "Twilio SIDs"
        if all(_UUID.match(i) for i in ids):
            return "SignalWire-style ids (UUIDs)"
        return "ids of another format"


class _StreamMessage(_Message):
    sequenceNumber: str = Field(pattern=_DIGITS)
    streamSid: PrintableId


class Start(_StreamMessage):
    event: Literal["start"]
    start: StartInfo


class MediaInfo(_Message):
    track: Literal["inbound", "outbound"]
    chunk: str = Field(pattern=_DIGITS)
    timestamp: str = Field(pattern=_DIGITS)
    payload: str = Field(min_length=1)


class Media(_StreamMessage):
    event: Literal["media"]
    media: MediaInfo


class MarkInfo(_Message):
    name: str = Field(max_length=256)


class Mark(_StreamMessage):
    event: Literal["mark"]
    mark: MarkInfo


class DtmfInfo(_Message):
    track: str = Field(max_length=32)
    digit: str = Field(pattern=r"^[0-9*#A-D]$")


class Dtmf(_StreamMessage):
    event: Literal["dtmf"]
    dtmf: DtmfInfo


class StopInfo(_Message):
    accountSid: PrintableId
    callSid: PrintableId


class Stop(_StreamMessage):
    event: Literal["stop"]
    stop: StopInfo


def _compact(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"))


class TwilioTransport:
    name = "twilio"
    path = "/v1/twilio"

    def subprotocol(self, ws: WebSocket) -> str | None:
        return None

    def error_text(self, code: ErrorCode, message: str) -> str | None:
        """Nothing: Twilio has no error message to read, so a refusal (auth, capacity,
        drain) is only its close code, plus the server's log line and error counter."""
        return None

    async def serve(self, ws: WebSocket, call: Call) -> None:
        await TwilioConnection(ws, call).run()


class TwilioConnection:
    """One Media Stream: one call, one session, created at ``start``."""

    def __init__(self, ws: WebSocket, call: Call) -> None:
        self.ws = ws
        self.call = call
        self.services = call.services
        self.cfg = call.services.config
        self.session: Session | None = None
        self.stream_sid = ""
        self.call_sid = ""
        self.account_sid = ""
        self.bad_messages = 0
        self.problem = ""  # the last bad message: a refusal's close reason
        self._unplayed: deque[int] = deque(maxlen=PENDING_MARKS)  # marks sent, not echoed
        self._cleared: deque[int] = deque(maxlen=PENDING_MARKS)  # marks a clear dropped
        self.sink = call_send_buffer(ws, call, "Twilio", text_only=True)

    # -- receiving ----------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.create_task(self.sink.run(), name=f"send-{self.call.id}")
        deadline = time.monotonic() + self.cfg.server.start_timeout_s
        try:
            while True:
                timeout = None if self.session else max(0.0, deadline - time.monotonic())
                try:
                    message = await asyncio.wait_for(self.ws.receive(), timeout)
                except TimeoutError:
                    self._bad(ErrorCode.START_TIMEOUT, "no start message received in time")
                    await self._close(CloseCode.POLICY)
                    return
                if message["type"] == "websocket.disconnect":
                    return
                if (detail := invalid_text(message)) is not None:
                    await end_on_invalid_text(self.call, detail)
                    return
                text = message.get("text")
                if text is None:
                    self._bad(ErrorCode.INVALID_EVENT, "a binary message: Twilio sends JSON text")
                    continue
                close = await self._on_text(text)
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
        with contextlib.suppress(Exception):  # Twilio may have closed first (after stop)
            await self.ws.close(int(code), close_reason(reason))

    async def _hang_up(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            await hang_up(session)
            log.info(
                "twilio stream %s ended: %d DTMF, %d bad messages",
                self.stream_sid,
                session.counts["dtmf"],
                self.bad_messages,
            )

    def _bad(self, code: ErrorCode, message: str) -> None:
        """A message we cannot use: Twilio cannot be told, so log (bounded) and count."""
        self.services.metrics.errors.labels(code).inc()
        self.bad_messages += 1
        self.problem = f"{code.value}: {message}"
        if self.bad_messages <= LOGGED_BAD_MESSAGES:
            log.warning("twilio call %s: %s: %s", self.call.id, code.value, message)
        if self.bad_messages == LOGGED_BAD_MESSAGES:
            log.warning("twilio call %s: further bad messages are only counted", self.call.id)

    async def _on_text(self, text: str) -> CloseCode | None:
        """Handle one message; a close code ends the call."""
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
        model = _MODELS.get(kind)
        if model is None:
            self._bad(ErrorCode.UNKNOWN_EVENT, f"unknown event {kind[:64]!r}")
            return None
        try:
            message = model.model_validate(payload)
        except ValidationError as exc:
            self._bad(ErrorCode.INVALID_EVENT, f"{kind}: {describe_error(exc, 'message')}")
            # A call cannot go on without its start: end it rather than wait for the timeout.
            return CloseCode.POLICY if kind == "start" and self.session is None else None
        if isinstance(message, Connected):
            log.debug("twilio %s protocol %s", message.protocol, message.version)
            return None
        if isinstance(message, Start):
            return self._start(message)
        if isinstance(message, Stop) and self.session is None:
            return CloseCode.NORMAL  # the stream ended before it started: nothing to answer
        assert isinstance(message, _StreamMessage)
        session = self._session_of(message)
        if session is None:
            pass
        elif isinstance(message, Media):
            self._on_media(session, message.media)
        elif isinstance(message, Mark):
            self._on_mark(session, message.mark.name)
        elif isinstance(message, Dtmf):
            await self._on_dtmf(session, message.dtmf.digit)
        elif isinstance(message, Stop):
            log.info("twilio stream %s stopped by Twilio (call hung up)", self.stream_sid)
            return CloseCode.NORMAL
        return None

    def _session_of(self, message: _StreamMessage) -> Session | None:
        """The session a message belongs to, or None (counted) if it belongs to none."""
        if self.session is None:
            self._bad(ErrorCode.NOT_STARTED, f"{type(message).__name__.lower()} before start")
        elif message.streamSid != self.stream_sid:
            self._bad(ErrorCode.INVALID_EVENT, f"streamSid {message.streamSid} is not this stream")
        else:
            return self.session
        return None

    def _start(self, start: Start) -> CloseCode | None:
        info = start.start
        if self.session is not None:
            self._bad(ErrorCode.ALREADY_STARTED, "a second start on one stream")
            return None
        if start.streamSid != info.streamSid:
            self._bad(ErrorCode.INVALID_EVENT, "start: streamSid and start.streamSid differ")
            return CloseCode.POLICY
        if "inbound" not in info.tracks:
            self._bad(ErrorCode.INVALID_EVENT, "start: no inbound track: nothing to answer")
            return CloseCode.POLICY
        instructions = info.customParameters.get("instructions")
        if instructions is not None and not 0 < len(instructions) <= MAX_INSTRUCTIONS:
            self._bad(ErrorCode.INVALID_EVENT, f"start: instructions over {MAX_INSTRUCTIONS} chars")
            instructions = None
        refusal = ownership.check_new_here(self.call.registry, self.call.principal, info.streamSid)
        if refusal is not None:
            self._bad(refusal.code, refusal.message)
            return CloseCode.POLICY
        self.stream_sid, self.call_sid = info.streamSid, info.callSid
        self.account_sid = info.accountSid
        self.session = self.call.open_session(
            info.streamSid,
            SessionSinks(self.send_event, self.send_audio),
            Rates.both(SAMPLE_RATE),
            instructions=instructions,
            caller=caller_of(info.customParameters),
        )
        log.info(
            "twilio stream %s started: call %s, %s, tracks %s, parameters %s",
            info.streamSid,
            info.callSid,
            info.id_format,
            ",".join(info.tracks),
            sorted(info.customParameters)[:16],  # names only: values may be private
        )
        self.session.greet()  # the agent's greeting, if it has one
        return None

    def _on_media(self, session: Session, media: MediaInfo) -> None:
        if media.track != "inbound":
            return  # the call's other leg (a <Start><Stream> with both tracks): not the caller
        try:
            data = base64.b64decode(media.payload, validate=True)
        except (binascii.Error, ValueError):
            self._bad(ErrorCode.BAD_AUDIO_FRAME, f"media {media.chunk}: payload is not base64")
            return
        max_bytes = SAMPLE_RATE * self.cfg.audio.max_frame_ms // 1000
        if not 0 < len(data) <= max_bytes:
            self._bad(
                ErrorCode.BAD_AUDIO_FRAME,
                f"media {media.chunk}: {len(data)} bytes of μ-law; 1 to {max_bytes} accepted "
                f"({self.cfg.audio.max_frame_ms} ms)",
            )
            return
        session.feed(ulaw_decode(data))

    def _on_mark(self, session: Session, name: str) -> None:
        """Twilio played everything up to this mark (or a clear dropped it)."""
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
        log.info("twilio stream %s: DTMF %s", self.stream_sid, digit)
        await session.key_pressed(digit)

    async def _transfer(self, target: str) -> None:
        """Twilio's REST API puts the call through (``twilio_rest.py``), which ends this
        stream; if it refuses, the call goes on here, and the error is logged and counted."""
        try:
            await twilio_rest.transfer(self.cfg.telephony, self.account_sid, self.call_sid, target)
        except twilio_rest.TwilioRefused as exc:
            self.services.metrics.errors.labels(ErrorCode.TRANSFER_FAILED).inc()
            log.error("twilio call %s: the transfer failed: %s", self.call_sid, exc)
            return
        log.info("twilio call %s: transferred", self.call_sid)

    # -- sending ------------------------------------------------------------

    async def send_event(self, event: Event) -> None:
        if isinstance(event, PlaybackClear):
            self._clear()
        elif isinstance(event, CallEnded):  # the stream ends; so does the call (docs/twilio.md)
            log.info("twilio stream %s: %s", self.stream_sid, event.reason)
            await self._close(CloseCode.NORMAL)
        elif isinstance(event, CallTransfer):
            await self._transfer(event.target)
        elif isinstance(event, AudioDropped):
            # Twilio has no error message: counted here, logged once per episode by the session.
            self.services.metrics.errors.labels(event.code).inc()
        elif isinstance(event, ErrorEvent):
            self.services.metrics.errors.labels(event.code).inc()
            log.warning("twilio stream %s: %s: %s", self.stream_sid, event.code, event.message)
        else:
            log.debug("twilio stream %s: %s", self.stream_sid, event.type)

    async def send_audio(self, frame: AudioOut) -> None:
        payload = base64.b64encode(ulaw_encode(frame.pcm)).decode()
        audio_ms = len(frame.pcm) / 2 * 1000 / SAMPLE_RATE
        sid, name = self.stream_sid, f"{MARK_PREFIX}{frame.seq}"
        self.sink.put(
            _compact({"event": "media", "streamSid": sid, "media": {"payload": payload}}), audio_ms
        )
        self.sink.put(_compact({"event": "mark", "streamSid": sid, "mark": {"name": name}}), 0.0)
        self._unplayed.append(frame.seq)

    def _clear(self) -> None:
        """Barge-in: Twilio drops its buffered audio and echoes the marks in it at once."""
        self.sink.put(_compact({"event": "clear", "streamSid": self.stream_sid}), 0.0)
        self._cleared.extend(self._unplayed)
        self._unplayed.clear()


_MODELS: dict[str, type[_Message]] = {
    "connected": Connected,
    "start": Start,
    "media": Media,
    "mark": Mark,
    "dtmf": Dtmf,
    "stop": Stop,
}
