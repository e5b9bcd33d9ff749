"""What an OpenAI Realtime client may send, checked strictly.

Client events are validated strictly (unknown fields, wrong JSON types, values out
of range are errors), and every failure becomes the OpenAI error shape with the
``param`` path that was wrong (:meth:`RealtimeError.of`). A ``session.update``'s
``session`` is checked in the dialect it is written in (:func:`session_shape`):
the GA one nests the audio settings, the beta one is flat. Fields voxpipe accepts
but does not act on are listed in ``docs/openai-realtime.md``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from voxpipe.engines.base import TOOL_NAME
from voxpipe.observability.logs import check_id
from voxpipe.transports.realtime_wire import Dialect

MAX_INSTRUCTIONS = 8000  # characters, as the native protocol's session.start
MAX_TOOL_DESCRIPTION = 4000  # characters: it goes into every prompt
# An item id a client chooses: the one id rule (observability/logs.py), bounded tighter.
ItemId = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(check_id)]


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


class FunctionToolIn(_Strict):
    """One of ``session.tools``: a function the client runs when the model calls it."""

    type: Literal["function"] = "function"
    name: str = Field(pattern=TOOL_NAME.pattern)
    description: str = Field("", max_length=MAX_TOOL_DESCRIPTION)
    parameters: dict[str, Any] | None = None


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
    id: ItemId | None = None
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
    of the per-response overrides only ``tool_choice`` applies, the others are accepted
    and not applied (``docs/openai-realtime.md``)."""

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
