"""PCM16 frames: conversion, resampling, framing, WAV files, and G.711.

Every frame of a call is PCM16 little-endian mono on the wire and float32 inside: the
caller's audio is converted and resampled to 16 kHz on its way in, and the reply's is
resampled to the client's rate, converted and cut into fixed-size frames on its way out.
Resampling is soxr's (libsoxr's VHQ/HQ polyphase filters).

**G.711** (μ-law and A-law, as ITU-T G.711 defines them) is the PCM of telephony: Twilio
Media Streams send 8 kHz μ-law, and OpenAI's Realtime API accepts ``g711_ulaw`` and
``g711_alaw``. The stdlib's ``audioop`` did this but is gone in Python 3.13, so the codecs
are lookup tables: every one of the 65 536 PCM16 values maps to its code, and every one of
the 256 codes to its PCM16 value, computed once at import with the integer arithmetic of
the reference implementation (Sun's ``g711.c``, which ``audioop`` uses): μ-law on the top
14 bits with a bias of 33, A-law on the top 13 bits with even-bit inversion. Encoding or
decoding is one numpy indexing operation, a few microseconds per 20 ms frame.
``tests/unit/audio/test_g711.py`` checks every table entry against ``audioop``.
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


def trim_silence(
    audio: np.ndarray, rate: int, floor: float = 0.01, lead_s: float = 0.01, tail_s: float = 0.08
) -> np.ndarray:
    """``audio`` (float mono) with its leading and trailing quiet cut to ``lead_s`` and
    ``tail_s``, quiet being 10 ms windows whose RMS is under ``floor``; unchanged when no
    window reaches it. A TTS pads each utterance (Piper: about 50 ms before, 230 ms after),
    which a phrase said on its own does not need: the caller hears its first word sooner,
    and the answer queued behind it starts sooner."""
    window = max(1, rate // 100)
    count = len(audio) // window
    if count == 0:
        return audio
    frames = audio[: count * window].astype(np.float64).reshape(count, window)
    loud = np.flatnonzero(np.sqrt((frames**2).mean(axis=1)) >= floor)
    if loud.size == 0:
        return audio
    start = max(0, loud[0] * window - round(lead_s * rate))
    end = min(len(audio), (loud[-1] + 1) * window + round(tail_s * rate))
    return audio[start:end]


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


_QUANT_MASK = 0x0F
_SEG_MASK = 0x70
_SEG_SHIFT = 4
_SIGN_BIT = 0x80
_ULAW_BIAS = 0x84  # 132: added to the 16-bit magnitude (33 on the 14-bit one)
# Upper end of each segment's magnitude range (14-bit μ-law, 13-bit A-law).
_ULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], np.int32)
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], np.int32)


def _all_pcm16() -> np.ndarray:
    """Every PCM16 value, ordered by its uint16 bit pattern (so a table is indexed by it)."""
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.int16).astype(np.int32)


def _segment(magnitude: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The first segment whose end is >= the magnitude (8: beyond the last)."""
    return np.searchsorted(ends, magnitude, side="left").astype(np.int32)


def _ulaw_encode_table() -> np.ndarray:
    pcm = _all_pcm16() >> 2  # 14-bit, arithmetic shift as in the reference
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    magnitude = np.abs(pcm) + (_ULAW_BIAS >> 2)
    seg = _segment(magnitude, _ULAW_SEG_END)
    code = (np.minimum(seg, 7) << _SEG_SHIFT) | ((magnitude >> (np.minimum(seg, 7) + 1)) & 0xF)
    code = np.where(seg >= 8, 0x7F, code) ^ mask
    return code.astype(np.uint8)


def _ulaw_decode_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & _QUANT_MASK) << 3) + _ULAW_BIAS) << ((u & _SEG_MASK) >> _SEG_SHIFT)
    return np.where(u & _SIGN_BIT, _ULAW_BIAS - t, t - _ULAW_BIAS).astype("<i2")


def _alaw_encode_table() -> np.ndarray:
    pcm = _all_pcm16() >> 3  # 13-bit
    negative = pcm < 0
    mask = np.where(negative, 0x55, 0xD5)
    magnitude = np.where(negative, -pcm - 1, pcm)
    seg = _segment(magnitude, _ALAW_SEG_END)
    shift = np.where(seg < 2, 1, np.minimum(seg, 7))
    code = (np.minimum(seg, 7) << _SEG_SHIFT) | ((magnitude >> shift) & _QUANT_MASK)
    code = np.where(seg >= 8, 0x7F, code) ^ mask
    return code.astype(np.uint8)


def _alaw_decode_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    t = (a & _QUANT_MASK) << 4
    seg = (a & _SEG_MASK) >> _SEG_SHIFT
    t = np.where(seg == 0, t + 8, (t + 0x108) << np.maximum(seg - 1, 0))
    return np.where(a & _SIGN_BIT, t, -t).astype("<i2")


_ULAW_ENCODE = _ulaw_encode_table()
_ULAW_DECODE = _ulaw_decode_table()
_ALAW_ENCODE = _alaw_encode_table()
_ALAW_DECODE = _alaw_decode_table()


def _pcm_index(pcm16: bytes) -> np.ndarray:
    if len(pcm16) % 2:
        raise ValueError(f"PCM16 needs an even number of bytes, got {len(pcm16)}")
    return np.frombuffer(pcm16, dtype="<u2")


def ulaw_encode(pcm16: bytes) -> bytes:
    """PCM16 LE mono -> μ-law, one byte per sample."""
    return _ULAW_ENCODE[_pcm_index(pcm16)].tobytes()


def ulaw_decode(data: bytes) -> bytes:
    """μ-law -> PCM16 LE mono, two bytes per sample."""
    return _ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)].tobytes()


def alaw_encode(pcm16: bytes) -> bytes:
    """PCM16 LE mono -> A-law, one byte per sample."""
    return _ALAW_ENCODE[_pcm_index(pcm16)].tobytes()


def alaw_decode(data: bytes) -> bytes:
    """A-law -> PCM16 LE mono, two bytes per sample."""
    return _ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)].tobytes()
