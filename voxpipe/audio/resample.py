"""Streaming resampling with soxr (libsoxr's VHQ/HQ polyphase filters)."""

from __future__ import annotations

import numpy as np
import soxr


class StreamResampler:
    """Resample a stream chunk by chunk, keeping filter state across chunks.

    A pass-through when the rates match, so the common 16 kHz input costs nothing.
    """

    def __init__(self, in_rate: int, out_rate: int, quality: str = "HQ") -> None:
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream = (
            None
            if in_rate == out_rate
            else soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality=quality)
        )

    def process(self, audio: np.ndarray, last: bool = False) -> np.ndarray:
        if self._stream is None:
            return audio.astype(np.float32, copy=False)
        return self._stream.resample_chunk(audio.astype(np.float32, copy=False), last=last)


def resample(audio: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    """Resample a whole signal at once."""
    if in_rate == out_rate:
        return audio.astype(np.float32, copy=False)
    return soxr.resample(audio.astype(np.float32, copy=False), in_rate, out_rate, quality="HQ")
