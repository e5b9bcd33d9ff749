"""RTP packets (RFC 3550, section 5.1): the 12-byte header, CSRCs, an extension, padding.

Only what a phone call's audio needs: :func:`parse` reads a packet or says why it is not
one (:class:`BadPacket`; the caller counts and drops it), :func:`build` writes ours (no
CSRC, no extension, no padding). RTCP, which shares nothing but the version with RTP, is
told apart by its payload type range (RFC 5761, 4) and dropped as not audio.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

VERSION = 2
HEADER = struct.Struct("!BBHII")  # V/P/X/CC, M/PT, sequence, timestamp, SSRC
MAX_PACKET = 1500
RTCP_TYPES = range(72, 96)  # 200-223 with the marker bit read as part of the type


class BadPacket(ValueError):
    """Not an RTP packet we can use; ``reason`` is the metric's label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class RtpPacket:
    """The fixed header's fields that a call uses (RFC 3550, 5.1), and the payload without
    the CSRCs, the extension or the padding."""

    payload_type: int
    sequence: int
    timestamp: int
    ssrc: int
    payload: bytes
    marker: bool = False


def parse(data: bytes) -> RtpPacket:
    if len(data) < HEADER.size:
        raise BadPacket("short")
    if len(data) > MAX_PACKET:
        raise BadPacket("too_big")
    first, second, sequence, timestamp, ssrc = HEADER.unpack_from(data)
    if first >> 6 != VERSION:
        raise BadPacket("version")
    payload_type = second & 0x7F
    if payload_type in RTCP_TYPES:
        raise BadPacket("rtcp")
    start = HEADER.size + 4 * (first & 0x0F)
    if first & 0x10:  # an extension: 16-bit profile, 16-bit length in words
        if len(data) < start + 4:
            raise BadPacket("short")
        (words,) = struct.unpack_from("!H", data, start + 2)
        start += 4 + 4 * words
    end = len(data)
    if first & 0x20:  # padding: its last byte counts the padding bytes
        end -= data[-1]
    if not start < end <= len(data):
        raise BadPacket("no_payload")
    return RtpPacket(payload_type, sequence, timestamp, ssrc, data[start:end], bool(second & 0x80))


def build(packet: RtpPacket) -> bytes:
    second = (0x80 if packet.marker else 0) | packet.payload_type
    header = HEADER.pack(VERSION << 6, second, packet.sequence, packet.timestamp, packet.ssrc)
    return header + packet.payload
