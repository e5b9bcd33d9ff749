"""The OpenAI Realtime protocol's wire shapes: client events checked, server objects built.

Two dialects share one protocol. The GA API nests the session's audio settings
(``session.audio.input.format = {"type": "audio/pcm", "rate": 24000}``) and names
reply events ``response.output_audio.*``; the beta (``OpenAI-Beta: realtime=v1``)
has a flat session (``input_audio_format: "pcm16"``, ``turn_detection``) and says
``response.audio.*``. Everything here is written once, in GA terms, and
:func:`event_type` renames for the beta. ``docs/openai-realtime.md`` lists what is
supported.

Client events are validated strictly (unknown fields, wrong JSON types, values out
of range are errors), and every failure becomes the OpenAI error shape with the
``param`` path that was wrong.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from voxpipe.config import TurnConfig
from voxpipe.engines.base import ChatMessage, Role
from voxpipe.transports.realtime_audio import GA_FORMATS, AudioFormat

MAX_INSTRUCTIONS = 8000  # characters, as the native protocol's session.start


class Dialect(StrEnum):
    GA = "ga"
    BETA = "beta"


_BETA_NAMES = {
    "conversation.item.added": "conversation.item.created",
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
}
_GA_ONLY = {"conversation.item.done"}


def event_type(ga_name: str, dialect: Dialect) -> str | None:
    """A server event's name in ``dialect``; None when that dialect has no such event."""
    if dialect is Dialect.GA:
        return ga_name
    return None if ga_name in _GA_ONLY else _BETA_NAMES.get(ga_name, ga_name)


def new_id(prefix: str) -> str:
    """OpenAI-style ids: ``item_…``, ``resp_…``, ``event_…``, ``sess_…``."""
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


# -- errors -----------------------------------------------------------------


class RealtimeError(Exception):
    """A client event the server refuses; the connection stays open."""

    def __init__(
        self,
        code: str,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.param, self.kind = code, message, param, kind

    @classmethod
    def of(cls, error: ValidationError, prefix: str = "") -> RealtimeError:
        """The first validation failure, in OpenAI's terms."""
        first = error.errors()[0]
        loc = [str(p) for p in first["loc"] if not str(p).startswith(("literal[", "function-"))]
        loc = [p for p in loc if p not in {"int", "str", "float", "bool", "dict[str,any]"}]
        param = ".".join([prefix, *loc] if prefix else loc) or None
        kind = first["type"]
        if kind == "extra_forbidden":
            return cls("unknown_parameter", f"Unknown parameter: '{param}'.", param)
        if kind == "missing":
            return cls(
                "missing_required_parameter", f"Missing required parameter: '{param}'.", param
            )
        code = "invalid_type" if kind.endswith("_type") else "invalid_value"
        return cls(code, f"Invalid value for '{param}': {first['msg']}.", param)


def error_event(
    code: str,
    message: str,
    param: str | None = None,
    client_event_id: str | None = None,
    kind: str = "invalid_request_error",
) -> dict[str, Any]:
    """``{"type": "error", "error": {...}}`` as the Realtime API sends it."""
    return {
        "type": "error",
        "event_id": new_id("event"),
        "error": {
            "type": kind,
            "code": code,
            "message": message,
            "param": param,
            "event_id": client_event_id,
        },
    }


# -- client events ----------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _ClientEvent(_Strict):
    event_id: str | None = Field(None, max_length=512)


class TurnDetectionIn(_Strict):
    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    threshold: float | None = Field(None, gt=0.0, lt=1.0)
    prefix_padding_ms: int | None = Field(None, ge=0, le=2000)
    silence_duration_ms: int | None = Field(None, ge=32, le=5000)
    create_response: bool | None = None
    interrupt_response: bool | None = None
    idle_timeout_ms: int | None = Field(None, ge=0)  # accepted, not acted on
    eagerness: Literal["low", "medium", "high", "auto"] | None = None


class GaFormatIn(_Strict):
    type: Literal["audio/pcm", "audio/pcmu", "audio/pcma"]
    rate: Literal[24000] | None = None


class GaAudioInputIn(_Strict):
    format: GaFormatIn | None = None
    turn_detection: TurnDetectionIn | None = None
    transcription: dict[str, Any] | None = None
    noise_reduction: dict[str, Any] | None = None


class GaAudioOutputIn(_Strict):
    format: GaFormatIn | None = None
    voice: str | dict[str, Any] | None = None
    speed: float | None = Field(None, ge=0.25, le=1.5)


class GaAudioIn(_Strict):
    input: GaAudioInputIn | None = None
    output: GaAudioOutputIn | None = None


Modality = Literal["text", "audio"]


class GaSessionIn(_Strict):
    """``session`` of a GA ``session.update``; fields voxpipe cannot honour are accepted
    and answered with the effective value in ``session.updated``."""

    type: Literal["realtime"] | None = None
    model: str | None = None
    instructions: str | None = Field(None, max_length=MAX_INSTRUCTIONS)
    output_modalities: list[Modality] | None = Field(None, min_length=1, max_length=1)
    audio: GaAudioIn | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    tracing: Any = None
    truncation: Any = None
    include: list[str] | None = None
    prompt: Any = None
    reasoning: Any = None
    parallel_tool_calls: bool | None = None


BetaFormat = Literal["pcm16", "g711_ulaw", "g711_alaw"]


class BetaSessionIn(_Strict):
    """``session`` of a beta (flat) ``session.update``."""

    model: str | None = None
    instructions: str | None = Field(None, max_length=MAX_INSTRUCTIONS)
    modalities: list[Modality] | None = Field(None, min_length=1, max_length=2)
    voice: str | None = None
    input_audio_format: BetaFormat | None = None
    output_audio_format: BetaFormat | None = None
    input_audio_transcription: dict[str, Any] | None = None
    turn_detection: TurnDetectionIn | None = None
    input_audio_noise_reduction: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    max_response_output_tokens: int | Literal["inf"] | None = None
    speed: float | None = Field(None, ge=0.25, le=1.5)
    tracing: Any = None
    client_secret: Any = None


_BETA_ONLY_KEYS = set(BetaSessionIn.model_fields) - set(GaSessionIn.model_fields)
_GA_ONLY_KEYS = set(GaSessionIn.model_fields) - set(BetaSessionIn.model_fields)


def session_shape(session: dict[str, Any], dialect: Dialect) -> Dialect:
    """Which dialect a ``session`` object is written in: a flat one is beta."""
    keys = set(session)
    if keys & _GA_ONLY_KEYS:
        return Dialect.GA
    if keys & _BETA_ONLY_KEYS:
        return Dialect.BETA
    return dialect


class SessionUpdate(_ClientEvent):
    type: Literal["session.update"]
    session: dict[str, Any]


class AppendAudio(_ClientEvent):
    type: Literal["input_audio_buffer.append"]
    audio: str


class BufferEvent(_ClientEvent):
    type: Literal["input_audio_buffer.commit", "input_audio_buffer.clear"]


TEXT_CONTENT = {"input_text", "text", "output_text"}


class ContentIn(_Strict):
    type: Literal[
        "input_text",
        "text",
        "output_text",
        "input_audio",
        "audio",
        "output_audio",
        "input_image",
        "item_reference",
    ]
    text: str | None = None
    transcript: str | None = None
    audio: str | None = None
    id: str | None = None
    image_url: str | None = None
    detail: str | None = None


class ItemIn(_Strict):
    id: str | None = Field(None, min_length=1, max_length=64)
    type: Literal["message", "function_call", "function_call_output"] = "message"
    object: Literal["realtime.item"] | None = None
    status: Literal["completed", "incomplete", "in_progress"] | None = None
    role: Literal["user", "assistant", "system"] | None = None
    content: list[ContentIn] = Field(default_factory=list, max_length=16)
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None


class ItemCreate(_ClientEvent):
    type: Literal["conversation.item.create"]
    previous_item_id: str | None = None
    item: ItemIn


class ItemRef(_ClientEvent):
    type: Literal["conversation.item.retrieve", "conversation.item.delete"]
    item_id: str


class ItemTruncate(_ClientEvent):
    type: Literal["conversation.item.truncate"]
    item_id: str
    content_index: int = Field(ge=0)
    audio_end_ms: int = Field(ge=0)


class ResponseIn(_Strict):
    """``response`` of ``response.create``: only the default conversation is supported;
    per-response overrides are accepted and not applied (``docs/openai-realtime.md``)."""

    conversation: str | None = None
    input: list[Any] | None = None
    instructions: str | None = None
    metadata: dict[str, str] | None = None
    output_modalities: list[Modality] | None = None
    modalities: list[Modality] | None = None
    audio: Any = None
    voice: str | None = None
    output_audio_format: BetaFormat | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    max_response_output_tokens: int | Literal["inf"] | None = None
    temperature: float | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    prompt: Any = None
    reasoning: Any = None
    parallel_tool_calls: bool | None = None


class ResponseCreate(_ClientEvent):
    type: Literal["response.create"]
    response: ResponseIn | None = None


class ResponseCancel(_ClientEvent):
    type: Literal["response.cancel"]
    response_id: str | None = None


CLIENT_EVENTS = (
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.retrieve",
    "conversation.item.truncate",
    "conversation.item.delete",
    "response.create",
    "response.cancel",
)


# -- the session's settings -----------------------------------------------------

_EAGERNESS_SILENCE_MS = {"low": 900, "medium": 500, "auto": 500, "high": 300}


@dataclass(frozen=True)
class VadSettings:
    """``turn_detection`` in force (semantic VAD is server VAD with an eagerness-chosen
    silence)."""

    threshold: float
    prefix_padding_ms: int
    silence_duration_ms: int
    create_response: bool = True
    interrupt_response: bool = True
    type: str = "server_vad"
    eagerness: str | None = None
    idle_timeout_ms: int | None = None

    @classmethod
    def of(cls, turn: TurnConfig) -> VadSettings:
        return cls(turn.threshold, turn.prefix_padding_ms, turn.silence_ms, True, turn.interrupt)

    def merged(self, update: TurnDetectionIn) -> VadSettings:
        changes = {k: v for k, v in update.model_dump(exclude_unset=True).items() if v is not None}
        if changes.get("type") == "semantic_vad" or (
            update.eagerness is not None and self.type == "semantic_vad"
        ):
            eagerness = update.eagerness or self.eagerness or "auto"
            changes["eagerness"] = eagerness
            changes["silence_duration_ms"] = _EAGERNESS_SILENCE_MS[eagerness]
        return replace(self, **changes)

    def turn_config(self, base: TurnConfig) -> TurnConfig:
        return TurnConfig.model_validate(
            {
                **base.model_dump(),
                "threshold": self.threshold,
                "prefix_padding_ms": self.prefix_padding_ms,
                "silence_ms": self.silence_duration_ms,
                "interrupt": self.interrupt_response,
            }
        )

    def wire(self) -> dict[str, Any]:
        if self.type == "semantic_vad":
            return {
                "type": "semantic_vad",
                "eagerness": self.eagerness,
                "create_response": self.create_response,
                "interrupt_response": self.interrupt_response,
            }
        return {
            "type": "server_vad",
            "threshold": self.threshold,
            "prefix_padding_ms": self.prefix_padding_ms,
            "silence_duration_ms": self.silence_duration_ms,
            "idle_timeout_ms": self.idle_timeout_ms,
            "create_response": self.create_response,
            "interrupt_response": self.interrupt_response,
        }


@dataclass(frozen=True)
class SessionSettings:
    """The effective session configuration, as ``session.created``/``updated`` report it."""

    id: str
    model: str
    instructions: str
    voice: str
    max_output_tokens: int
    vad_defaults: VadSettings  # the server's turn settings, for a turn_detection set anew
    turn_detection: VadSettings | None
    input_format: AudioFormat = AudioFormat.PCM16
    output_format: AudioFormat = AudioFormat.PCM16
    text_only: bool = False
    transcription: dict[str, Any] | None = None
    temperature: float = 0.8

    def updated(self, session: dict[str, Any], shape: Dialect) -> SessionSettings:
        """These settings with a ``session.update``'s ``session`` applied (only the fields
        present change; ``turn_detection: null`` means manual turns)."""
        try:
            if shape is Dialect.GA:
                return self._updated_ga(GaSessionIn.model_validate(session))
            return self._updated_beta(BetaSessionIn.model_validate(session))
        except ValidationError as exc:
            raise RealtimeError.of(exc, "session") from None

    def _vad(self, fields: set[str], value: TurnDetectionIn | None) -> VadSettings | None:
        if "turn_detection" not in fields:
            return self.turn_detection
        if value is None:
            return None
        return (self.turn_detection or self.vad_defaults).merged(value)

    def _updated_ga(self, s: GaSessionIn) -> SessionSettings:
        changes: dict[str, Any] = {}
        if s.instructions is not None:
            changes["instructions"] = s.instructions
        if s.output_modalities is not None:
            changes["text_only"] = s.output_modalities == ["text"]
        audio = s.audio or GaAudioIn()
        if audio.input is not None:
            given = audio.input.model_fields_set
            changes["turn_detection"] = self._vad(given, audio.input.turn_detection)
            if audio.input.format is not None:
                changes["input_format"] = GA_FORMATS[audio.input.format.type]
            if "transcription" in given:
                changes["transcription"] = audio.input.transcription
        if audio.output is not None and audio.output.format is not None:
            changes["output_format"] = GA_FORMATS[audio.output.format.type]
        return replace(self, **changes)

    def _updated_beta(self, s: BetaSessionIn) -> SessionSettings:
        given = s.model_fields_set
        changes: dict[str, Any] = {"turn_detection": self._vad(given, s.turn_detection)}
        if s.instructions is not None:
            changes["instructions"] = s.instructions
        if s.modalities is not None:
            changes["text_only"] = "audio" not in s.modalities
        if s.input_audio_format is not None:
            changes["input_format"] = AudioFormat(s.input_audio_format)
        if s.output_audio_format is not None:
            changes["output_format"] = AudioFormat(s.output_audio_format)
        if "input_audio_transcription" in given:
            changes["transcription"] = s.input_audio_transcription
        if s.temperature is not None:
            changes["temperature"] = s.temperature
        return replace(self, **changes)

    def wire(self, dialect: Dialect) -> dict[str, Any]:
        vad = self.turn_detection.wire() if self.turn_detection is not None else None
        if dialect is Dialect.BETA:
            return {
                "id": self.id,
                "object": "realtime.session",
                "model": self.model,
                "modalities": ["text"] if self.text_only else ["audio", "text"],
                "instructions": self.instructions,
                "voice": self.voice,
                "input_audio_format": self.input_format.value,
                "output_audio_format": self.output_format.value,
                "input_audio_transcription": self.transcription,
                "turn_detection": vad,
                "input_audio_noise_reduction": None,
                "tools": [],
                "tool_choice": "auto",
                "temperature": self.temperature,
                "max_response_output_tokens": self.max_output_tokens,
                "speed": 1.0,
                "tracing": None,
            }
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": self.id,
            "model": self.model,
            "output_modalities": ["text"] if self.text_only else ["audio"],
            "instructions": self.instructions,
            "tools": [],
            "tool_choice": "auto",
            "max_output_tokens": self.max_output_tokens,
            "tracing": None,
            "truncation": "auto",
            "prompt": None,
            "include": None,
            "audio": {
                "input": {
                    "format": self.input_format.ga(),
                    "transcription": self.transcription,
                    "noise_reduction": None,
                    "turn_detection": vad,
                },
                "output": {"format": self.output_format.ga(), "voice": self.voice, "speed": 1.0},
            },
        }


# -- conversation items -----------------------------------------------------


@dataclass
class Item:
    """One conversation item as the client knows it, and where it lives in voxpipe: a
    turn (``turn_id``, audio items) or a message the client wrote (``message``)."""

    id: str
    role: Role
    audio: bool  # audio with a transcript; else text
    text: str | None = None  # the transcript or the text; None until known
    status: str = "completed"
    turn_id: int | None = None
    message: ChatMessage | None = None
    finished: bool = False  # its turn is over: the history holds what it will hold

    def content(self, dialect: Dialect) -> list[dict[str, Any]]:
        if self.text is None and self.role == "assistant":
            return []  # still being generated
        if self.role == "assistant":
            if self.audio:
                kind = "output_audio" if dialect is Dialect.GA else "audio"
                return [{"type": kind, "transcript": self.text}]
            kind = "output_text" if dialect is Dialect.GA else "text"
            return [{"type": kind, "text": self.text}]
        if self.audio:
            return [{"type": "input_audio", "transcript": self.text}]
        return [{"type": "input_text", "text": self.text}]

    def wire(self, dialect: Dialect) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.item",
            "type": "message",
            "status": self.status,
            "role": self.role,
            "content": self.content(dialect),
        }


class Items:
    """The conversation's items in order, at most ``limit`` (the oldest are forgotten)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: dict[str, Item] = {}

    def __contains__(self, item_id: str) -> bool:
        return item_id in self._items

    def get(self, item_id: str) -> Item | None:
        return self._items.get(item_id)

    @property
    def last_id(self) -> str | None:
        return next(reversed(self._items), None)

    def add(self, item: Item) -> str | None:
        """Append; returns the id of the item before it."""
        previous = self.last_id
        self._items[item.id] = item
        while len(self._items) > self.limit:
            del self._items[next(iter(self._items))]
        return previous

    def remove(self, item_id: str) -> None:
        self._items.pop(item_id, None)

    def of_turn(self, turn_id: int) -> list[Item]:
        return [i for i in self._items.values() if i.turn_id == turn_id]


def rate_limits() -> list[dict[str, Any]]:
    """voxpipe does not meter tokens; admission is per call (``limits.max_calls``)."""
    return [
        {"name": "requests", "limit": 1_000_000, "remaining": 1_000_000, "reset_seconds": 0.0},
        {"name": "tokens", "limit": 1_000_000, "remaining": 1_000_000, "reset_seconds": 0.0},
    ]
