"""A Realtime session's settings: what ``session.update`` changes, what ``session.created``
and ``session.updated`` report.

voxpipe honours the settings it can (instructions, turn detection, audio formats,
text-only replies, the client's function tools) and reports every field with the value
in force, so a client sees what it will get. Turn detection maps to voxpipe's
:class:`~voxpipe.config.TurnConfig`; ``turn_detection: null`` means the client
commits turns itself. The connection hands the settings to the session, which acts
on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from voxpipe.config import TurnConfig
from voxpipe.transports.realtime_audio import GA_FORMATS, RealtimeAudioFormat
from voxpipe.transports.realtime_client_events import (
    BetaSessionIn,
    GaAudioIn,
    GaSessionIn,
    TurnDetectionIn,
)
from voxpipe.transports.realtime_tools import ClientTools
from voxpipe.transports.realtime_wire import Dialect, RealtimeError

_EAGERNESS_SILENCE_MS = {"low": 900, "medium": 500, "auto": 500, "high": 300}
# semantic_vad with the turn model: (silence after a turn it judged complete, the longest
# silence of one it did not). "low" lets a caller think aloud; "high" answers soonest.
_EAGERNESS_SMART_TURN_MS = {
    "low": (500, 2500),
    "medium": (200, 1300),
    "auto": (200, 1300),
    "high": (100, 700),
}


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
        """The session's turn settings. ``semantic_vad`` ends turns by the turn model (Smart
        Turn) where the server has it loaded (``turn.semantic_vad``), its silences chosen by
        the eagerness; else by the eagerness-chosen silence. ``server_vad`` by the silence."""
        by_model = self.type == "semantic_vad" and base.semantic_vad
        complete_ms, max_ms = _EAGERNESS_SMART_TURN_MS[self.eagerness or "auto"]
        smart = (
            {
                "end_of_turn": "smart_turn",
                "smart_turn_complete_ms": complete_ms,
                "smart_turn_max_silence_ms": max_ms,
            }
            if by_model
            else {"end_of_turn": "silence"}
        )
        return TurnConfig.model_validate(
            {
                **base.model_dump(),
                "threshold": self.threshold,
                "prefix_padding_ms": self.prefix_padding_ms,
                "silence_ms": self.silence_duration_ms,
                "interrupt": self.interrupt_response,
                **smart,
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
    input_format: RealtimeAudioFormat = RealtimeAudioFormat.PCM16
    output_format: RealtimeAudioFormat = RealtimeAudioFormat.PCM16
    text_only: bool = False
    transcription: dict[str, Any] | None = None
    temperature: float = 0.8
    tools: ClientTools = field(default_factory=ClientTools)

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

    def _tools(self, s: GaSessionIn | BetaSessionIn) -> ClientTools:
        return self.tools.updated(s.tools, s.tool_choice, "tool_choice" in s.model_fields_set)

    def _updated_ga(self, s: GaSessionIn) -> SessionSettings:
        changes: dict[str, Any] = {"tools": self._tools(s)}
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
        changes: dict[str, Any] = {
            "turn_detection": self._vad(given, s.turn_detection),
            "tools": self._tools(s),
        }
        if s.instructions is not None:
            changes["instructions"] = s.instructions
        if s.modalities is not None:
            changes["text_only"] = "audio" not in s.modalities
        if s.input_audio_format is not None:
            changes["input_format"] = RealtimeAudioFormat(s.input_audio_format)
        if s.output_audio_format is not None:
            changes["output_format"] = RealtimeAudioFormat(s.output_audio_format)
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
                "tools": self.tools.wire_tools(),
                "tool_choice": self.tools.wire_choice(),
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
            "tools": self.tools.wire_tools(),
            "tool_choice": self.tools.wire_choice(),
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
