"""Plivo Audio Streams at ``/v1/plivo`` (``docs/telephony.md#plivo``).

The answer XML's ``<Stream bidirectional="true" keepCallAlive="true"
contentType="audio/x-mulaw;rate=8000">wss://host/v1/plivo</Stream>`` opens the socket. Plivo
sends JSON text: ``start`` (``callId``, ``streamId``, ``mediaFormat``: ``audio/x-mulaw`` at
8 kHz or ``audio/x-l16`` at 8 or 16 kHz; the ``extraHeaders`` of the XML as
``extra_headers``), ``media``, ``dtmf``, ``playedStream`` (a checkpoint's audio has played;
Plivo sends none for audio a clear dropped) and ``clearedAudio``. It has no stop message: the
socket closes. It takes ``playAudio`` (each naming its content type and rate),
``checkpoint`` (our marks) and ``clearAudio``.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from voxpipe.config import TelephonyConfig
from voxpipe.conversation.events import ErrorCode
from voxpipe.observability.logs import PrintableId
from voxpipe.transports import plivo_rest
from voxpipe.transports.telephony.base import (
    NO_INBOUND,
    AudioFormat,
    Encoding,
    Ignored,
    KeyMessage,
    MediaMessage,
    Numeral,
    Played,
    Provider,
    ProviderEvent,
    Refused,
    Started,
    WireMessage,
    b64,
    compact,
    messages_of,
    shared_event,
)

CONTENT_TYPES = {"audio/x-mulaw": Encoding.MULAW, "audio/x-l16": Encoding.PCM16LE}
_HEADER = re.compile(r"([A-Za-z0-9_]{1,64})=([^,;]{0,256})")


def extra_headers(text: str) -> dict[str, str]:
    """``extraHeaders="From=15550100,lang=en"`` as Plivo passes it on (its docs show both ``,``
    and ``;`` between pairs)."""
    return dict(_HEADER.findall(text))


class MediaFormat(WireMessage):
    encoding: Literal["audio/x-mulaw", "audio/x-l16"]
    sampleRate: Literal[8000, 16000]


class StartInfo(WireMessage):
    callId: PrintableId
    streamId: PrintableId
    accountId: str = Field("", max_length=128)
    tracks: list[Literal["inbound", "outbound"]] = Field(min_length=1, max_length=2)
    mediaFormat: MediaFormat


class Start(WireMessage):
    event: Literal["start"]
    sequenceNumber: Numeral
    start: StartInfo
    extra_headers: str = Field("", max_length=1024)


class _StreamMessage(WireMessage):
    sequenceNumber: Numeral
    streamId: PrintableId


class Media(_StreamMessage, MediaMessage):
    pass


class Dtmf(_StreamMessage, KeyMessage):
    pass


class PlayedStream(_StreamMessage):
    event: Literal["playedStream"]
    name: str = Field(max_length=256)


class ClearedAudio(_StreamMessage):
    event: Literal["clearedAudio"]


class Plivo(Provider):
    name = "plivo"
    title = "Plivo"
    messages = messages_of(Start, Media, Dtmf, PlayedStream, ClearedAudio)
    dial = staticmethod(plivo_rest.dial)  # POST /v1/calls
    start_event = "start"

    def inbound(self, message: WireMessage) -> ProviderEvent | Refused:
        if isinstance(message, Start):
            info = message.start
            if "inbound" not in info.tracks:
                return NO_INBOUND
            wire = info.mediaFormat
            if wire.encoding == "audio/x-mulaw" and wire.sampleRate != 8000:
                return Refused(
                    ErrorCode.INVALID_EVENT, "start: audio/x-mulaw is 8000 Hz only", True
                )
            return Started(
                info.streamId,
                call_id=info.callId,
                account_id=info.accountId,
                audio=AudioFormat(CONTENT_TYPES[wire.encoding], wire.sampleRate),
                parameters=extra_headers(message.extra_headers),
                about=f"Plivo, tracks {','.join(info.tracks)}",
            )
        assert isinstance(message, _StreamMessage)
        sid = message.streamId
        if (shared := shared_event(sid, message)) is not None:
            return shared
        if isinstance(message, PlayedStream):
            return Played(sid, message.name)
        return Ignored(sid, "Plivo's buffer is cleared")

    def media(self, stream: Started, payload: bytes) -> str:
        assert stream.audio is not None
        content = "audio/x-mulaw" if stream.audio.encoding is Encoding.MULAW else "audio/x-l16"
        media = {"contentType": content, "sampleRate": stream.audio.rate, "payload": b64(payload)}
        return compact({"event": "playAudio", "media": media})

    def mark(self, stream: Started, name: str) -> str:
        return compact({"event": "checkpoint", "streamId": stream.stream, "name": name})

    def clear(self, stream: Started) -> str:
        return compact({"event": "clearAudio", "streamId": stream.stream})

    async def transfer(self, config: TelephonyConfig, stream: Started, target: str) -> None:
        """The Call API's transfer of the start's ``callId`` to ``<Dial>`` XML this server
        serves (``plivo_rest.py``); Plivo leaves the ``<Stream>``, which ends this one."""
        await plivo_rest.transfer(config, stream.call_id, target)
