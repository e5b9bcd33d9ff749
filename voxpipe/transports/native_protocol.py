"""The native protocol's client events (``docs/protocol.md``), whichever wire carries them.

The WebSocket at ``/v1/voice`` (``native.py``) and a WebRTC call's data channel
(``webrtc.py``) carry the same JSON events; this module holds their models and the one
handling of the events both wires share (:class:`ClientEvents`), so an event means the
same on either, with the same errors. ``session.start`` alone differs, and each wire
hands its own handling in: the WebSocket starts or resumes a session with it, a WebRTC
session started with its offer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from voxpipe.config import AudioConfig, TurnConfig
from voxpipe.conversation.client_reports import ReportOutcome
from voxpipe.conversation.events import (
    ErrorCode,
    ErrorEvent,
    Pong,
    SendEvent,
    SessionStarted,
    SessionUpdated,
)
from voxpipe.conversation.services import Services
from voxpipe.conversation.session import Session
from voxpipe.observability.client_labels import UNKNOWN
from voxpipe.observability.latency_split import ClientTiming
from voxpipe.observability.logs import PrintableId
from voxpipe.transports.base import Undecodable, decode_json, describe_error
from voxpipe.transports.call import Call, Rates

_Event = TypeVar("_Event", bound=BaseModel)
OnSessionStart = Callable[[dict[str, Any]], Awaitable[None]]  # the event, as decoded


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
    session_id: PrintableId | None = None
    input_sample_rate: int | None = None
    output_sample_rate: int | None = None
    instructions: str | None = Field(None, max_length=8000)
    turn: TurnOptions | None = None
    resume: ResumeFrom | None = None


class PlaybackAck(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["playback.ack"]
    seq: int = Field(ge=1, lt=2**32)


MAX_REPORTED_MS = 300_000.0  # a client's figure past 5 minutes is not a turn's latency


class ClientTurn(BaseModel):
    """The client's own timing of one turn, in ms after its end of speech (the send of the
    frame holding the sample ``vad.speech_stopped`` named): ``observability/latency_split.py``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["client.turn"]
    turn_id: int = Field(ge=1, lt=2**32)
    first_audio_received_ms: float = Field(ge=0, le=MAX_REPORTED_MS, allow_inf_nan=False)
    first_audio_played_ms: float = Field(ge=0, le=MAX_REPORTED_MS, allow_inf_nan=False)
    client: str | None = Field(None, min_length=1, max_length=64)  # NAME/VERSION

    @model_validator(mode="after")
    def _played_after_received(self) -> ClientTurn:
        if self.first_audio_played_ms < self.first_audio_received_ms:
            raise ValueError("first_audio_played_ms is before first_audio_received_ms")
        return self


class SessionUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["session.update"]
    turn: TurnOptions | None = None


def merge_turn(base: TurnConfig, options: TurnOptions | None) -> TurnConfig:
    if options is None:
        return base
    changes = {k: v for k, v in options.model_dump().items() if v is not None}
    if changes.get("preempt_ms") == 0:
        changes["preempt_ms"] = None
    return TurnConfig.model_validate({**base.model_dump(), **changes})


class UnsupportedRate(ValueError):
    """A sample rate outside the server's range: ``unsupported_sample_rate``."""


def start_rates(start: SessionStart, audio: AudioConfig, tts_rate: int) -> Rates:
    """The rates a ``session.start`` asks for, the server's own where it names none."""

    def check(rate: int | None, default: int) -> int:
        rate = default if rate is None else rate
        lo, hi = audio.min_sample_rate, audio.max_sample_rate
        if not lo <= rate <= hi:
            raise UnsupportedRate(f"sample rate {rate} is outside {lo}..{hi} Hz")
        return rate

    return Rates(
        check(start.input_sample_rate, audio.input_sample_rate),
        check(start.output_sample_rate, audio.output_sample_rate or tts_rate),
    )


def native_decode_error(why: Undecodable) -> str:
    """The native protocol's words for a message that is not JSON (or too big to read)."""
    if why.code is ErrorCode.MESSAGE_TOO_LARGE:
        return f"text message {why.reason}"
    return f"not valid JSON: {why.reason}{why.where}"


def error_text(code: ErrorCode, message: str) -> str:
    return json.dumps(ErrorEvent.of(code, message).to_dict())


def started_event(
    services: Services, session: Session, out_frame_ms: int, **resumed: Any
) -> SessionStarted:
    """``session.started`` for ``session``; ``resumed`` adds what a reconnect is told."""
    engines = services.engines
    return SessionStarted(
        session_id=session.id,
        input_sample_rate=session.input_sample_rate,
        output_sample_rate=session.output_sample_rate,
        out_frame_ms=out_frame_ms,
        config={"turn": session.turn_config.model_dump()},
        models={
            "vad": engines.vad.name,
            "stt": engines.stt.name,
            "llm": engines.llm.name,
            "tts": engines.tts.name,
        },
        **resumed,
    )


@dataclass(eq=False)
class ClientEvents:
    """One connection's handling of the client's JSON events. Every malformed or unknown
    event gets a typed ``error`` and the connection carries on.

    ``session`` says the connection's session of the moment (None before it started);
    ``on_start`` handles ``session.start``, the one event the wires treat differently.
    ``client`` is the connection's client label (``Call.client_version``).
    """

    send_event: SendEvent
    session: Callable[[], Session | None]
    on_start: OnSessionStart
    max_message_bytes: int
    client: str = UNKNOWN

    @classmethod
    def of_call(
        cls,
        call: Call,
        send_event: SendEvent,
        session: Callable[[], Session | None],
        on_start: OnSessionStart,
    ) -> ClientEvents:
        """The events of ``call``'s connection, bounded by the configured message size and
        labelled with its client."""
        max_bytes = call.services.config.server.max_message_bytes
        return cls(send_event, session, on_start, max_bytes, call.client_version)

    async def handle(self, text: str) -> bool:
        """Act on one text message; True when the client hangs up (``session.end``)."""
        payload = decode_json(text, self.max_message_bytes)
        if isinstance(payload, Undecodable):
            await self.error(payload.code, native_decode_error(payload))
            return False
        if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
            await self.error(
                ErrorCode.INVALID_EVENT, "an event is a JSON object with a string 'type'"
            )
            return False
        kind = payload["type"]
        if kind == "session.start":
            await self.on_start(payload)
        elif kind == "session.update":
            await self._update(payload)
        elif kind == "playback.ack":
            await self._ack(payload)
        elif kind == "client.turn":
            await self._client_turn(payload)
        elif kind == "history.get":
            if (session := await self.started("history.get")) is not None:
                await self.send_event(session.saved.history_snapshot())
        elif kind == "ping":
            await self.send_event(Pong())
        elif kind == "session.end":
            return True
        else:
            await self.error(ErrorCode.UNKNOWN_EVENT, f"unknown event type {kind[:64]!r}")
        return False

    async def error(self, code: ErrorCode, message: str) -> None:
        await self.send_event(ErrorEvent.of(code, message))

    async def started(self, what: str) -> Session | None:
        """The session, or None after telling the client ``what`` needs session.start first."""
        session = self.session()
        if session is None:
            await self.error(ErrorCode.NOT_STARTED, f"send session.start before {what}")
        return session

    async def _parse(
        self, kind: str, model: type[_Event], payload: dict[str, Any]
    ) -> tuple[Session, _Event] | None:
        """The session and the event, or None after telling the client what is missing
        (``session.start``) or wrong with it."""
        session = await self.started(kind)
        if session is None:
            return None
        try:
            return session, model.model_validate(payload)
        except ValidationError as exc:
            await self.error(ErrorCode.INVALID_EVENT, f"{kind}: {describe_error(exc)}")
            return None

    async def _ack(self, payload: dict[str, Any]) -> None:
        if (parsed := await self._parse("playback.ack", PlaybackAck, payload)) is None:
            return
        session, ack = parsed
        if not session.playback_ack(ack.seq):
            await self.error(ErrorCode.INVALID_EVENT, f"playback.ack: no reply frame {ack.seq}")

    async def _update(self, payload: dict[str, Any]) -> None:
        if (parsed := await self._parse("session.update", SessionUpdate, payload)) is None:
            return
        session, update = parsed
        try:
            turn = merge_turn(session.turn_config, update.turn)
        except ValidationError as exc:
            await self.error(ErrorCode.INVALID_EVENT, f"session.update: {describe_error(exc)}")
            return
        session.update_turn_config(turn)
        await self.send_event(SessionUpdated(config={"turn": turn.model_dump()}))

    async def _client_turn(self, payload: dict[str, Any]) -> None:
        if (parsed := await self._parse("client.turn", ClientTurn, payload)) is None:
            return
        session, report = parsed
        client = self.client  # named at connect; else the report's own word, bounded alike
        if client == UNKNOWN:
            client = session.services.metrics.client_version(report.client)
        timing = ClientTiming(client, report.first_audio_received_ms, report.first_audio_played_ms)
        outcome = session.client_turn(report.turn_id, timing)
        if outcome is ReportOutcome.UNKNOWN_TURN:
            await self.error(ErrorCode.INVALID_EVENT, f"client.turn: no turn {report.turn_id}")
        elif outcome is ReportOutcome.ALREADY:
            await self.error(
                ErrorCode.INVALID_EVENT, f"client.turn: turn {report.turn_id} was reported already"
            )
