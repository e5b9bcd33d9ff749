"""The OpenAI Realtime wire toward the client: one way out, in the client's dialect.

Two dialects share one protocol. The GA API nests the session's audio settings
(``session.audio.input.format = {"type": "audio/pcm", "rate": 24000}``) and names
reply events ``response.output_audio.*``; the beta (``OpenAI-Beta: realtime=v1``)
has a flat session (``input_audio_format: "pcm16"``, ``turn_detection``) and says
``response.audio.*``. Every server event is written once, in GA terms, and
:func:`event_type` renames it for the beta. ``docs/openai-realtime.md`` lists what
is supported.

Every refusal, whatever its cause, leaves as OpenAI's ``error`` event with the
``param`` path that was wrong, and is counted; :class:`ServerEvents` is the one
place that sends, so names, ids and counts cannot drift apart.
"""

from __future__ import annotations

import json
import uuid
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from voxpipe.conversation.events import AudioDropped
from voxpipe.observability.metrics import Metrics
from voxpipe.transports.base import SendBuffer

INPUT_AUDIO_DROPPED = "input_audio_dropped"  # voxpipe's audio_dropped, in the Realtime's words


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
    """A client event the server refuses; the connection stays open. ``warn``: a refused
    tool or tool record, which may be an attempt on the server's own tools or its context
    (``docs/security.md``): the connection logs the first one at warning level."""

    def __init__(
        self,
        code: str,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        warn: bool = False,
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.param, self.kind = code, message, param, kind
        self.warn = warn

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


def rate_limits() -> list[dict[str, Any]]:
    """voxpipe does not meter tokens; admission is per call (``limits.max_calls``)."""
    return [
        {"name": "requests", "limit": 1_000_000, "remaining": 1_000_000, "reset_seconds": 0.0},
        {"name": "tokens", "limit": 1_000_000, "remaining": 1_000_000, "reset_seconds": 0.0},
    ]


# -- sending ----------------------------------------------------------------


class ServerEvents:
    """Every server event of one connection, named in its dialect, onto its send buffer.

    ``dialect`` starts as the client asked at connect; the connection switches it to the
    beta when a flat ``session.update`` shows the client speaks beta."""

    def __init__(self, sink: SendBuffer, metrics: Metrics, dialect: Dialect) -> None:
        self.sink = sink
        self.metrics = metrics
        self.dialect = dialect

    def emit(self, ga_type: str, *, audio_ms: float = 0.0, **fields: Any) -> None:
        kind = event_type(ga_type, self.dialect)
        if kind is None:
            return
        body = {"type": kind, "event_id": new_id("event"), **fields}
        self.sink.put(json.dumps(body, separators=(",", ":")), audio_ms)

    def error(self, error: RealtimeError, client_event_id: str | None = None) -> None:
        self.metrics.errors.labels(error.code).inc()
        body = error_event(error.code, error.message, error.param, client_event_id, error.kind)
        self.sink.put(json.dumps(body, separators=(",", ":")), 0.0)

    def audio_dropped(self, event: AudioDropped) -> None:
        """voxpipe's ``audio_dropped`` in the Realtime shape: an ``error`` whose code says
        what happened (``input_audio_dropped``), with the amounts as extra fields."""
        self.metrics.errors.labels(INPUT_AUDIO_DROPPED).inc()
        body = error_event(INPUT_AUDIO_DROPPED, event.message, kind="server_error")
        body["error"].update(dropped_ms=event.dropped_ms, total_dropped_ms=event.total_dropped_ms)
        self.sink.put(json.dumps(body, separators=(",", ":")), 0.0)
