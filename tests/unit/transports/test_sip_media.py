"""RTP packets, RFC 4733 keypad events, the jitter buffer and the reply's playout
(voxpipe/transports/sip/: rtp.py, dtmf.py, jitter.py, media.py)."""

from __future__ import annotations

import struct

import pytest

from voxpipe.transports.sip import rtp
from voxpipe.transports.sip.dtmf import DtmfReceiver, event_payload
from voxpipe.transports.sip.jitter import RtpReorderBuffer, seq_delta


def packet(seq: int, payload: bytes = b"\xff" * 160, pt: int = 0, ts: int = 0) -> rtp.RtpPacket:
    return rtp.RtpPacket(pt, seq, ts, 0x1234, payload)


def test_a_packet_is_written_and_read_back() -> None:
    sent = rtp.RtpPacket(8, 65535, 4_000_000_000, 0xDEADBEEF, b"abc", marker=True)
    data = rtp.build(sent)
    assert data[:2] == b"\x80\x88" and len(data) == 15
    assert rtp.parse(data) == sent


def test_csrcs_an_extension_and_padding_are_skipped() -> None:
    header = struct.pack("!BBHII", 0x80 | 0x20 | 0x10 | 1, 0, 1, 2, 3)
    csrc, extension = b"\0\0\0\1", struct.pack("!HH", 0xBEDE, 1) + b"\0\0\0\0"
    data = header + csrc + extension + b"audio" + b"\0\0\3"
    assert rtp.parse(data).payload == b"audio"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x80\x00", "short"),
        (b"\x40" + b"\0" * 20, "version"),
        (struct.pack("!BBHII", 0x80, 200, 1, 2, 3) + b"x", "rtcp"),
        (struct.pack("!BBHII", 0x80, 0, 1, 2, 3), "no_payload"),
        (struct.pack("!BBHII", 0x8F, 0, 1, 2, 3) + b"x", "no_payload"),  # 15 CSRCs promised
        (b"\x80" + b"\0" * 1600, "too_big"),
    ],
)
def test_what_is_not_rtp_says_why(data: bytes, reason: str) -> None:
    with pytest.raises(rtp.BadPacket) as caught:
        rtp.parse(data)
    assert caught.value.reason == reason


def test_a_key_press_is_one_digit_however_many_packets_carry_it() -> None:
    dtmf = DtmfReceiver()
    got = [
        dtmf.receive(8000, event_payload("5", 160, False)),
        dtmf.receive(8000, event_payload("5", 320, False)),
        *(dtmf.receive(8000, event_payload("5", 480, True)) for _ in range(3)),  # end x3
        dtmf.receive(9600, event_payload("#", 160, True)),  # its first packet lost: still heard
        dtmf.receive(11200, bytes([16, 0x80, 0, 160])),  # flash: not a key
    ]
    assert got == ["5", None, None, None, None, "#", None]
    with pytest.raises(rtp.BadPacket):
        dtmf.receive(1, b"\1")


def test_in_order_packets_leave_at_once() -> None:
    jitter = RtpReorderBuffer(3)
    assert [p.sequence for s in (10, 11, 12) for p in jitter.push(packet(s))] == [10, 11, 12]


def test_a_reordered_packet_is_put_back_in_its_place() -> None:
    jitter = RtpReorderBuffer(3)
    out = [p.sequence for s in (1, 3, 2, 4) for p in jitter.push(packet(s))]
    assert out == [1, 2, 3, 4] and jitter.stats.lost == 0


def test_a_lost_packet_is_skipped_once_depth_packets_wait_and_a_late_one_dropped() -> None:
    jitter = RtpReorderBuffer(3)
    out = [p.sequence for s in (1, 3, 4, 5) for p in jitter.push(packet(s))]
    assert out == [1, 3, 4, 5] and jitter.stats.lost == 1
    assert jitter.push(packet(2)) == [] and jitter.stats.late == 1  # too late now
    assert jitter.push(packet(6)) != [] and jitter.push(packet(6)) == []
    assert jitter.stats.late == 2  # 6 again, once 6 has left: late (a duplicate)


def test_a_duplicate_held_behind_a_gap_is_dropped() -> None:
    jitter = RtpReorderBuffer(5)
    jitter.push(packet(1))
    assert jitter.push(packet(3)) == [] and jitter.push(packet(3)) == []
    assert jitter.stats.duplicate == 1


def test_the_sequence_wraps_and_a_big_jump_starts_over() -> None:
    assert seq_delta(0, 65535) == 1 and seq_delta(65535, 0) == -1
    jitter = RtpReorderBuffer(3)
    out = [p.sequence for s in (65534, 65535, 0, 1) for p in jitter.push(packet(s))]
    assert out == [65534, 65535, 0, 1]
    assert [p.sequence for p in jitter.push(packet(30000))] == [30000]  # a new sequence


def test_the_buffer_never_holds_more_than_its_depth() -> None:
    jitter = RtpReorderBuffer(4)
    jitter.push(packet(0))
    for seq in range(2, 200, 2):  # every other packet lost
        jitter.push(packet(seq))
        assert len(jitter._held) < 4
