"""Vonage Voice API WebSockets at ``/v1/vonage`` (``docs/telephony.md#vonage``).

An NCCO ``connect`` action with a ``websocket`` endpoint (``uri: wss://host/v1/vonage``,
``content-type: audio/l16;rate=16000`` or ``rate=8000``) opens the socket. Unlike the others,
the audio is binary: each binary frame is 20 ms of 16-bit little-endian PCM, both ways, and
Vonage takes whole 20 ms frames only (640 bytes at 16 kHz), so the last frame of a reply is
padded with silence. Text frames are JSON: first ``websocket:connected`` (the content type,
and the endpoint's ``headers`` at the top level: the call's parameters), then
``websocket:dtmf`` (a key), ``websocket:notify`` (the echo of a ``notify`` action, our mark,
once the audio before it has played) and ``websocket:cleared`` (a ``clear`` action was done).
No message names the call: the NCCO's ``headers`` may (``call_uuid``), else the session gets a
random id. There is no stop message: the socket closes.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import ConfigDict, Field

from voxpipe.config import TelephonyConfig
from voxpipe.observability.logs import check_id
from voxpipe.transports import vonage_rest
from voxpipe.transports.telephony.base import (
    Audio,
    AudioFormat,
    Digit,
    DigitKey,
    Encoding,
    Ignored,
    Played,
    Provider,
    ProviderEvent,
    Refused,
    Started,
    TransferUnsupported,
    WireMessage,
    compact,
    messages_of,
)

CALL_HEADER = "call_uuid"  # the NCCO header that names the call (the answer webhook's uuid)
FRAME_MS = 20
MAX_HEADERS = 32


class Connected(WireMessage):
    """Its extra fields are the NCCO endpoint's ``headers``, so they are kept."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    event: Literal["websocket:connected"]
    content_type: Literal["audio/l16;rate=16000", "audio/l16;rate=8000"] = Field(
        alias="content-type"
    )

    @property
    def headers(self) -> dict[str, str]:
        extra: dict[str, Any] = self.model_extra or {}
        strings = {k: v for k, v in extra.items() if isinstance(v, str) and len(k) <= 64}
        return dict(list(strings.items())[:MAX_HEADERS])


class Dtmf(WireMessage):
    event: Literal["websocket:dtmf"]
    digit: DigitKey


class Notify(WireMessage):
    event: Literal["websocket:notify"]
    payload: dict[str, Any]


class Cleared(WireMessage):
    event: Literal["websocket:cleared"]


class Vonage(Provider):
    name = "vonage"
    title = "Vonage"
    messages = messages_of(Connected, Dtmf, Notify, Cleared)
    dial = staticmethod(vonage_rest.dial)  # POST /v1/calls
    start_event = "websocket:connected"
    frame_ms = FRAME_MS

    def inbound(self, message: WireMessage) -> ProviderEvent | Refused:
        if isinstance(message, Connected):
            headers = message.headers
            call = headers.get(CALL_HEADER, "")
            if not _named_id(call):
                call = uuid.uuid4().hex  # the NCCO named none: the session's own id
            rate = 16000 if message.content_type.endswith("16000") else 8000
            return Started(
                call,
                call_id=call,
                audio=AudioFormat(Encoding.PCM16LE, rate),
                parameters=headers,
                about="Vonage",
            )
        if isinstance(message, Dtmf):
            return Digit(None, message.digit)
        if isinstance(message, Notify):
            name = message.payload.get("mark")
            return Played(None, name if isinstance(name, str) else repr(name)[:64])
        return Ignored(None, "Vonage's buffer is cleared")

    def binary(self, data: bytes) -> ProviderEvent | Refused:
        return Audio(None, data, "audio frame")

    def media(self, stream: Started, payload: bytes) -> bytes:
        return payload

    def mark(self, stream: Started, name: str) -> str:
        return compact({"action": "notify", "payload": {"mark": name}})

    def clear(self, stream: Started) -> str:
        return compact({"action": "clear"})

    async def transfer(self, config: TelephonyConfig, stream: Started, target: str) -> None:
        """The Voice API's transfer of the call the NCCO's ``call_uuid`` header names to an
        NCCO ``connect`` (``vonage_rest.py``); with no such header no call can be named."""
        if stream.parameters.get(CALL_HEADER) != stream.call_id:
            raise TransferUnsupported(
                f"the NCCO's websocket endpoint named no {CALL_HEADER} header: Vonage cannot "
                "be told which call to transfer (docs/telephony.md#vonage)"
            )
        await vonage_rest.transfer(config, stream.call_id, target)


def _named_id(value: str) -> bool:
    try:
        check_id(value)
    except ValueError:
        return False
    return True
