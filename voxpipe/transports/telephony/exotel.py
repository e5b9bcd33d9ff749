"""Exotel's Voicebot applet (bidirectional AgentStream) at ``/v1/exotel``
(``docs/telephony.md#exotel``).

A flow's Voicebot applet with the URL ``wss://host/v1/exotel`` (``?sample-rate=16000`` for
16 kHz) opens the socket. Exotel sends JSON text: ``connected``, ``start`` (``stream_sid``,
``call_sid``, ``from``, the URL's query as ``custom_parameters``, and ``media_format``: 16-bit
little-endian PCM at 8, 16 or 24 kHz), ``media`` (~100 ms of base64 PCM), ``dtmf``, ``mark``
(echoes) and ``stop``. It takes ``media`` (whole multiples of 320 bytes, so each 20 ms reply
frame is padded to a whole frame), ``mark`` and ``clear``, each naming the stream.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxpipe.config import TelephonyConfig
from voxpipe.conversation.events import ErrorCode
from voxpipe.observability.logs import PrintableId
from voxpipe.transports.telephony.base import (
    Audio,
    AudioFormat,
    Encoding,
    Ignored,
    KeyMessage,
    MarkMessage,
    MediaMarkClear,
    Numeral,
    ProviderEvent,
    Refused,
    Started,
    Stopped,
    TransferUnsupported,
    WireMessage,
    messages_of,
    shared_event,
)

FRAME_MS = 20  # 320 bytes at 8 kHz: Exotel takes multiples of that


class Connected(WireMessage):
    event: Literal["connected"]


class MediaFormat(WireMessage):
    encoding: str = Field(max_length=64)  # "audio/x-raw" (older docs: "raw/slin"): PCM16 LE
    sample_rate: Literal["8000", "16000", "24000", 8000, 16000, 24000]


class StartInfo(WireMessage):
    stream_sid: PrintableId
    call_sid: PrintableId
    account_sid: str = Field("", max_length=128)
    from_: str | None = Field(None, alias="from", max_length=256)
    custom_parameters: dict[str, str] = Field(default_factory=dict)
    media_format: MediaFormat


class _StreamMessage(WireMessage):
    sequence_number: Numeral
    stream_sid: PrintableId


class Start(_StreamMessage):
    event: Literal["start"]
    start: StartInfo


class MediaInfo(WireMessage):
    chunk: Numeral
    payload: str = Field(min_length=1)


class Media(_StreamMessage):
    event: Literal["media"]
    media: MediaInfo


class Dtmf(_StreamMessage, KeyMessage):
    pass


class Mark(_StreamMessage, MarkMessage):
    pass


class StopInfo(WireMessage):
    reason: str = Field("", max_length=64)


class Stop(_StreamMessage):
    event: Literal["stop"]
    stop: StopInfo = Field(default_factory=StopInfo)


class Exotel(MediaMarkClear):
    name = "exotel"
    title = "Exotel"
    messages = messages_of(Connected, Start, Media, Dtmf, Mark, Stop)
    start_event = "start"
    stream_key = "stream_sid"
    frame_ms = FRAME_MS

    def inbound(self, message: WireMessage) -> ProviderEvent | Refused:
        if isinstance(message, Connected):
            return Ignored(None)
        assert isinstance(message, _StreamMessage)
        sid = message.stream_sid
        if isinstance(message, Start):
            info = message.start
            if info.stream_sid != sid:
                return Refused(
                    ErrorCode.INVALID_EVENT, "start: stream_sid and start.stream_sid differ", True
                )
            return Started(
                sid,
                call_id=info.call_sid,
                account_id=info.account_sid,
                audio=AudioFormat(Encoding.PCM16LE, int(info.media_format.sample_rate)),
                parameters=info.custom_parameters,
                caller=info.from_,
                about=f"Exotel {info.media_format.encoding}",
            )
        if isinstance(message, Media):
            return Audio(sid, message.media.payload, f"media {message.media.chunk}")
        if (shared := shared_event(sid, message)) is not None:
            return shared
        assert isinstance(message, Stop)
        return Stopped(sid, f"Exotel sent stop ({message.stop.reason or 'no reason'})")

    async def transfer(self, config: TelephonyConfig, stream: Started, target: str) -> None:
        """Exotel publishes no API that moves a live Voicebot call elsewhere: refused."""
        raise TransferUnsupported(
            "Exotel has no published API to transfer a live Voicebot call "
            "(docs/telephony.md#exotel)"
        )
