"""Twilio Media Streams at ``/v1/twilio`` (``docs/telephony.md#twilio``), and the
Twilio-compatible streams of SignalWire.

``<Connect><Stream url="wss://host/v1/twilio"/>`` opens the socket; Twilio sends JSON text:
``connected``, ``start`` (the stream's ids, ``audio/x-mulaw`` at 8 kHz, the TwiML's
``<Parameter>`` values), ``media`` every 20 ms, ``dtmf``, ``mark`` (echoes, also of marks a
``clear`` dropped), ``stop``. It takes ``media``, ``mark`` and ``clear``, each naming the
stream. The ids are taken in any bounded printable format: compatible providers (SignalWire:
UUIDs) send their own, and the start's log line says whose they look like.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from voxpipe.config import TelephonyConfig
from voxpipe.conversation.events import ErrorCode
from voxpipe.observability.logs import PrintableId
from voxpipe.transports import twilio_rest
from voxpipe.transports.telephony.base import (
    MULAW_8K,
    NO_INBOUND,
    Ignored,
    KeyInfo,
    KeyMessage,
    MarkMessage,
    MediaMarkClear,
    MediaMessage,
    ProviderEvent,
    Refused,
    Started,
    Stopped,
    TrackMedia,
    WireMessage,
    messages_of,
    shared_event,
)

_DIGITS = r"^[0-9]{1,20}$"
_TWILIO_SID = re.compile(r"^(MZ|CA|AC)[0-9a-fA-F]{32}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


class Connected(WireMessage):
    event: Literal["connected"]
    protocol: str
    version: str


class MediaFormat(WireMessage):
    encoding: Literal["audio/x-mulaw"]
    sampleRate: Literal[8000]
    channels: Literal[1]


class StartInfo(WireMessage):
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


class _StreamMessage(WireMessage):
    sequenceNumber: str = Field(pattern=_DIGITS)
    streamSid: PrintableId


class Start(_StreamMessage):
    event: Literal["start"]
    start: StartInfo


class MediaInfo(TrackMedia):
    chunk: str = Field(pattern=_DIGITS)  # Twilio's counters are strings: a number is refused
    timestamp: str = Field(pattern=_DIGITS)


class Media(_StreamMessage, MediaMessage):
    media: MediaInfo


class Mark(_StreamMessage, MarkMessage):
    pass


class DtmfInfo(KeyInfo):
    track: str = Field(max_length=32)


class Dtmf(_StreamMessage, KeyMessage):
    dtmf: DtmfInfo


class StopInfo(WireMessage):
    accountSid: PrintableId
    callSid: PrintableId


class Stop(_StreamMessage):
    event: Literal["stop"]
    stop: StopInfo


class Twilio(MediaMarkClear):
    name = "twilio"
    title = "Twilio"
    messages = messages_of(Connected, Start, Media, Mark, Dtmf, Stop)
    dial = staticmethod(twilio_rest.dial)  # POST /v1/calls
    start_event = "start"
    stream_key = "streamSid"

    def inbound(self, message: WireMessage) -> ProviderEvent | Refused:
        if isinstance(message, Connected):
            return Ignored(None, f"protocol {message.protocol} {message.version}")
        if isinstance(message, Start):
            return self._start(message)
        assert isinstance(message, _StreamMessage)
        sid = message.streamSid
        if (shared := shared_event(sid, message)) is not None:
            return shared
        assert isinstance(message, Stop)
        return Stopped(sid, "Twilio sent stop: the call hung up")

    def _start(self, start: Start) -> Started | Refused:
        info = start.start
        if start.streamSid != info.streamSid:
            return Refused(
                ErrorCode.INVALID_EVENT, "start: streamSid and start.streamSid differ", True
            )
        if "inbound" not in info.tracks:
            return NO_INBOUND
        return Started(
            info.streamSid,
            call_id=info.callSid,
            account_id=info.accountSid,
            audio=MULAW_8K,
            parameters=info.customParameters,
            about=f"{info.id_format}, tracks {','.join(info.tracks)}",
        )

    async def transfer(self, config: TelephonyConfig, stream: Started, target: str) -> None:
        """Twilio's REST API updates the live call with ``<Dial>`` TwiML (``twilio_rest.py``),
        which ends this stream."""
        await twilio_rest.transfer(config, stream.account_id, stream.call_id, target)
