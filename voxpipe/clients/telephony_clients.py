"""Telnyx, Plivo, Vonage and Exotel's side of a media stream, for tests of ``/v1/<provider>``.

Each speaks its provider's protocol as the provider documents it (``docs/telephony.md``) and
plays the reply as the provider does (:class:`PhoneLine`); they differ only in their messages:

- :class:`TelnyxLine`: ``connected``, ``start`` (PCMU, 8 kHz), base64 ``media`` every 20 ms,
  ``dtmf``, ``mark`` echoes (a ``clear`` returns the marks it dropped), ``stop``;
- :class:`PlivoLine`: ``start`` (``audio/x-mulaw``), ``media``, ``dtmf``, ``playedStream`` for a
  ``checkpoint`` played, ``clearedAudio`` after ``clearAudio`` (no echo of what it dropped);
  hanging up closes the socket;
- :class:`VonageLine`: ``websocket:connected`` (``audio/l16;rate=16000``, the NCCO's headers),
  then binary 20 ms frames of PCM16 both ways, ``websocket:dtmf``, ``websocket:notify`` for a
  ``notify`` played, ``websocket:cleared`` after ``clear``; hanging up closes the socket;
- :class:`ExotelLine`: ``connected``, ``start`` (16-bit PCM at 8 kHz), 100 ms of base64 PCM a
  ``media``, ``dtmf``, ``mark`` echoes, ``stop``.
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

from voxpipe.clients.phone_line import (
    CLEAR,
    MARK,
    MEDIA,
    Outgoing,
    PhoneLine,
    Received,
    read_media_mark_clear,
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class TelnyxLine(PhoneLine):
    sequence_key = "sequence_number"

    def __init__(self, url: str, custom_parameters: dict[str, str] | None = None) -> None:
        super().__init__(url, custom_parameters)
        self.call_sid = "v3:" + uuid.uuid4().hex

    def _numbered(self, event: str, **body: Any) -> dict[str, Any]:
        return {"event": event, "sequence_number": None, "stream_id": self.stream_sid, **body}

    def opening(self) -> list[Outgoing]:
        start = {
            "user_id": str(uuid.uuid4()),
            "call_control_id": self.call_sid,
            "call_session_id": str(uuid.uuid4()),
            "from": self.custom_parameters.get("From", "+15550100"),
            "to": "+15550199",
            "client_state": "",
            "custom_parameters": self.custom_parameters,
            "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
        }
        return [{"event": "connected", "version": "1.0.0"}, self._numbered("start", start=start)]

    def media(self, payload: bytes, chunk: int, timestamp_ms: int) -> Outgoing:
        media = {"track": "inbound", "chunk": str(chunk), "timestamp": str(timestamp_ms)}
        return self._numbered("media", media={**media, "payload": _b64(payload)})

    def key(self, digit: str) -> Outgoing:
        occurred = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return self._numbered("dtmf", occurred_at=occurred, dtmf={"digit": digit})

    def echo(self, name: str) -> Outgoing:
        return self._numbered("mark", mark={"name": name})

    def stop(self) -> Outgoing:
        return self._numbered("stop", stop={"call_control_id": self.call_sid})

    def read(self, message: dict[str, Any]) -> Received:
        return read_media_mark_clear(self, message)


class PlivoLine(PhoneLine):
    sequence_key = "sequenceNumber"
    sequence_as_text = False
    echoes_cleared_marks = False  # playedStream only for audio that played

    def _numbered(self, event: str, **body: Any) -> dict[str, Any]:
        return {"event": event, "sequenceNumber": None, "streamId": self.stream_sid, **body}

    def _headers(self) -> str:
        """The XML's ``extraHeaders``: Plivo takes letters and digits only, so other values
        (instructions with spaces, a number's ``+``) cannot be passed and are left out."""
        pairs = [(k, v.lstrip("+")) for k, v in self.custom_parameters.items()]
        return ";".join(f"{k}={v}" for k, v in pairs if k.isalnum() and v.isalnum())

    def opening(self) -> list[Outgoing]:
        start = {
            "callId": self.call_sid,
            "streamId": self.stream_sid,
            "accountId": "MA" + uuid.uuid4().hex[:18].upper(),
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000},
        }
        message = {"event": "start", "sequenceNumber": None, "start": start}
        return [{**message, "extra_headers": self._headers()}]

    def media(self, payload: bytes, chunk: int, timestamp_ms: int) -> Outgoing:
        media = {"track": "inbound", "timestamp": str(round(time.time() * 1000)), "chunk": chunk}
        return self._numbered("media", media={**media, "payload": _b64(payload)})

    def key(self, digit: str) -> Outgoing:
        return self._numbered("dtmf", dtmf={"track": "inbound", "digit": digit})

    def echo(self, name: str) -> Outgoing:
        return self._numbered("playedStream", name=name)

    def after_clear(self, dropped: list[str]) -> list[Outgoing]:
        return [self._numbered("clearedAudio")]

    def stop(self) -> None:
        return None  # Plivo has no stop message: the socket closes

    def read(self, message: dict[str, Any]) -> Received:
        kind = message.get("event")
        if kind == "playAudio":
            pcm = self.decode(base64.b64decode(message["media"]["payload"]))
            return Received(0.0, message, MEDIA, pcm=pcm)
        if kind == "checkpoint":
            return Received(0.0, message, MARK, mark=message["name"])
        return Received(0.0, message, CLEAR if kind == "clearAudio" else str(kind))


class VonageLine(PhoneLine):
    rate = 16000
    echoes_cleared_marks = False  # websocket:cleared, no notify for what it dropped

    def __init__(self, url: str, custom_parameters: dict[str, str] | None = None) -> None:
        super().__init__(url, custom_parameters)
        self.stream_sid = self.call_sid  # no stream id: the NCCO's call_uuid names the session

    def encode(self, pcm16: bytes) -> bytes:
        return pcm16

    def decode(self, data: bytes) -> bytes:
        return data

    def opening(self) -> list[Outgoing]:
        connected = {"event": "websocket:connected", "content-type": "audio/l16;rate=16000"}
        return [{**connected, "call_uuid": self.call_sid, **self.custom_parameters}]

    def media(self, payload: bytes, chunk: int, timestamp_ms: int) -> Outgoing:
        return payload

    def key(self, digit: str) -> Outgoing:
        return {"event": "websocket:dtmf", "digit": digit, "duration": 260}

    def echo(self, name: str) -> Outgoing:
        return {"event": "websocket:notify", "payload": {"mark": name}}

    def after_clear(self, dropped: list[str]) -> list[Outgoing]:
        return [{"event": "websocket:cleared"}]

    def stop(self) -> None:
        return None  # the call's end closes the socket

    def read(self, message: dict[str, Any]) -> Received:
        action = message.get("action")
        if action == "notify":
            return Received(0.0, message, MARK, mark=str(message["payload"].get("mark")))
        return Received(0.0, message, CLEAR if action == "clear" else str(action))

    def read_binary(self, data: bytes) -> Received:
        return Received(0.0, {"bytes": len(data)}, MEDIA, pcm=data)


class ExotelLine(PhoneLine):
    frame_ms = 100  # Exotel streams ~100 ms a message
    sequence_key = "sequence_number"
    echoes_cleared_marks = False

    def encode(self, pcm16: bytes) -> bytes:
        return pcm16

    def decode(self, data: bytes) -> bytes:
        return data

    def _numbered(self, event: str, **body: Any) -> dict[str, Any]:
        return {"event": event, "sequence_number": None, "stream_sid": self.stream_sid, **body}

    def opening(self) -> list[Outgoing]:
        start = {
            "stream_sid": self.stream_sid,
            "call_sid": self.call_sid,
            "account_sid": "exotel-account",
            "from": self.custom_parameters.get("From", "+919876543210"),
            "to": "+918047491899",
            "custom_parameters": self.custom_parameters,
            "media_format": {"encoding": "audio/x-raw", "sample_rate": "8000", "bit_rate": "16"},
        }
        return [{"event": "connected"}, self._numbered("start", start=start)]

    def media(self, payload: bytes, chunk: int, timestamp_ms: int) -> Outgoing:
        media = {"chunk": str(chunk), "timestamp": str(timestamp_ms), "payload": _b64(payload)}
        return self._numbered("media", media=media)

    def key(self, digit: str) -> Outgoing:
        return self._numbered("dtmf", dtmf={"digit": digit, "duration": "100"})

    def echo(self, name: str) -> Outgoing:
        return self._numbered("mark", mark={"name": name})

    def after_clear(self, dropped: list[str]) -> list[Outgoing]:
        return []

    def stop(self) -> Outgoing:
        return self._numbered("stop", stop={"call_sid": self.call_sid, "reason": "callended"})

    def read(self, message: dict[str, Any]) -> Received:
        return read_media_mark_clear(self, message)
