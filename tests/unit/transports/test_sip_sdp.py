"""SDP offer and answer (voxpipe/transports/sip/sdp.py)."""

from __future__ import annotations

import pytest

from voxpipe.transports.sip.message import SipError
from voxpipe.transports.sip.sdp import answer, negotiate, parse_offer


def sdp(*lines: str) -> bytes:
    return ("\r\n".join(["v=0", "o=- 1 1 IN IP4 10.0.0.2", "s=-", *lines]) + "\r\n").encode()


OFFER = sdp(
    "c=IN IP4 10.0.0.2",
    "t=0 0",
    "m=video 5000 RTP/AVP 96",
    "m=audio 4000 RTP/AVP 9 8 0 101",
    "c=IN IP4 10.0.0.3",
    "a=rtpmap:101 telephone-event/8000",
    "a=sendrecv",
)


def test_the_first_of_our_codecs_in_the_offer_is_chosen_with_its_keypad() -> None:
    offer = parse_offer(OFFER)
    assert (offer.address, offer.port) == ("10.0.0.3", 4000)  # the media's c= wins
    chosen = negotiate(offer, ["PCMU", "PCMA"])
    assert (chosen.codec, chosen.payload_type, chosen.dtmf_payload_type) == ("PCMU", 0, 101)
    assert chosen.info.clock_rate == 8000 and chosen.dtmf_rate == 8000
    assert negotiate(offer, ["PCMA"]).payload_type == 8


def test_the_answer_keeps_the_offer_order_and_declines_video() -> None:
    offer = parse_offer(OFFER)
    text = answer(offer, negotiate(offer, ["PCMU"]), "192.0.2.1", 12000).decode()
    lines = text.splitlines()
    assert "c=IN IP4 192.0.2.1" in lines
    video, audio = lines.index("m=video 0 RTP/AVP 96"), lines.index("m=audio 12000 RTP/AVP 0 101")
    assert video < audio
    assert "a=rtpmap:0 PCMU/8000" in lines and "a=rtpmap:101 telephone-event/8000" in lines
    assert "a=ptime:20" in lines and "a=sendrecv" in lines


def test_a_dynamic_payload_type_is_read_from_its_rtpmap() -> None:
    offer = parse_offer(
        sdp("c=IN IP4 10.0.0.2", "m=audio 4000 RTP/AVP 96", "a=rtpmap:96 PCMA/8000")
    )
    assert negotiate(offer, ["PCMU", "PCMA"]).payload_type == 96


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"", 400, "v=0"),
        (b"v=0\r\ngarbage\r\n", 400, "not an SDP line"),
        (sdp("c=IN IP4 nowhere", "m=audio 4000 RTP/AVP 0"), 400, "not an IP"),
        (sdp("m=audio 4000 RTP/AVP 0"), 400, "connection address"),
        (sdp("c=IN IP4 10.0.0.2", "m=video 4000 RTP/AVP 96"), 488, "no audio"),
        (sdp("c=IN IP4 10.0.0.2", "m=audio 4000 RTP/SAVP 0"), 488, "RTP/AVP"),
        (sdp("c=IN IP4 10.0.0.2", "m=audio 4000 RTP/AVP x"), 400, "payload types"),
        (sdp("c=IN IP4 10.0.0.2", "m=audio 0 RTP/AVP 0"), 488, "port is 0"),
    ],
)
def test_bad_sdp_is_400_and_sdp_we_cannot_use_488(body: bytes, status: int, words: str) -> None:
    with pytest.raises(SipError) as caught:
        parse_offer(body)
    assert caught.value.status == status and words in caught.value.detail


def test_no_common_codec_is_488_naming_what_was_offered() -> None:
    offer = parse_offer(
        sdp("c=IN IP4 10.0.0.2", "m=audio 4000 RTP/AVP 9 96", "a=rtpmap:96 opus/48000/2")
    )
    with pytest.raises(SipError) as caught:
        negotiate(offer, ["PCMU", "PCMA"])
    assert caught.value.status == 488
    assert "payload type 9" in caught.value.detail and "OPUS/48000/2" in caught.value.detail
