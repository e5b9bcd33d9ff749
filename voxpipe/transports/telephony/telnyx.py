"""Telnyx Media Streaming at ``/v1/telnyx`` (``docs/telephony.md#telnyx``).

Call Control's ``streaming_start`` (or TeXML's ``<Stream>``) with ``stream_url`` set to
``wss://host/v1/telnyx`` and ``stream_bidirectional_mode: "rtp"`` opens the socket. Telnyx sends
JSON text: ``connected``, ``start`` (``stream_id``, the call's ``call_control_id``, ``from``,
``custom_parameters`` and ``media_format``: PCMU or PCMA at 8 kHz, or L16, big-endian as RTP
carries it, at 8 or 16 kHz), ``media`` (base64 RTP payloads), ``dtmf``, ``mark`` (echoes; a
``clear`` returns the marks it dropped), ``error`` and ``stop``. It takes ``media``, ``mark``
and ``clear``. The reply goes out in the start's format: set ``stream_bidirectional_codec``
(and its sampling rate) to the same as ``stream_codec``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxpipe.config import TelephonyConfig
from voxpipe.observability.logs import PrintableId
from voxpipe.transports import telnyx_rest
from voxpipe.transports.telephony.base import (
    AudioFormat,
    Encoding,
    Ignored,
    KeyMessage,
    MarkMessage,
    MediaMarkClear,
    MediaMessage,
    Numeral,
    ProviderError,
    ProviderEvent,
    Refused,
    Started,
    Stopped,
    WireMessage,
    messages_of,
    shared_event,
)

ENCODINGS = {"PCMU": Encoding.MULAW, "PCMA": Encoding.ALAW, "L16": Encoding.PCM16BE}


class Connected(WireMessage):
    event: Literal["connected"]
    version: str = Field(max_length=32)


class MediaFormat(WireMessage):
    encoding: Literal["PCMU", "PCMA", "L16"]
    sample_rate: Literal[8000, 16000]
    channels: Literal[1]


class StartInfo(WireMessage):
    call_control_id: PrintableId
    media_format: MediaFormat
    from_: str | None = Field(None, alias="from", max_length=256)
    custom_parameters: dict[str, str] = Field(default_factory=dict)


class _StreamMessage(WireMessage):
    sequence_number: Numeral
    stream_id: PrintableId


class Start(_StreamMessage):
    event: Literal["start"]
    start: StartInfo


class Media(_StreamMessage, MediaMessage):
    pass


class Mark(_StreamMessage, MarkMessage):
    pass


class Dtmf(_StreamMessage, KeyMessage):
    pass


class ErrorInfo(WireMessage):
    code: int | str
    title: str = Field("", max_length=256)
    detail: str = Field("", max_length=512)


class Error(_StreamMessage):
    event: Literal["error"]
    payload: ErrorInfo


class Stop(_StreamMessage):
    event: Literal["stop"]


class Telnyx(MediaMarkClear):
    name = "telnyx"
    title = "Telnyx"
    messages = messages_of(Connected, Start, Media, Mark, Dtmf, Error, Stop)
    dial = staticmethod(telnyx_rest.dial)  # POST /v1/calls
    start_event = "start"

    def inbound(self, message: WireMessage) -> ProviderEvent | Refused:
        if isinstance(message, Connected):
            return Ignored(None, f"version {message.version}")
        assert isinstance(message, _StreamMessage)
        sid = message.stream_id
        if isinstance(message, Start):
            info = message.start
            wire = AudioFormat(ENCODINGS[info.media_format.encoding], info.media_format.sample_rate)
            return Started(
                sid,
                call_id=info.call_control_id,
                audio=wire,
                parameters=info.custom_parameters,
                caller=info.from_,
                about=f"Telnyx {info.media_format.encoding}",
            )
        if (shared := shared_event(sid, message)) is not None:
            return shared
        if isinstance(message, Error):
            error = message.payload
            return ProviderError(sid, f"error {error.code}: {error.title}: {error.detail}")
        assert isinstance(message, Stop)
        return Stopped(sid, "Telnyx sent stop: the call hung up")

    async def transfer(self, config: TelephonyConfig, stream: Started, target: str) -> None:
        """Call Control's transfer of the start's ``call_control_id`` (``telnyx_rest.py``):
        Telnyx bridges the caller to the target, which ends this stream."""
        await telnyx_rest.transfer(config, stream.call_id, target)
