"""Keypad digits as RTP telephone-events (RFC 4733, section 2.3).

A key press is a run of packets with one RTP timestamp (the event's start), repeated while
the key is held, its last three carrying the end bit. A digit is reported once, at the first
packet of its timestamp that arrives: the caller hears no extra delay for a held key, and a
lost end packet loses nothing. Events 0-15 are the keypad (0-9, ``*``, ``#``, A-D); others
(flash, tones) are ignored.
"""

from __future__ import annotations

import struct
from collections import deque

from voxpipe.transports.sip.rtp import BadPacket

KEYS = "0123456789*#ABCD"
EVENT = struct.Struct("!BBH")  # event, E/R/volume, duration
REMEMBERED = 16  # event timestamps remembered for de-duplication


class DtmfReceiver:
    """Telephone-event payloads in, each digit out once."""

    def __init__(self) -> None:
        self._seen: deque[int] = deque(maxlen=REMEMBERED)

    def receive(self, timestamp: int, payload: bytes) -> str | None:
        """The digit this packet starts, or None (a repeat, an end, not a key)."""
        if len(payload) < EVENT.size:
            raise BadPacket("dtmf_short")
        event, _flags, _duration = EVENT.unpack_from(payload)
        if timestamp in self._seen:
            return None
        self._seen.append(timestamp)
        return KEYS[event] if event < len(KEYS) else None


def event_payload(digit: str, duration: int, end: bool, volume: int = 10) -> bytes:
    """One telephone-event payload (our tests' caller sends these)."""
    return EVENT.pack(KEYS.index(digit), (0x80 if end else 0) | (volume & 0x3F), duration)
