"""``python -m bench sip-vs-twilio``'s pure parts: the server's line silence told from reply
audio, the SIP call's session found in the store, the call order, the comparison and its
table; and the SIP caller against a fake server on loopback (INVITE, ACK, RTP at 20 ms, BYE)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.caller_turns import ReplyFrame
from bench.cli import build_parser
from bench.sip_vs_twilio import (
    FRAME,
    SILENCE,
    RtpPhone,
    compare,
    line_silence,
    newest_session,
    paired_ms,
    played,
    render_table,
    round_order,
)
from voxpipe.audio.pcm import ulaw_encode
from voxpipe.transports.sip import rtp, sdp
from voxpipe.transports.sip.message import SipRequest, parse, response


def test_line_silence_is_all_zero_samples_and_a_padded_reply_frame_is_not() -> None:
    assert line_silence(SILENCE) and line_silence(bytes([0x7F, 0xFF] * 80))
    quiet = ulaw_encode(np.full(FRAME, 20, np.int16).tobytes())  # faint, but not zero
    assert not line_silence(quiet)
    end = ulaw_encode(np.concatenate([np.full(40, 900, np.int16), np.zeros(120, np.int16)]))
    assert not line_silence(end)
    assert not line_silence(b"")


def test_the_sip_session_is_the_newest_one_begun_since_the_invite() -> None:
    rows = [("old", 90.0), ("twilio-1", 101.0), ("sip-1", 102.5), ("sip-0", 100.5)]
    assert newest_session(rows, 100.0, {"twilio-1"}) == "sip-1"
    assert newest_session(rows, 100.0, {"twilio-1", "sip-1"}) == "sip-0"
    assert newest_session(rows, 103.0, set()) is None


def test_the_order_alternates_per_round() -> None:
    assert round_order(0) == ("twilio", "sip")
    assert round_order(1) == ("sip", "twilio")
    assert round_order(2) == round_order(0)


def _row(transport: str, answer: float | None, server: float | None, outcome: str) -> Any:
    return {
        "transport": transport,
        "answer_ms": answer,
        "server_first_audio_ms": server,
        "outcome": outcome,
        "conversation": 0,
        "sentence": 0,
        "filler": False,
    }


def test_compare_gives_percentiles_per_transport_and_their_ratio() -> None:
    rows = [_row("twilio", 800.0 + i, 700.0, "answered") for i in range(5)]
    rows += [_row("sip", 840.0 + i, 710.0, "answered") for i in range(4)]
    rows.append(_row("sip", None, None, "failed"))
    heard = [_row("twilio", 900.0, 0, "answered"), _row("sip", 850.0, 0, "answered")]
    summary = compare(rows, heard)
    assert summary["twilio"]["answer_ms"]["p50"] == 802.0
    assert summary["sip"]["answer_ms"]["n"] == 4 and summary["sip"]["turns"] == 5
    assert summary["sip"]["outcomes"] == {"answered": 4, "failed": 1}
    assert summary["sip"]["caller_less_server_ms"]["p50"] == 131.5  # 840..843 less 710
    assert summary["sip_over_twilio"]["p50"] == round(841.5 / 802.0, 3)
    assert summary["sip_over_twilio_heard"]["p99"] == round(850 / 900, 3)
    table = render_table(summary)
    assert "| sip | 4 of 5 | 842 ms" in table  # p50 841.5 rounds to even
    assert "| 850 ms | 850 ms | 850 ms | 710 ms | 132 ms |" in table
    assert "| SIP / Twilio | | 1.05 |" in table and "| 0.94 | 0.94 | 0.94 | | |" in table


def test_compare_with_no_answers_on_one_side_has_no_ratio() -> None:
    summary = compare([_row("twilio", 800.0, 700.0, "answered")])
    assert summary["sip_over_twilio"] == {"p50": None, "p95": None, "p99": None}
    assert summary["sip_over_twilio_heard"]["p50"] is None
    assert "| sip | 0 of 0 | - ms" in render_table(summary)


MS = 1_000_000


def _said(transport: str, sentence: int, answer: float | None, filler: bool = False) -> Any:
    row = _row(transport, answer, 500.0, "answered")
    return {**row, "sentence": sentence, "filler": filler}


def test_paired_is_sip_less_twilio_on_sentences_both_answered_without_filler() -> None:
    rows = [
        _said("twilio", 0, 600.0), _said("sip", 0, 650.0),  # SIP's line: 50 ms more
        _said("twilio", 1, 900.0), _said("sip", 1, 880.0),  # 20 ms less
        _said("twilio", 2, 700.0), _said("sip", 2, None),  # not answered over SIP
        _said("twilio", 3, 700.0, filler=True), _said("sip", 3, 720.0),  # a filler first
    ]  # fmt: skip
    assert sorted(paired_ms(rows)) == [-20.0, 50.0]
    summary = compare(rows, rows)
    assert summary["sip_less_twilio_paired_ms"]["arrived"]["p50"] == 15.0
    assert "p50 15 ms (max 50) as the reply arrived" in render_table(summary)


def test_played_frames_wait_for_the_ones_before_and_a_clear_drops_the_rest() -> None:
    burst = [ReplyFrame(i * MS, 20 * MS, i >= 3) for i in range(6)]  # sent ahead, at once
    assert [f.at_ns // MS for f in played(burst)] == [0, 20, 40, 60, 80, 100]
    # The first voiced frame arrives at 3 ms but is heard at 60 ms: the silence plays first.
    assert next(f for f in played(burst) if f.voiced).at_ns == 60 * MS
    # A clear at 50 ms: the frames not yet begun are never heard; the next reply plays at once.
    later = [*burst, ReplyFrame(500 * MS, 20 * MS, True)]
    assert [f.at_ns // MS for f in played(later, [50 * MS])] == [0, 20, 40, 500]
    paced = [ReplyFrame(i * 20 * MS + 1, 20 * MS, True) for i in range(3)]  # as SIP sends
    assert played(paced) == paced


def test_the_command_is_registered() -> None:
    args = build_parser().parse_args(["sip-vs-twilio", "--calls", "3"])
    assert args.func.__name__ == "cmd_sip_vs_twilio" and args.calls == 3
    assert str(args.out) == "bench-results/sip-vs-twilio.json"


class _FakeServer(asyncio.DatagramProtocol):
    """Answers the INVITE 200 with an answer, the BYE 200; keeps the RTP it gets."""

    def __init__(self, rtp_port: int) -> None:
        self.rtp_port = rtp_port
        self.requests: list[SipRequest] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        request = parse(data)
        assert isinstance(request, SipRequest)
        self.requests.append(request)
        if request.method == "ACK":
            return
        out = response(request.headers, 200, "srv", None, "fake")
        if request.method == "INVITE":
            offer = sdp.parse_offer(request.body)
            chosen = sdp.negotiate(offer, ["PCMU"])
            out.body = sdp.answer(offer, chosen, "127.0.0.1", self.rtp_port)
            out.content_type = "application/sdp"
        self.transport.sendto(out.encode(), addr)


class _RtpSink(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.packets: list[tuple[float, rtp.RtpPacket, tuple[str, int]]] = []

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.packets.append((time.monotonic(), rtp.parse(data), addr))


async def _until(probe: Callable[[], bool]) -> None:
    while not probe():  # noqa: ASYNC110 (bounded by the test's timeout)
        await asyncio.sleep(0.01)


async def test_the_sip_phone_calls_speaks_at_real_time_hears_and_hangs_up() -> None:
    loop = asyncio.get_running_loop()
    media, sink = await loop.create_datagram_endpoint(_RtpSink, local_addr=("127.0.0.1", 0))
    rtp_port = media.get_extra_info("sockname")[1]
    signalling, server = await loop.create_datagram_endpoint(
        lambda: _FakeServer(rtp_port), local_addr=("127.0.0.1", 0)
    )
    phone = RtpPhone(signalling.get_extra_info("sockname"))
    try:
        async with asyncio.timeout(10):
            await phone.open()
            await _until(lambda: len(server.requests) == 2)
            assert [r.method for r in server.requests] == ["INVITE", "ACK"]
            tone = 0.3 * np.sin(np.arange(8000) * 2 * np.pi * 300 / 8000)  # 1 s
            start, end = await phone.say(tone.astype(np.float32), 8000, [0.1, 0.5])
            assert 0.35 <= (end - start) / 1e9 <= 0.5  # the marks left in real time
            # The server's silence is not reply audio; its speech is, with its arrival.
            _, first, phone_at = sink.packets[0]
            for seq, payload in enumerate([SILENCE, ulaw_encode(bytes([0, 40]) * FRAME)]):
                media.sendto(rtp.build(rtp.RtpPacket(0, seq, 0, 1, payload)), phone_at)
            await _until(lambda: bool(phone.chunks))
            assert len(phone.chunks) == 1 and phone.playback.received_s == 0.02
            await phone.close()
        assert server.requests[-1].method == "BYE"
        sent = [p for _, p, _ in sink.packets]
        assert first.marker and all(p.payload_type == 0 and len(p.payload) == FRAME for p in sent)
        assert [p.sequence for p in sent] == [
            (first.sequence + i) % 65536 for i in range(len(sent))
        ]
        span = sink.packets[-1][0] - sink.packets[0][0]
        assert abs(span - 0.02 * (len(sent) - 1)) < 0.1  # one packet every 20 ms
    finally:
        signalling.close()
        media.close()
