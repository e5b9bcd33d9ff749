"""The audio formats telephony providers stream, each to and from the session's PCM16.

A provider names its format in its start message (Twilio: ``audio/x-mulaw``, Telnyx:
``PCMU``/``PCMA``/``L16``, Plivo: ``audio/x-l16``, Vonage: ``audio/l16;rate=16000``,
Exotel: raw 16-bit PCM); its module maps that name onto one :class:`AudioFormat`, and the
base does the rest: decoding the caller's audio, encoding the reply, checking a frame's size.
L16 as RTP carries it (Telnyx) is big-endian (RFC 3551, 4.5.11); the L16 of Plivo, Vonage and
Exotel is the little-endian PCM16 of a WAV file, so both are here, named apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from voxpipe.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode


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
