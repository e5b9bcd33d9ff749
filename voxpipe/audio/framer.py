"""Fixed-size PCM16 frames from audio that arrives in chunks of any size (TTS output)."""

from __future__ import annotations


class Pcm16Framer:
    """Cut a byte stream of PCM16 into fixed-size frames; the last one may be short."""

    def __init__(self, samples_per_frame: int) -> None:
        self.size = samples_per_frame * 2
        self._buf = bytearray()

    def push(self, pcm: bytes) -> list[bytes]:
        self._buf += pcm
        out = []
        while len(self._buf) >= self.size:
            out.append(bytes(self._buf[: self.size]))
            del self._buf[: self.size]
        return out

    def flush(self, pad: bool = False) -> list[bytes]:
        """What is left: a short frame, or with ``pad`` a whole one ending in silence (for
        audio that more audio follows, such as the filler: only a reply's very last frame
        may be short)."""
        rest, self._buf = bytes(self._buf), bytearray()
        if rest and pad:
            rest += bytes(self.size - len(rest))
        return [rest] if rest else []
