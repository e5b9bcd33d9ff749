"""Twilio's side of a bidirectional Media Stream, for tests and benchmarks of ``/v1/twilio``.

It speaks the protocol as Twilio documents it (``docs/telephony.md#twilio``): ``connected``,
then ``start`` with the stream's ids and ``audio/x-mulaw`` at 8000 Hz, then a ``media``
message of 160 bytes of μ-law (20 ms) every 20 ms in real time, with ``sequenceNumber``,
``chunk`` and ``timestamp``. It plays what the server sends as Twilio does
(:class:`PhoneLine`): a ``mark`` is echoed once the audio queued before it has played, and
``clear`` empties the buffer and echoes every mark still in it at once. ``hang_up`` sends
``stop``.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from voxpipe.clients.phone_line import Outgoing, PhoneLine, Received, read_media_mark_clear

__all__ = ["Received", "TwilioLine"]


class TwilioLine(PhoneLine):
    sequence_key = "sequenceNumber"

    def __init__(self, url: str, custom_parameters: dict[str, str] | None = None) -> None:
        super().__init__(url, custom_parameters)
        self.stream_sid = "MZ" + uuid.uuid4().hex
        self.call_sid = "CA" + uuid.uuid4().hex
        self.account_sid = "AC" + uuid.uuid4().hex

    def opening(self) -> list[Outgoing]:
        start = {
            "accountSid": self.account_sid,
            "streamSid": self.stream_sid,
            "callSid": self.call_sid,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": self.custom_parameters,
        }
        return [
            {"event": "connected", "protocol": "Call", "version": "1.0.0"},
            self._numbered("start", start=start),
        ]

    def _numbered(self, event: str, **body: Any) -> dict[str, Any]:
        return {"event": event, "sequenceNumber": None, "streamSid": self.stream_sid, **body}

    def media(self, payload: bytes, chunk: int, timestamp_ms: int) -> Outgoing:
        media = {
            "track": "inbound",
            "chunk": str(chunk),
            "timestamp": str(timestamp_ms),
            "payload": base64.b64encode(payload).decode(),
        }
        return self._numbered("media", media=media)

    def key(self, digit: str) -> Outgoing:
        return self._numbered("dtmf", dtmf={"track": "inbound_track", "digit": digit})

    def echo(self, name: str) -> Outgoing:
        return self._numbered("mark", mark={"name": name})

    def stop(self) -> Outgoing:
        stop = {"accountSid": self.account_sid, "callSid": self.call_sid}
        return self._numbered("stop", stop=stop)

    def read(self, message: dict[str, Any]) -> Received:
        return read_media_mark_clear(self, message)
