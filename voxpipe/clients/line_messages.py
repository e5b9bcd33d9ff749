"""What a telephony provider's test line writes and reads: the provider's messages, its
audio encoding and its habits. A provider's line (``twilio_client.py``,
``telephony_clients.py``) is these and nothing else; ``phone_line.py`` plays the call.
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from voxpipe.audio.pcm import ulaw_decode, ulaw_encode

MEDIA, MARK, CLEAR = "media", "mark", "clear"  # the kinds a line plays; others are only kept
Outgoing = dict[str, Any] | bytes  # a JSON message (numbered as it goes out) or a binary frame


@dataclass
class Received:
    """One message from the server, with when it arrived (monotonic seconds). ``kind``: what
    the line made of it (media, mark, clear, or the message's own event); ``pcm``: a media
    message's audio as PCM16, ``mark``: a mark's name."""

    at: float
    message: dict[str, Any]
    kind: str = ""
    pcm: bytes = b""
    mark: str = ""


class LineMessages(ABC):
    """A provider's side of the wire, as a line writes and reads it."""

    rate: ClassVar[int] = 8000
    frame_ms: ClassVar[int] = 20  # caller audio a media message carries
    echoes_cleared_marks: ClassVar[bool] = True  # a clear sends back the marks it dropped
    sequence_key: ClassVar[str | None] = None  # the field numbering messages in send order
    sequence_as_text: ClassVar[bool] = True  # "7" (Twilio, Telnyx, Exotel) or 7 (Plivo)

    @abstractmethod
    def opening(self) -> list[Outgoing]:
        """What the provider sends as the socket opens, up to its start."""

    @abstractmethod
    def media(self, payload: bytes, chunk: int, timestamp_ms: int) -> Outgoing:
        """20 ms of the caller's audio, in the line's encoding."""

    @abstractmethod
    def key(self, digit: str) -> Outgoing:
        """A key press."""

    @abstractmethod
    def echo(self, name: str) -> Outgoing:
        """The echo of a mark whose audio has played."""

    @abstractmethod
    def stop(self) -> Outgoing | None:
        """The provider's end of the call; None: it only closes the socket."""

    @abstractmethod
    def read(self, message: dict[str, Any]) -> Received:
        """What a JSON message from the server is (its ``at`` is set when it is kept)."""

    def read_binary(self, data: bytes) -> Received:
        """A binary message: reply audio, for providers that send it so."""
        return Received(0.0, {}, "binary")

    def encode(self, pcm16: bytes) -> bytes:
        """PCM16 -> the line's encoding (μ-law unless the provider says otherwise)."""
        return ulaw_encode(pcm16)

    def decode(self, data: bytes) -> bytes:
        return ulaw_decode(data)

    def after_clear(self, dropped: list[str]) -> list[Outgoing]:
        """What the provider sends once it has cleared: by default, the dropped marks' echoes."""
        return [self.echo(name) for name in dropped]

    @property
    def frame_bytes(self) -> int:
        return len(self.encode(bytes(self.rate * self.frame_ms // 1000 * 2)))

    @property
    def width(self) -> int:
        """Bytes a sample on the wire."""
        return len(self.encode(b"\0\0"))

    def connect_options(self) -> dict[str, Any]:
        """Extra handshake options (headers) the provider sends."""
        return {}


def read_media_mark_clear(line: LineMessages, message: dict[str, Any]) -> Received:
    """The server's ``media``/``mark``/``clear`` in Twilio's shape (base64 ``media.payload``,
    ``mark.name``), which Telnyx and Exotel share."""
    kind = str(message.get("event", ""))
    if kind == MEDIA:
        pcm = line.decode(base64.b64decode(message["media"]["payload"]))
        return Received(0.0, message, MEDIA, pcm=pcm)
    if kind == MARK:
        return Received(0.0, message, MARK, mark=message["mark"]["name"])
    return Received(0.0, message, kind)
