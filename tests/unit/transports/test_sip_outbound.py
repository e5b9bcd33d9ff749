"""Calls the server places to a SIP URI (``POST /v1/calls`` with ``provider: sip``), in the
real app on fake engines, answered by a callee written here over loopback UDP: the INVITE
and its offer, 100/180/200 and our ACK, the agent's greeting on RTP, the callee's BYE; a
busy callee (486, ACKed, the API's error says 486), ringing too long (CANCEL, 487, ACK),
nobody there (the INVITE sent again, then 408); a retried request (Idempotency-Key) placing
no second call; and what cannot be dialled refused before anything is sent."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support import free_sip_port
from tests.unit.transports.in_process import quiet_config, serving
from tests.unit.transports.sip_phone import SipPhone, offer
from tests.unit.transports.test_sip_user_agent import QUIET, calls, engines, until
from voxpipe.agent import Agent
from voxpipe.transports.sip import digest
from voxpipe.transports.sip.message import SipRequest, tag_of
from voxpipe.transports.sip.sdp import parse_offer

KEY = "outbound-sip-test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
GREETER = Agent(instructions="Be brief.", greeting="Hello, this is the agent calling.")


@contextlib.asynccontextmanager
async def dialing(
    agent: Agent | None = GREETER, enabled: bool = True, trunk: bool = False, **sip: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, SipPhone]]:
    """The server, and a callee (whose messages go to the server's SIP port); ``trunk``:
    the callee is also the trunk the server registers with (as ``agent``, password ``pw``)."""
    port = free_sip_port()
    phone = await SipPhone(("127.0.0.1", port)).open()
    if trunk:
        sip |= {"registrar": f"sip:127.0.0.1:{phone.port}", "username": "agent", "password": "pw"}
    config = quiet_config(
        sip={
            "enabled": enabled,
            "host": "127.0.0.1",
            "port": port,
            "rtp_port_range": (0, 0),
            **sip,
        },
        auth={"api_keys": [KEY]},
    )
    try:
        async with serving(config, engines(None, "hello"), 30, agent=agent) as (_, http):
            yield http, phone
    finally:
        phone.close()


def reply(
    phone: SipPhone,
    request: SipRequest,
    status: int,
    tag: str | None = None,
    body: bytes = b"",
    extra: str = "",
    contact: bool = True,
) -> None:
    """The callee's answer to the server's ``request``: its To tagged, Contact, SDP,
    ``extra`` header lines."""
    h = request.headers
    to = h.get("to") or ""
    lines = [
        f"SIP/2.0 {status} Whatever",
        *(f"Via: {v}" for v in h.all("via")),
        f"From: {h.get('from')}",
        f"To: {to};tag={tag}" if tag and tag_of(to) is None else f"To: {to}",
        f"Call-ID: {h.get('call-id')}",
        f"CSeq: {h.get('cseq')}",
    ]
    if contact:
        lines.append(f"Contact: <sip:alice@127.0.0.1:{phone.port}>")
    lines += extra.splitlines()
    if body:
        lines.append("Content-Type: application/sdp")
    lines.append(f"Content-Length: {len(body)}")
    phone.send_raw(("\r\n".join(lines) + "\r\n\r\n").encode() + body)


def post(
    http: httpx.AsyncClient, phone: SipPhone, key: str | None = None, **body: Any
) -> asyncio.Task[httpx.Response]:
    headers = {**AUTH, **({"Idempotency-Key": key} if key else {})}
    wanted = {"to": f"sip:alice@127.0.0.1:{phone.port}", "provider": "sip"} | body
    return asyncio.create_task(http.post("/v1/calls", json=wanted, headers=headers, timeout=30))


async def test_a_placed_call_is_answered_greeted_and_hung_up_once_per_key() -> None:
    async with dialing() as (http, phone):
        placing = post(http, phone, key="call-1")
        invite = await phone.request_in("INVITE")
        assert invite.uri == f"sip:alice@127.0.0.1:{phone.port}"
        offered = parse_offer(invite.body)
        assert offered.payload_types == (0, 8, 111, 101)  # PCMU, PCMA, opus, keys
        assert offered.names[101] == "TELEPHONE-EVENT/8000"
        reply(phone, invite, 100)
        reply(phone, invite, 180, "callee")
        await asyncio.sleep(0.2)
        assert not placing.done()  # ringing: the API waits for the answer
        reply(phone, invite, 200, "callee", offer(phone.rtp_port, (8, 101)))
        ack = await phone.request_in("ACK")
        assert ack.headers.get("cseq") == "1 ACK" and ack.to_tag == "callee"
        assert ack.uri == f"sip:alice@127.0.0.1:{phone.port}"  # the callee's Contact
        answered = await placing
        assert answered.status_code == 201, answered.text
        body = answered.json()
        assert body["status"] == "answered" and body["provider"] == "sip"
        assert body["call_id"] == invite.call_id and body["session_id"]

        # The agent speaks first: its greeting, PCMA as the answer chose, on RTP.
        async with asyncio.timeout(10):
            while (packet := await phone.rtp_packet()).payload in (QUIET, b"\xd5" * 160):
                pass
        assert packet.payload_type == 8 and len(packet.payload) == 160

        # The same request again (a client's retry): the same answer, no second INVITE.
        again = await post(http, phone, key="call-1")
        assert again.status_code == 201 and again.json() == body
        assert again.headers["idempotent-replayed"] == "true"
        other = await post(http, phone, key="call-1", instructions="Sell.")
        assert other.status_code == 422, other.text
        assert await calls(http) == 1

        # The callee hangs up.
        phone.to_tag = None
        bye = (
            f"BYE sip:voxpipe@127.0.0.1 SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{phone.port};branch=z9hG4bKbye1\r\n"
            f"From: {invite.headers.get('to')};tag=callee\r\n"
            f"To: {invite.headers.get('from')}\r\n"
            f"Call-ID: {invite.call_id}\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n"
        )
        phone.send_raw(bye.encode())
        assert (await phone.response(200)).headers.get("cseq") == "1 BYE"
        await until(lambda: _no_calls(http))
        assert not any(
            isinstance(m, SipRequest) and m.method == "INVITE" for m in phone.received[1:]
        ), "no second INVITE"


async def _no_calls(http: httpx.AsyncClient) -> bool:
    return await calls(http) == 0


async def test_a_busy_callee_is_acked_and_its_status_reported() -> None:
    async with dialing() as (http, phone):
        placing = post(http, phone, key="busy-1")
        invite = await phone.request_in("INVITE")
        reply(phone, invite, 180, "busy")
        retried = post(http, phone, key="busy-1")  # the client's retry while it rings
        await asyncio.sleep(0.3)
        assert not retried.done()  # it waits for the first request's outcome
        reply(phone, invite, 486, "busy")
        ack = await phone.request_in("ACK")
        assert ack.branch == invite.branch and ack.headers.get("cseq") == "1 ACK"
        assert ack.to_tag == "busy"
        refused = await placing
        assert refused.status_code == 502, refused.text
        error = refused.json()
        assert error["code"] == "call_failed" and error["sip_status"] == 486
        assert "486" in error["message"]
        again = await retried
        assert again.status_code == 502 and again.json() == error
        invites = [m for m in phone.received if isinstance(m, SipRequest) and m.method == "INVITE"]
        assert {m.branch for m in invites} == {invite.branch}  # one call, however re-sent
        await until(lambda: _no_calls(http))


async def test_ringing_too_long_is_cancelled() -> None:
    async with dialing(dial_timeout_s=1.0) as (http, phone):
        placing = post(http, phone)
        invite = await phone.request_in("INVITE")
        reply(phone, invite, 183, "ring", offer(phone.rtp_port, (0,)))  # early media: ringing
        cancel = await phone.request_in("CANCEL", 5)
        assert cancel.branch == invite.branch and cancel.headers.get("cseq") == "1 CANCEL"
        reply(phone, cancel, 200, "ring")
        reply(phone, invite, 487, "ring")
        ack = await phone.request_in("ACK")
        assert ack.branch == invite.branch
        refused = await placing
        assert refused.status_code == 502 and refused.json()["sip_status"] == 487
        assert "did not answer in 1 s" in refused.json()["message"]
        await until(lambda: _no_calls(http))


async def test_nobody_there_gets_the_invite_again_then_408() -> None:
    async with dialing(dial_timeout_s=1.6) as (http, phone):
        refused = await post(http, phone)
        assert refused.status_code == 502 and refused.json()["sip_status"] == 408
        invites = []
        with contextlib.suppress(TimeoutError):
            while True:
                message = await phone.next(0.2)
                if isinstance(message, SipRequest) and message.method == "INVITE":
                    invites.append(message)
        assert len(invites) >= 3  # at 0, 0.5 and 1.5 s (T1, then doubled)
        assert len({m.branch for m in invites}) == 1  # the same transaction
        assert not any(isinstance(m, SipRequest) and m.method == "CANCEL" for m in invites)
        await until(lambda: _no_calls(http))


async def test_an_answer_without_our_codecs_is_acked_and_hung_up() -> None:
    async with dialing() as (http, phone):
        placing = post(http, phone)
        invite = await phone.request_in("INVITE")
        reply(phone, invite, 200, "g722", offer(phone.rtp_port, (9,)))
        await phone.request_in("ACK")
        bye = await phone.request_in("BYE")
        phone.answer(bye)
        refused = await placing
        assert refused.status_code == 502 and refused.json()["sip_status"] == 488
        await until(lambda: _no_calls(http))


@pytest.mark.parametrize(
    ("to", "status", "code"),
    [
        ("sips:alice@127.0.0.1", 400, "invalid_event"),  # no TLS here
        ("sip:alice@127.0.0.1;transport=sctp", 400, "invalid_event"),
        ("+15550123", 400, "invalid_event"),  # a number: which trunk? (a provider's job)
        ("sip:alice@no-such-host.invalid", 502, "call_failed"),
    ],
)
async def test_what_cannot_be_dialled_is_refused(to: str, status: int, code: str) -> None:
    async with dialing() as (http, _):
        headers = {**AUTH, "Idempotency-Key": "k"}
        refused = await http.post(
            "/v1/calls", json={"to": to, "provider": "sip"}, headers=headers, timeout=30
        )
        assert (refused.status_code, refused.json()["code"]) == (status, code), refused.text
        assert await calls(http) == 0


async def test_without_sip_enabled_no_sip_call_is_placed() -> None:
    async with dialing(enabled=False) as (http, _):
        body = {"to": "sip:alice@127.0.0.1:5999", "provider": "sip"}
        refused = await http.post("/v1/calls", json=body, headers=AUTH)
        assert refused.status_code == 503 and "sip.enabled" in refused.json()["message"]
        bad_key = await http.post(
            "/v1/calls", json=body, headers={**AUTH, "Idempotency-Key": "a b"}
        )
        assert bad_key.status_code == 400 and "Idempotency-Key" in bad_key.json()["message"]


async def _request_at_trunk(phone: SipPhone, method: str) -> SipRequest:
    """The server's next ``method`` request; its REGISTERs meanwhile are granted."""
    async with asyncio.timeout(10):
        while True:
            message = await phone.next()
            if not isinstance(message, SipRequest):
                continue
            if message.method == method:
                return message
            if message.method == "REGISTER":
                contact = message.headers.get("contact") or ""
                reply(phone, message, 200, "trunk", extra=f"Contact: {contact}", contact=False)


async def test_a_number_is_dialled_through_the_trunk_answering_its_challenge() -> None:
    challenge = 'Digest realm="trunk.test", nonce="abc123", qop="auth"'
    async with dialing(trunk=True) as (http, phone):
        placing = post(http, phone, to="+15550123")
        invite = await _request_at_trunk(phone, "INVITE")
        assert invite.uri == f"sip:+15550123@127.0.0.1:{phone.port}"
        assert "<sip:agent@127.0.0.1>" in (invite.headers.get("from") or "")  # our AOR
        reply(phone, invite, 407, "t1", extra=f"Proxy-Authenticate: {challenge}")
        ack = await _request_at_trunk(phone, "ACK")
        assert ack.headers.get("cseq") == "1 ACK" and ack.branch == invite.branch
        again = await _request_at_trunk(phone, "INVITE")
        assert again.headers.get("cseq") == "2 INVITE" and again.call_id == invite.call_id
        assert again.from_tag == invite.from_tag and again.branch != invite.branch
        value = again.headers.get("proxy-authorization") or ""
        fields = dict(re.findall(r'(\w+)="?([^",]*)"?', value.removeprefix("Digest ")))
        assert fields["uri"] == invite.uri and fields["username"] == "agent"
        assert fields["response"] == digest.response(
            digest.parse_challenge(challenge), "agent", "pw", "INVITE", invite.uri,
            fields["cnonce"], int(fields["nc"], 16),
        )  # fmt: skip
        reply(phone, again, 200, "callee", offer(phone.rtp_port, (0, 101)))
        ack = await _request_at_trunk(phone, "ACK")
        assert ack.headers.get("cseq") == "2 ACK" and ack.to_tag == "callee"
        answered = await placing
        assert answered.status_code == 201, answered.text
