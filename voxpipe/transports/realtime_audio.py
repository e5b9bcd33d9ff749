"""Audio on the OpenAI Realtime wire <-> the session's PCM16 at 24 kHz.

The Realtime API speaks PCM16 at 24 kHz, or G.711 (μ-law, A-law) at 8 kHz. The
session of a Realtime call always runs at 24 kHz in and out, so a client may
switch formats with ``session.update`` at any time: G.711 is decoded here and
resampled to 24 kHz on the way in, and resampled to 8 kHz and encoded on the
way out. Resampler state is kept across chunks (one stream per direction), so
chunk edges make no clicks.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import numpy as np

from voxpipe.audio.pcm import (
    StreamResampler,
    alaw_decode,
    alaw_encode,
    float_to_pcm16,
    pcm16_to_float,
    ulaw_decode,
    ulaw_encode,
)

SESSION_RATE = 24000  # the session's input and output rate on this transport
G711_RATE = 8000


class RealtimeAudioFormat(StrEnum):
    """A Realtime session's audio format, by its beta name; the GA API's ``audio/pcm``,
    ``audio/pcmu``, ``audio/pcma`` map here."""

    PCM16 = "pcm16"
    G711_ULAW = "g711_ulaw"
    G711_ALAW = "g711_alaw"

    @property
    def rate(self) -> int:
        return SESSION_RATE if self is RealtimeAudioFormat.PCM16 else G711_RATE

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self is RealtimeAudioFormat.PCM16 else 1

    def ms(self, nbytes: int) -> float:
        """Duration of ``nbytes`` of audio in this format."""
        return nbytes / self.bytes_per_sample * 1000 / self.rate

    def ga(self) -> dict[str, object]:
        if self is RealtimeAudioFormat.PCM16:
            return {"type": "audio/pcm", "rate": SESSION_RATE}
        return {"type": "audio/pcmu" if self is RealtimeAudioFormat.G711_ULAW else "audio/pcma"}


GA_FORMATS = {
    "audio/pcm": RealtimeAudioFormat.PCM16,
    "audio/pcmu": RealtimeAudioFormat.G711_ULAW,
    "audio/pcma": RealtimeAudioFormat.G711_ALAW,
}

_DECODE: dict[RealtimeAudioFormat, Callable[[bytes], bytes]] = {
    RealtimeAudioFormat.G711_ULAW: ulaw_decode,
    RealtimeAudioFormat.G711_ALAW: alaw_decode,
}
_ENCODE: dict[RealtimeAudioFormat, Callable[[bytes], bytes]] = {
    RealtimeAudioFormat.G711_ULAW: ulaw_encode,
    RealtimeAudioFormat.G711_ALAW: alaw_encode,
}


class BadAudio(ValueError):
    """Bytes that are not audio of the declared format."""


class InboundAudio:
    """Client audio (one format, for as long as the session keeps it) -> PCM16 at 24 kHz."""

    def __init__(self, fmt: RealtimeAudioFormat) -> None:
        self.format = fmt
        self._resampler = StreamResampler(fmt.rate, SESSION_RATE)

    def decode(self, data: bytes) -> bytes:
        if self.format is RealtimeAudioFormat.PCM16:
            if len(data) % 2:
                raise BadAudio(f"pcm16 audio must have an even number of bytes; got {len(data)}")
            return data
        pcm8k = _DECODE[self.format](data)
        return float_to_pcm16(self._resampler.process(pcm16_to_float(pcm8k)))


class OutboundAudio:
    """Reply audio (PCM16 at 24 kHz) -> the client's format; one per response."""

    def __init__(self, fmt: RealtimeAudioFormat) -> None:
        self.format = fmt
        self._resampler = StreamResampler(SESSION_RATE, fmt.rate)

    def encode(self, pcm: bytes) -> bytes:
        if self.format is RealtimeAudioFormat.PCM16:
            return pcm
        return _ENCODE[self.format](float_to_pcm16(self._resampler.process(pcm16_to_float(pcm))))

    def flush(self) -> bytes:
        """The resampler's last samples, at the end of a response."""
        if self.format is RealtimeAudioFormat.PCM16:
            return b""
        tail = self._resampler.process(np.zeros(0, np.float32), last=True)
        return _ENCODE[self.format](float_to_pcm16(tail)) if tail.size else b""
