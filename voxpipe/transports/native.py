"""The native WebSocket protocol at ``/v1/voice`` (``docs/protocol.md``).

Decode and encode only: JSON text events and binary PCM16 frames in, typed
events and sequenced audio frames out. Every malformed message gets a typed
``error`` event and the connection carries on; the policy lives in the session.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from voxpipe.config import TurnConfig
from voxpipe.conversation.events import (
    AudioOut,
    ErrorCode,
    ErrorEvent,
    Event,
    SessionStarted,
    SessionUpdated,
)
from voxpipe.conversation.session import Services, Session
from voxpipe.observability.metrics import Metrics

log = logging.getLogger("voxpipe.native")

AUDIO_HEADER = struct.Struct("<II")  # seq, turn_id; then PCM16LE mono
CLOSE_NORMAL = 1000
CLOSE_TRY_AGAIN_LATER = 1013  # models not loaded yet
CLOSE_POLICY = 1008  # no session.start in time


class TurnOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    threshold: float | None = Field(None, gt=0.0, lt=1.0)
    prefix_padding_ms: int | None = Field(None, ge=0, le=2000)
    silence_ms: int | None = Field(None, ge=32, le=5000)
    min_speech_ms: int | None = Field(None, ge=0, le=2000)
    interrupt: bool | None = None
    min_interruption_ms: int | None = Field(None, ge=0, le=3000)
    preempt_ms: int | None = Field(None, ge=0, le=5000)  # 0 = off


class SessionStart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["session.start"]
    session_id: str | None = Field(None, min_length=1, max_length=128)
    input_sample_rate: int | None = None
    output_sample_rate: int | None = None
    instructions: str | None = Field(None, max_length=8000)
    turn: TurnOptions | None = None


class PlaybackAck(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["playback.ack"]
    seq: int = Field(ge=1, lt=2**32)


class SessionUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["session.update"]
    turn: TurnOptions | None = None


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "event"
    return f"{where}: {first['msg']}"


async def refuse_not_ready(ws: WebSocket, metrics: Metrics) -> None:
    """Answer a call that arrives before the models are warm, then close (1013)."""
    await ws.accept()
    event = ErrorEvent.of(
        ErrorCode.NOT_READY, "models are still loading; retry when /readyz is 200"
    )
    metrics.errors.labels(event.code).inc()
    await ws.send_text(json.dumps(event.to_dict()))
    await ws.close(CLOSE_TRY_AGAIN_LATER)


class NativeConnection:
    def __init__(self, ws: WebSocket, services: Services) -> None:
        self.ws = ws
        self.services = services
        self.cfg = services.config
        self.session: Session | None = None
        self._send_lock = asyncio.Lock()
        self._open = True

    # -- sending ------------------------------------------------------------

    async def send_event(self, event: Event) -> None:
        if isinstance(event, ErrorEvent):
            self.services.metrics.errors.labels(event.code).inc()
        await self._send(text=json.dumps(event.to_dict(), separators=(",", ":")))

    async def send_audio(self, frame: AudioOut) -> None:
        await self._send(data=AUDIO_HEADER.pack(frame.seq, frame.turn_id) + frame.pcm)

    async def _send(self, text: str | None = None, data: bytes | None = None) -> None:
        if not self._open:
            return
        async with self._send_lock:
            try:
                if text is not None:
                    await self.ws.send_text(text)
                else:
                    assert data is not None
                    await self.ws.send_bytes(data)
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._open = False  # the peer is gone; the receive loop will see it

    async def error(self, code: ErrorCode, message: str) -> None:
        await self.send_event(ErrorEvent.of(code, message))

    async def _started(self, what: str) -> Session | None:
        """The session, or None after telling the client ``what`` needs session.start first."""
        if self.session is None:
            await self.error(ErrorCode.NOT_STARTED, f"send session.start before {what}")
        return self.session

    # -- receiving ----------------------------------------------------------

    async def run(self) -> None:
        await self.ws.accept()
        deadline = time.monotonic() + self.cfg.server.start_timeout_s
        try:
            while True:
                timeout = None if self.session else max(0.0, deadline - time.monotonic())
                try:
                    message = await asyncio.wait_for(self.ws.receive(), timeout)
                except TimeoutError:
                    await self.error(ErrorCode.START_TIMEOUT, "no session.start received in time")
                    await self.ws.close(CLOSE_POLICY)
                    return
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("bytes") is not None:
                    await self._on_audio(message["bytes"])
                elif message.get("text") is not None:
                    if await self._on_text(message["text"]) == "end":
                        await self.ws.close(CLOSE_NORMAL)
                        return
        except WebSocketDisconnect:
            return
        finally:
            self._open = False
            if self.session is not None:
                await self.session.close()
                self.services.metrics.active_sessions.dec()

    async def _on_audio(self, data: bytes) -> None:
        if len(data) > self.cfg.server.max_message_bytes:
            await self.error(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"binary message of {len(data)} bytes exceeds {self.cfg.server.max_message_bytes}",
            )
            return
        session = await self._started("audio")
        if session is None:
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
        await session.push_audio(data)

    async def _on_text(self, text: str) -> str | None:
        if len(text.encode()) > self.cfg.server.max_message_bytes:
            await self.error(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"text message exceeds {self.cfg.server.max_message_bytes} bytes",
            )
            return None
        try:
            payload = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge ints, deep nesting
            where = f" at {exc.pos}" if isinstance(exc, json.JSONDecodeError) else ""
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            await self.error(ErrorCode.INVALID_JSON, f"not valid JSON: {reason}{where}")
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
            await self.error(ErrorCode.INVALID_EVENT, f"playback.ack: {_describe(exc)}")
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
            turn = _merge_turn(self.cfg.turn, start.turn)
        except ValidationError as exc:
            await self.error(ErrorCode.INVALID_EVENT, f"session.start: {_describe(exc)}")
            return
        except _BadRate as exc:
            await self.error(ErrorCode.UNSUPPORTED_SAMPLE_RATE, str(exc))
            return
        session_id = start.session_id or uuid.uuid4().hex
        self.session = Session(
            session_id,
            self.services,
            self.send_event,
            self.send_audio,
            input_sample_rate=in_rate,
            output_sample_rate=out_rate,
            turn_config=turn,
            system_prompt=start.instructions,
        )
        self.services.metrics.active_sessions.inc()
        engines = self.services.engines
        await self.send_event(
            SessionStarted(
                session_id=session_id,
                input_sample_rate=in_rate,
                output_sample_rate=out_rate,
                out_frame_ms=self.cfg.audio.out_frame_ms,
                config={"turn": turn.model_dump()},
                models={
                    "vad": engines.vad.name,
                    "stt": engines.stt.name,
                    "llm": engines.llm.name,
                    "tts": engines.tts.name,
                },
            )
        )

    async def _update(self, payload: dict[str, Any]) -> None:
        session = await self._started("session.update")
        if session is None:
            return
        try:
            update = SessionUpdate.model_validate(payload)
            turn = _merge_turn(session.turn_config, update.turn)
        except ValidationError as exc:
            await self.error(ErrorCode.INVALID_EVENT, f"session.update: {_describe(exc)}")
            return
        session.update_turn_config(turn)
        await self.send_event(SessionUpdated(config={"turn": turn.model_dump()}))


class _BadRate(ValueError):
    pass


def _merge_turn(base: TurnConfig, options: TurnOptions | None) -> TurnConfig:
    if options is None:
        return base
    changes = {k: v for k, v in options.model_dump().items() if v is not None}
    if changes.get("preempt_ms") == 0:
        changes["preempt_ms"] = None
    return TurnConfig.model_validate({**base.model_dump(), **changes})
