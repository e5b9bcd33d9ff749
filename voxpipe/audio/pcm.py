"""PCM16 frames: conversion, resampling, framing, and WAV files.

Every frame of a call is PCM16 little-endian mono on the wire and float32 inside: the
caller's audio is converted and resampled to 16 kHz on its way in, and the reply's is
resampled to the client's rate, converted and cut into fixed-size frames on its way out.
Resampling is soxr's (libsoxr's VHQ/HQ polyphase filters).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import soxr


def pcm16_to_float(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def float_to_pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


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


class Pcm16Framer:
    """Cut a byte stream of PCM16 that arrives in chunks of any size (TTS output) into
    fixed-size frames; the last one may be short."""

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


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """Read a PCM16 WAV as mono float32; returns (audio, sample_rate)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV is supported")
        rate, channels = w.getframerate(), w.getnchannels()
        audio = pcm16_to_float(w.readframes(w.getnframes()))
    if channels > 1:
        audio = audio.reshape(-1, channels).mean(axis=1)
    return audio, rate


def write_wav(path: Path, pcm16: bytes, sample_rate: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm16)
