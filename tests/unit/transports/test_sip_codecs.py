"""The SIP call's codecs (voxpipe/transports/sip/codecs.py) and Opus in SDP (RFC 7587): a
tone through each codec and back, a bad Opus packet refused, opus offered and answered at
its 48 kHz clock with the keypad's telephone-event, G.711 still preferred by default, and an
Opus-only call through the app on fake engines."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from tests.unit.transports.sip_phone import SipPhone
from tests.unit.transports.test_sip_user_agent import calls, sip_server
from voxpipe.config import Config
from voxpipe.transports.sip import rtp
from voxpipe.transports.sip.codecs import OPUS_RATE, BadPayload, codec_for
from voxpipe.transports.sip.sdp import (
    OFFERED_OPUS,
    accept_answer,
    answer,
    negotiate,
    offer,
    parse_offer,
)


def tone(rate: int, seconds: float = 1.0, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (8000 * np.sin(2 * np.pi * hz * t)).astype("<i2")


def through(name: str, audio: np.ndarray, frame: int) -> tuple[np.ndarray, list[int]]:
    """``audio`` encoded 20 ms at a time by one call's codec and decoded by another's."""
    sender, receiver = codec_for(name), codec_for(name)
    out, sizes = [], []
    for i in range(0, audio.shape[0], frame):
        payload = sender.encode(audio[i : i + frame].tobytes())
        sizes.append(len(payload))
        out.append(receiver.decode(payload))
    return np.frombuffer(b"".join(out), "<i2"), sizes


def snr_db(sent: np.ndarray, heard: np.ndarray, rate: int) -> float:
    """The signal over the error in a quarter second from 0.2 s in, once ``heard`` is lined
    up with ``sent`` (the codec's delay: up to 50 ms)."""
    skip, size = rate // 5, rate // 4
    window = sent[skip : skip + size].astype(np.float64)

    def lined_up(delay: int) -> np.ndarray:
        return heard[skip + delay : skip + delay + size].astype(np.float64)

    delay = max(range(rate // 20), key=lambda d: float(np.dot(window, lined_up(d))))
    error = lined_up(delay) - window
    return float(10 * np.log10(np.mean(window**2) / np.mean(error**2)))


@pytest.mark.parametrize("name", ["PCMU", "PCMA"])
def test_g711_round_trip(name: str) -> None:
    codec = codec_for(name)
    assert (codec.clock_rate, codec.pcm_rate) == (8000, 8000)
    sent = tone(8000)
    heard, sizes = through(name, sent, 160)
    assert set(sizes) == {160} and heard.shape == sent.shape
    assert snr_db(sent, heard, 8000) > 30


def test_opus_round_trip_is_one_packet_a_frame_at_48_khz() -> None:
    codec = codec_for("opus")
    assert (codec.clock_rate, codec.pcm_rate) == (OPUS_RATE, OPUS_RATE)
    sent = tone(OPUS_RATE)
    heard, sizes = through("opus", sent, 960)
    assert len(sizes) == 50 and all(0 < size <= 200 for size in sizes)  # about 32 kbit/s
    assert heard.shape == sent.shape  # 20 ms out for each 20 ms in
    assert snr_db(sent, heard, OPUS_RATE) > 12  # lossy, but the tone it was


def test_a_packet_opus_cannot_read_is_a_bad_payload() -> None:
    with pytest.raises(BadPayload) as caught:
        codec_for("opus").decode(b"\xff\xff\xff")
    assert caught.value.reason == "opus"


def sdp(*media: str) -> bytes:
    lines = ["v=0", "o=- 1 1 IN IP4 10.0.0.2", "s=-", "c=IN IP4 10.0.0.2", "t=0 0", *media]
    return ("\r\n".join(lines) + "\r\n").encode()


OPUS_OFFER = sdp(
    "m=audio 4000 RTP/AVP 96 0 101 102",
    "a=rtpmap:96 opus/48000/2",
    "a=fmtp:96 stereo=1;sprop-stereo=1",
    "a=rtpmap:101 telephone-event/48000",
    "a=rtpmap:102 telephone-event/8000",
)


def test_g711_is_preferred_by_default_and_opus_taken_when_first_or_alone() -> None:
    default = Config().sip.codecs
    assert default == ["PCMU", "PCMA", "opus"]
    offered = parse_offer(OPUS_OFFER)
    assert negotiate(offered, default).codec == "PCMU"
    chosen = negotiate(offered, ["opus", "PCMU"])
    assert (chosen.codec, chosen.payload_type) == ("opus", 96)
    assert (chosen.dtmf_payload_type, chosen.dtmf_rate) == (101, 48000)  # at opus's clock
    alone = parse_offer(sdp("m=audio 4000 RTP/AVP 97 101", "a=rtpmap:97 OPUS/48000/2",
                            "a=rtpmap:101 telephone-event/8000"))  # fmt: skip
    chosen = negotiate(alone, default)
    assert (chosen.codec, chosen.dtmf_payload_type, chosen.dtmf_rate) == ("opus", 101, 8000)


def test_the_answer_names_opus_at_48_khz_in_mono() -> None:
    offered = parse_offer(OPUS_OFFER)
    text = answer(offered, negotiate(offered, ["opus"]), "192.0.2.1", 12000).decode()
    lines = text.splitlines()
    assert "m=audio 12000 RTP/AVP 96 101" in lines
    assert "a=rtpmap:96 opus/48000/2" in lines
    assert "a=fmtp:96 stereo=0;sprop-stereo=0;useinbandfec=0" in lines
    assert "a=rtpmap:101 telephone-event/48000" in lines


def test_our_offer_lists_opus_after_g711_and_takes_the_answer_s_choice() -> None:
    ours = parse_offer(offer(["PCMU", "PCMA", "opus"], "192.0.2.1", 12000))
    assert ours.payload_types == (0, 8, OFFERED_OPUS, 101)
    assert ours.names[OFFERED_OPUS] == "OPUS/48000/2"
    callee = parse_offer(
        sdp("m=audio 5000 RTP/AVP 111 101", "a=rtpmap:111 opus/48000/2",
            "a=rtpmap:101 telephone-event/8000")
    )  # fmt: skip
    chosen = accept_answer(callee, ["PCMU", "PCMA", "opus"])
    assert (chosen.codec, chosen.payload_type, chosen.remote) == ("opus", 111, ("10.0.0.2", 5000))
    assert chosen.new_codec().clock_rate == OPUS_RATE


OPUS_ONLY = (
    "v=0\r\no=phone 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    "m=audio {port} RTP/AVP 96 101\r\na=rtpmap:96 opus/48000/2\r\n"
    "a=rtpmap:101 telephone-event/48000\r\na=sendrecv\r\n"
)


def loudness(pcm: bytes) -> float:
    return float(np.mean(np.abs(np.frombuffer(pcm, "<i2").astype(np.float64)))) / 32768


async def test_a_call_in_opus_is_heard_and_answered_in_opus() -> None:
    """An Opus-only phone through the app on fake engines: its speech is a turn, and the
    reply comes back in Opus, one packet per 20 ms of the 48 kHz clock."""
    async with sip_server() as (where, http):
        phone = await SipPhone(where).open()
        try:
            phone.send("INVITE", OPUS_ONLY.format(port=phone.rtp_port).encode())
            ok = await phone.response(200)
            media = parse_offer(ok.body)
            assert media.payload_types == (96, 101) and media.names[96] == "OPUS/48000/2"
            phone.send("ACK", cseq=phone.cseq)
            encoder, decoder = codec_for("opus"), codec_for("opus")
            speech = (
                (tone(OPUS_RATE, 0.5) * 2).astype("<i2").tobytes()
            )  # loud enough for the fake VAD
            for seq in range(60):  # half a second of speech, then silence: a turn
                pcm = speech[seq * 1920 : (seq + 1) * 1920] if seq < 25 else bytes(1920)
                payload = encoder.encode(pcm)
                packet = rtp.RtpPacket(96, seq, seq * 960, 7, payload)
                phone.send_rtp((media.address, media.port), packet)
            heard: list[rtp.RtpPacket] = []
            async with asyncio.timeout(10):
                while True:
                    packet = await phone.rtp_packet()
                    heard.append(packet)
                    if loudness(decoder.decode(packet.payload)) > 0.01:
                        break  # the reply
            assert {p.payload_type for p in heard} == {96}
            steps = {(b.timestamp - a.timestamp) % (1 << 32) for a, b in itertools.pairwise(heard)}
            assert steps <= {960}
            phone.send("BYE")
            await phone.response(200)
            async with asyncio.timeout(10):
                while await calls(http):  # noqa: ASYNC110 (the server's count has no push)
                    await asyncio.sleep(0.02)
        finally:
            phone.close()
