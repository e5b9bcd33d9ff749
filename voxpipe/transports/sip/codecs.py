"""The audio codecs a SIP call's RTP carries, each between its payloads and the session's PCM16.

Every codec here sends one packet per 20 ms (``a=ptime:20``). A codec has two rates: its RTP
clock (what the timestamps count: 8000 for G.711; 48000 for Opus, whatever its audio's
bandwidth, RFC 7587, 4.1) and the rate of the PCM16 it hands the session and takes from it.

- **PCMU, PCMA** (G.711, RFC 3551's static types 0 and 8): 8 kHz, one byte a sample,
  stateless (:class:`~voxpipe.transports.telephony.base.AudioFormat`).
- **opus** (RFC 7587): mono at 48 kHz both ways, through libopus as PyAV carries it (the
  ``av`` wheel aiortc brings: no native build of ours). Opus is stateful, so each call gets
  its own encoder and decoder (:func:`codec_for`); a packet libopus cannot read is
  :class:`BadPayload`, dropped and counted by the call like any bad RTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from voxpipe.transports.sip.rtp import BadPacket
from voxpipe.transports.telephony.base import AudioFormat, Encoding

FRAME_MS = 20
OPUS_RATE = 48000  # RFC 7587: the RTP clock, and the rate we encode and decode at
OPUS_BITRATE = 32000  # wideband speech, mono: what a softphone sends by default
OPUS_MAX_PACKET = 1275  # bytes in one Opus frame at most (RFC 6716, 3.2.1)


@dataclass(frozen=True)
class CodecInfo:
    """How SDP names a codec, and its RTP clock."""

    name: str  # as ``sip.codecs`` writes it
    encoding: str  # the rtpmap's encoding name, upper-case
    clock_rate: int
    channels: int  # written in the rtpmap when not 1 (Opus: always 2, RFC 7587, 7)
    static_payload_type: int | None  # RFC 3551's number; None: a dynamic one is offered

    @property
    def rtpmap(self) -> str:
        """``a=rtpmap``'s text after the payload type, as we write it."""
        name = "opus" if self.name == "opus" else self.encoding
        suffix = f"/{self.channels}" if self.channels != 1 else ""
        return f"{name}/{self.clock_rate}{suffix}"


CODECS = {
    "PCMU": CodecInfo("PCMU", "PCMU", 8000, 1, 0),
    "PCMA": CodecInfo("PCMA", "PCMA", 8000, 1, 8),
    "opus": CodecInfo("opus", "OPUS", OPUS_RATE, 2, None),
}


class BadPayload(BadPacket):
    """An audio payload the codec cannot decode."""


class RtpCodec(Protocol):
    """One call's codec: its payloads to and from the session's PCM16 (LE, mono)."""

    @property
    def clock_rate(self) -> int: ...

    @property
    def pcm_rate(self) -> int: ...

    def max_payload(self, ms: int) -> int:
        """The largest payload that can hold ``ms`` of audio."""
        ...

    def decode(self, payload: bytes) -> bytes: ...

    def encode(self, pcm16: bytes) -> bytes:
        """One 20 ms frame of PCM16 at :attr:`pcm_rate` -> one payload."""
        ...


class G711:
    """PCMU or PCMA at 8 kHz: one byte a sample, no state."""

    clock_rate = pcm_rate = 8000

    def __init__(self, encoding: Encoding) -> None:
        self.format = AudioFormat(encoding, self.pcm_rate)

    def max_payload(self, ms: int) -> int:
        return self.format.bytes_for(ms)

    def decode(self, payload: bytes) -> bytes:
        return self.format.decode(payload)

    def encode(self, pcm16: bytes) -> bytes:
        return self.format.encode(pcm16)


class Opus:
    """Opus, mono at 48 kHz, 20 ms frames (RFC 7587), through PyAV's libopus."""

    clock_rate = pcm_rate = OPUS_RATE

    def __init__(self, bitrate: int = OPUS_BITRATE) -> None:
        import av  # only a call that speaks Opus loads it

        self._av: Any = av
        self._encoder: Any = av.CodecContext.create("libopus", "w")
        self._encoder.sample_rate = OPUS_RATE
        self._encoder.layout = "mono"
        self._encoder.format = "s16"
        self._encoder.bit_rate = bitrate
        self._encoder.options = {"application": "voip", "frame_duration": str(FRAME_MS)}
        self._encoder.open()
        self._decoder: Any = av.CodecContext.create("libopus", "r")
        self._decoder.sample_rate = OPUS_RATE
        self._decoder.layout = "mono"
        self._decoder.format = "s16"
        self._pts = 0

    def max_payload(self, ms: int) -> int:
        return OPUS_MAX_PACKET * max(1, ms // FRAME_MS)

    def decode(self, payload: bytes) -> bytes:
        try:
            frames = self._decoder.decode(self._av.Packet(payload))
        except self._av.FFmpegError as exc:
            raise BadPayload("opus") from exc
        return b"".join(_mono_s16(frame.to_ndarray()) for frame in frames)

    def encode(self, pcm16: bytes) -> bytes:
        samples = np.frombuffer(pcm16, "<i2").reshape(1, -1)
        frame = self._av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = OPUS_RATE
        frame.pts = self._pts
        self._pts += samples.shape[1]
        return b"".join(bytes(packet) for packet in self._encoder.encode(frame))


def _mono_s16(samples: np.ndarray) -> bytes:
    """A decoded frame (planar or packed, one channel or two, int16 or float) as PCM16 mono."""
    if samples.dtype != np.int16:
        samples = (np.clip(samples, -1.0, 1.0) * 32767).astype(np.int16)
    if samples.ndim == 2 and samples.shape[0] > 1:  # planar stereo: the first channel
        samples = samples[0]
    return samples.reshape(-1).astype("<i2").tobytes()


def codec_for(name: str) -> RtpCodec:
    """A fresh codec for one call's audio (``name`` as ``sip.codecs`` writes it)."""
    if name == "PCMU":
        return G711(Encoding.MULAW)
    if name == "PCMA":
        return G711(Encoding.ALAW)
    if name == "opus":
        return Opus()
    raise ValueError(f"no codec {name!r}")
