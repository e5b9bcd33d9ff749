"""SIP message parsing and the answers we write (voxpipe/transports/sip/message.py)."""

from __future__ import annotations

import pytest

from voxpipe.transports.sip.message import (
    Headers,
    SipError,
    SipRequest,
    SipResponse,
    host_port,
    parse,
    response,
    uri_of,
)

INVITE = (
    b"INVITE sip:agent@10.0.0.1 SIP/2.0\r\n"
    b"Via: SIP/2.0/UDP 10.0.0.2:5060;branch=z9hG4bKabc;rport\r\n"
    b"v: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bKfirst\r\n"
    b'f: "Ann, B" <sip:ann@10.0.0.2>;tag=t1\r\n'
    b"t: <sip:agent@10.0.0.1>\r\n"
    b"i: abc@10.0.0.2\r\n"
    b"CSeq: 7 INVITE\r\n"
    b"Subject: a long\r\n  folded line\r\n"
    b"l: 4\r\n\r\nbodyEXTRA"
)


def test_a_request_is_read_with_compact_names_folding_and_its_body() -> None:
    message = parse(INVITE)
    assert isinstance(message, SipRequest)
    message.check()
    assert (message.method, message.uri) == ("INVITE", "sip:agent@10.0.0.1")
    assert message.call_id == "abc@10.0.0.2"
    assert message.cseq is not None and (message.cseq.number, message.cseq.method) == (7, "INVITE")
    assert message.from_tag == "t1" and message.to_tag is None
    assert message.branch == "z9hG4bKabc"  # the top Via names the transaction
    assert len(message.headers.all("via")) == 2
    assert message.headers.get("subject") == "a long folded line"
    assert message.body == b"body"  # Content-Length bytes, not what follows


def test_a_response_is_read() -> None:
    message = parse(b"SIP/2.0 200 OK\r\nCall-ID: x\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n")
    assert isinstance(message, SipResponse) and message.status == 200
    assert message.cseq is not None and message.cseq.method == "BYE"


@pytest.mark.parametrize(
    ("data", "status", "words"),
    [
        (b"HELLO\r\n\r\n", 400, "request line"),
        (b"INVITE sip:a SIP/3.0\r\nVia: x\r\n\r\n", 505, "SIP/2.0"),
        (b"INVITE sip:a SIP/2.0\r\nno colon here\r\n\r\n", 400, "header line"),
        (b"INVITE sip:a SIP/2.0\r\nContent-Length: 99\r\n\r\nshort", 400, "Content-Length"),
        (b"INVITE sip:a SIP/2.0\r\nContent-Length: x\r\n\r\n", 400, "Content-Length"),
        (b"INVITE sip:a SIP/2.0\r\nVia: \xff\xfe\r\n\r\n", 400, "UTF-8"),
    ],
)
def test_bytes_that_are_no_sip_message_are_a_sip_error(
    data: bytes, status: int, words: str
) -> None:
    with pytest.raises(SipError) as caught:
        parse(data)
    assert caught.value.status == status and words in caught.value.detail


@pytest.mark.parametrize(
    ("drop", "words"),
    [("Via", "via"), ("Call-ID", "call-id"), ("CSeq", "cseq"), ("From", "from"), ("To", "to")],
)
def test_a_request_without_a_required_header_is_400(drop: str, words: str) -> None:
    lines = [
        "OPTIONS sip:a SIP/2.0",
        "Via: SIP/2.0/UDP h;branch=z9hG4bK1",
        "From: <sip:b@h>;tag=1",
        "To: <sip:a@h>",
        "Call-ID: c",
        "CSeq: 1 OPTIONS",
    ]
    data = "\r\n".join(line for line in lines if not line.startswith(drop + ":")) + "\r\n\r\n"
    message = parse(data.encode())
    assert isinstance(message, SipRequest)
    with pytest.raises(SipError) as caught:
        message.check()
    assert caught.value.status == 400 and words in caught.value.detail


def test_a_cseq_naming_another_method_or_no_from_tag_is_400() -> None:
    base = "BYE sip:a SIP/2.0\r\nVia: v\r\nFrom: {f}\r\nTo: t\r\nCall-ID: c\r\nCSeq: {c}\r\n\r\n"
    for f, c, words in [("<sip:b>;tag=1", "1 INVITE", "CSeq method"), ("<sip:b>", "1 BYE", "tag")]:
        message = parse(base.format(f=f, c=c).encode())
        assert isinstance(message, SipRequest)
        with pytest.raises(SipError, match=words):
            message.check()


def test_a_response_echoes_the_request_and_tags_its_to() -> None:
    request = parse(INVITE)
    out = response(request.headers, 180, to_tag="ours").encode().decode()
    assert out.startswith("SIP/2.0 180 Ringing\r\n")
    assert out.count("Via: ") == 2 and "z9hG4bKabc" in out.split("Via: ")[1]
    assert "To: <sip:agent@10.0.0.1>;tag=ours\r\n" in out
    assert "Call-ID: abc@10.0.0.2\r\n" in out and "CSeq: 7 INVITE\r\n" in out
    assert out.endswith("Content-Length: 0\r\n\r\n")
    routed = parse(INVITE.replace(b"CSeq:", b"Record-Route: <sip:p1;lr>, <sip:p2;lr>\r\nCSeq:"))
    assert response(routed.headers, 200).encode().count(b"Record-Route: <sip:p1;lr>") == 1
    assert b"Record-Route" not in response(routed.headers, 100).encode()
    assert b"Record-Route" not in response(routed.headers, 486).encode()
    # Without headers (a message we could not read), still a response with a status line.
    assert response(Headers(), 400).encode().startswith(b"SIP/2.0 400 Bad Request\r\n")


def test_uris_and_addresses() -> None:
    assert uri_of('"Ann" <sip:ann@h:5070;transport=tcp>;tag=1') == "sip:ann@h:5070;transport=tcp"
    assert uri_of("sip:ann@h;tag=1") == "sip:ann@h"
    assert host_port("sip:ann@10.0.0.2:5070;transport=tcp") == ("10.0.0.2", 5070)
    assert host_port("sip:[::1]") == ("::1", 5060)
