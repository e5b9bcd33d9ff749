"""What a telephony provider is: the base class a provider's module implements, the
messages it reads, what each one means to the call, and the audio formats it streams.
messages it reads, and what each one means to the call.

Twilio, Telnyx, Plivo, Vonage and Exotel each open a WebSocket per call and speak their own
JSON (or binary) dialect of the same idea: a start naming the call and its audio format,
caller audio every 20-100 ms, key presses, echoes of marks once the audio before them has
played, a way to drop what is buffered (barge-in), and an end. A provider's module
(``twilio.py``, ``telnyx.py``, ...) only translates that dialect: a table of its messages
(strict :class:`WireMessage` models), :meth:`Provider.inbound` turning one into an
:class:`ProviderEvent`, and three encoders (``media``, ``mark``, ``clear``: those of
:class:`MediaMarkClear` where it takes Twilio's messages as they are); its class is then
listed in ``PROVIDERS`` (``telephony/__init__.py``). Everything else, the call itself over
the provider's socket, is ``media_stream.py``, once for all of them.

**Audio formats.** A provider names its format in its start message (Twilio:
``audio/x-mulaw``, Telnyx: ``PCMU``/``PCMA``/``L16``, Plivo: ``audio/x-l16``, Vonage:
``audio/l16;rate=16000``, Exotel: raw 16-bit PCM); its module maps that name onto one
:class:`AudioFormat`, and the base decodes the caller's audio, encodes the reply and checks a
frame's size. L16 as RTP carries it (Telnyx) is big-endian (RFC 3551, 4.5.11); the L16 of
Plivo, Vonage and Exotel is the little-endian PCM16 of a WAV file, so both are here, named
apart.
"""

from __future__ import annotations

import base64
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from voxpipe.audio.pcm import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from voxpipe.config import TelephonyConfig
from voxpipe.conversation.events import ErrorCode
from voxpipe.transports.provider_rest import NotDialable

MAX_INSTRUCTIONS = 8000  # a start's "instructions" parameter, in characters
CALLER_PARAMETERS = ("From", "from", "caller")
"""The custom parameters that may carry the caller's number, for providers whose start has
none of its own (Twilio, Plivo, Vonage): the operator's webhook passes its ``From`` on."""


Numeral = Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=r"^[0-9]{1,20}$")]
"""A counter some providers send as a JSON number and others (or the same one's docs) as a
string of digits: both are taken where the value is only logged."""
DigitKey = Annotated[str, Field(pattern=r"^[0-9*#A-D]$")]  # a DTMF key


def compact(message: dict[str, Any]) -> str:
    """JSON without spaces: a message every 20 ms each way, so bytes count."""
    return json.dumps(message, separators=(",", ":"))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class WireMessage(BaseModel):
    """A provider's message: strict types (no "1" for 1), required fields required; fields
    the provider may add later are ignored, so a live phone line never breaks on them."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


Messages = Mapping[str, type[WireMessage]]  # a provider's messages, by their "event"


def messages_of(*models: type[WireMessage]) -> Messages:
    """A provider's message table, keyed by each model's own ``event: Literal[...]``."""
    table: dict[str, type[WireMessage]] = {}
    for model in models:
        (kind,) = get_args(model.model_fields["event"].annotation)
        table[kind] = model
    return table


class MarkInfo(WireMessage):
    name: str = Field(max_length=256)


class KeyInfo(WireMessage):
    digit: DigitKey


class TrackMedia(WireMessage):
    """Caller audio as Twilio, Telnyx and Plivo send it: a track, a chunk number, base64."""

    track: Literal["inbound", "outbound"]
    chunk: Numeral
    payload: str = Field(min_length=1)


# -- what a provider's message means ------------------------------------------------------


@dataclass(frozen=True)
class ProviderEvent:
    """One message from the provider, translated. ``stream``: the stream id it names (checked
    against the call's own), None where the provider's messages name none (Vonage)."""

    stream: str | None


@dataclass(frozen=True)
class Ignored(ProviderEvent):
    """Nothing for the session: ``connected``, another track's audio, an acknowledgement."""

    note: str = ""


@dataclass(frozen=True)
class Started(ProviderEvent):
    """The call begins: its ids, its audio format, and the operator's parameters."""

    call_id: str = ""
    account_id: str = ""
    audio: AudioFormat | None = None  # None: the provider sends no format (never, today)
    parameters: Mapping[str, str] = field(default_factory=dict)
    caller: str | None = None  # from the start itself, where the provider sends it
    about: str = ""  # what the log line says of it (the ids' format, the tracks)

    @property
    def caller_number(self) -> str | None:
        """The provider's own caller field, else the parameter that carries it."""
        if self.caller:
            return self.caller
        return next((self.parameters[k] for k in CALLER_PARAMETERS if self.parameters.get(k)), None)


@dataclass(frozen=True)
class Audio(ProviderEvent):
    """Caller audio: base64 text (JSON providers) or raw bytes (a binary frame)."""

    payload: str | bytes = b""
    label: str = "media"  # names the frame in an error: "media 17"


@dataclass(frozen=True)
class Played(ProviderEvent):
    """A mark's echo: the audio before it has played (or a clear dropped it)."""

    name: str = ""


@dataclass(frozen=True)
class Digit(ProviderEvent):
    digit: str = ""


@dataclass(frozen=True)
class Stopped(ProviderEvent):
    """The provider ended the stream (the caller hung up)."""

    reason: str = ""


@dataclass(frozen=True)
class ProviderError(ProviderEvent):
    """The provider reports a problem with what it was sent (Telnyx's ``error``)."""

    detail: str = ""


@dataclass(frozen=True)
class Refused:
    """A message that parses but cannot be used; ``fatal`` ends a call not yet started."""

    code: ErrorCode
    message: str
    fatal: bool = False


def track_audio(stream: str, media: TrackMedia) -> Audio | Ignored:
    """Caller audio from a stream that may carry both legs of the call: the other leg (the
    ``outbound`` track, ``<Start><Stream>`` with both tracks) is not the caller."""
    if media.track != "inbound":
        return Ignored(stream, "of the outbound track")
    return Audio(stream, media.payload, f"media {media.chunk}")


class MediaMessage(WireMessage):
    """``media``: caller audio on a named track (Twilio's, Telnyx's and Plivo's shape)."""

    event: Literal["media"]
    media: TrackMedia


class MarkMessage(WireMessage):
    """``mark``: the audio sent before the named mark has played, or a clear dropped it."""

    event: Literal["mark"]
    mark: MarkInfo


class KeyMessage(WireMessage):
    """``dtmf``: the caller pressed a key."""

    event: Literal["dtmf"]
    dtmf: KeyInfo


def shared_event(stream: str, message: WireMessage) -> ProviderEvent | None:
    """The messages that Twilio-shaped streams share, whatever each names its ids: a
    provider's stream message subclasses one of them, and its ``inbound`` asks here first."""
    if isinstance(message, MediaMessage):
        return track_audio(stream, message.media)
    if isinstance(message, MarkMessage):
        return Played(stream, message.mark.name)
    if isinstance(message, KeyMessage):
        return Digit(stream, message.dtmf.digit)
    return None


NO_INBOUND = Refused(ErrorCode.INVALID_EVENT, "start: no inbound track: nothing to answer", True)


class TransferUnsupported(Exception):
    """The provider has no call update this server can make (yet)."""


class Provider(ABC):
    """One provider's wire protocol; one instance per call (some keep the stream's ids)."""

    name: ClassVar[str]  # the route (/v1/<name>), metrics label, log name
    title: ClassVar[str]  # the provider's name in messages: "Twilio"
    messages: ClassVar[Messages]  # by the message's "event"
    start_event: ClassVar[str]  # the message that starts the call: a bad one ends it
    frame_ms: ClassVar[int | None] = None  # reply audio cut/padded to frames of this size

    @abstractmethod
    def inbound(self, message: WireMessage) -> ProviderEvent | Refused:
        """What a validated message means."""

    def binary(self, data: bytes) -> ProviderEvent | Refused:
        """A binary frame: caller audio for providers that send it so; others refuse it."""
        return Refused(ErrorCode.INVALID_EVENT, f"a binary message: {self.title} sends JSON text")

    @abstractmethod
    def media(self, stream: Started, payload: bytes) -> str | bytes:
        """A reply frame, already in the stream's encoding."""

    @abstractmethod
    def mark(self, stream: Started, name: str) -> str | bytes:
        """A mark after the audio sent so far, echoed once that has played."""

    @abstractmethod
    def clear(self, stream: Started) -> str | bytes:
        """Drop the audio buffered for the caller (barge-in)."""

    async def transfer(self, config: TelephonyConfig, stream: Started, target: str) -> None:
        """Put the call through to ``target`` (the call then leaves this stream), through
        the provider's REST API (its ``*_rest.py``); raises when the call stays here."""
        raise TransferUnsupported(f"{self.title} call transfer is not supported")

    @staticmethod
    async def dial(
        cfg: TelephonyConfig, to: str, stream_url: str, parameters: dict[str, str]
    ) -> str:
        """Place an outbound call (``POST /v1/calls``) whose audio streams to ``stream_url``,
        this provider's route, with ``parameters`` as the start's; the provider's id of it.
        A provider that dials sets this to its ``*_rest.dial``."""
        raise NotDialable("this provider places no outbound calls")


class MediaMarkClear(Provider):
    """A provider that takes Twilio's three messages as they are (``media``, ``mark`` and
    ``clear``, in JSON), each naming the stream under ``stream_key`` where it names it."""

    stream_key: ClassVar[str | None] = None

    def media(self, stream: Started, payload: bytes) -> str:
        return self._message("media", stream, {"media": {"payload": b64(payload)}})

    def mark(self, stream: Started, name: str) -> str:
        return self._message("mark", stream, {"mark": {"name": name}})

    def clear(self, stream: Started) -> str:
        return self._message("clear", stream, {})

    def _message(self, event: str, stream: Started, body: dict[str, Any]) -> str:
        named = {self.stream_key: stream.stream} if self.stream_key else {}
        return compact({"event": event, **named, **body})


class Encoding(StrEnum):
    MULAW = "mulaw"  # G.711 μ-law, one byte a sample
    ALAW = "alaw"  # G.711 A-law, one byte a sample
    PCM16LE = "pcm16le"  # linear 16-bit, little-endian (WAV's byte order)
    PCM16BE = "pcm16be"  # linear 16-bit, network byte order (RTP's L16)


_SAMPLE_BYTES = {Encoding.MULAW: 1, Encoding.ALAW: 1, Encoding.PCM16LE: 2, Encoding.PCM16BE: 2}
_SILENCE = {Encoding.MULAW: b"\xff", Encoding.ALAW: b"\xd5", Encoding.PCM16LE: b"\0\0"}


def _swap16(data: bytes) -> bytes:
    return np.frombuffer(data, dtype="<u2").byteswap().tobytes()


def _same(data: bytes) -> bytes:
    return data


_CODERS: dict[Encoding, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    Encoding.MULAW: (ulaw_decode, ulaw_encode),  # (wire -> PCM16 LE, PCM16 LE -> wire)
    Encoding.ALAW: (alaw_decode, alaw_encode),
    Encoding.PCM16LE: (_same, _same),
    Encoding.PCM16BE: (_swap16, _swap16),
}


@dataclass(frozen=True)
class AudioFormat:
    """One direction's audio on the wire: its encoding and sample rate, mono."""

    encoding: Encoding
    rate: int

    @property
    def sample_bytes(self) -> int:
        return _SAMPLE_BYTES[self.encoding]

    def bytes_for(self, ms: int) -> int:
        """The bytes ``ms`` of audio take on the wire."""
        return self.rate * ms // 1000 * self.sample_bytes

    def silence(self, size: int) -> bytes:
        """``size`` bytes of silence (``size`` a whole number of samples)."""
        return _SILENCE.get(self.encoding, b"\0\0") * (size // self.sample_bytes)

    def decode(self, data: bytes) -> bytes:
        """Wire audio -> PCM16 LE (``data`` a whole number of samples)."""
        return _CODERS[self.encoding][0](data)

    def encode(self, pcm16: bytes) -> bytes:
        """PCM16 LE -> wire audio."""
        return _CODERS[self.encoding][1](pcm16)

    def __str__(self) -> str:
        return f"{self.encoding.value} {self.rate} Hz"


MULAW_8K = AudioFormat(Encoding.MULAW, 8000)
