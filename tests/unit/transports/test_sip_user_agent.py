"""The SIP user agent in the real app on fake engines, called over loopback UDP by a caller
written here (``sip_phone.py``): a whole call (INVITE, 100/180/200, the 200 re-sent until the
ACK, the INVITE re-sent without a second call, RTP both ways, keypad digits, BYE), CANCEL,
our BYE (the agent's ``end_call``, the idle timeout), and every bad request answered 4xx and
counted while the server goes on."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import numpy as np
import pytest

from tests.support import free_sip_port, metric_value
from tests.unit.conversation.tools_support import called
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from tests.unit.transports.sip_phone import SipPhone, offer
from voxpipe.agent import Agent
from voxpipe.agent.call_control import end_call, transfer_call_to
from voxpipe.audio.pcm import ulaw_encode
from voxpipe.config import Config
from voxpipe.engines.base import Engines
from voxpipe.transports.sip import rtp, user_agent
from voxpipe.transports.sip.dtmf import event_payload
from voxpipe.transports.sip.message import SipResponse
from voxpipe.transports.sip.sdp import parse_offer

LOUD = ulaw_encode(np.full(160, 12000, np.int16).tobytes())  # the fake VAD hears speech
QUIET = ulaw_encode(bytes(320))


def engines(llm: FakeLlm | None, heard: str) -> Callable[[Config], Engines]:
    return lambda config: Engines(FakeVad(), FakeStt(heard), llm or FakeLlm(), FakeTts())


@contextlib.asynccontextmanager
async def sip_server(
    agent: Agent | None = None, llm: FakeLlm | None = None, heard: str = "hello there", **sip: Any
) -> AsyncIterator[tuple[tuple[str, int], httpx.AsyncClient]]:
    port = free_sip_port()
    sections = {name: sip.pop(name) for name in ("server", "limits") if name in sip}
    config = quiet_config(
        sip={"enabled": True, "host": "127.0.0.1", "port": port, "rtp_port_range": (0, 0), **sip},
        **sections,
    )
    async with serving(config, engines(llm, heard), 30, agent=agent) as (_, http):
        yield ("127.0.0.1", port), http


async def metric(http: httpx.AsyncClient, sample: str) -> float:
    return metric_value((await http.get("/metrics")).text, sample) or 0.0


async def calls(http: httpx.AsyncClient) -> int:
    return int((await http.get("/readyz")).json()["calls"])


async def until(probe: Callable[[], Any], timeout_s: float = 10.0) -> None:
    """Poll the server's HTTP face until ``probe`` holds (its metrics have no push)."""
    async with asyncio.timeout(timeout_s):
        while not await probe():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def answered(phone: SipPhone) -> tuple[SipResponse, tuple[str, int]]:
    """INVITE with an offer; the 200 and the server's RTP address from its answer."""
    phone.send("INVITE", offer(phone.rtp_port))
    ok = await phone.response(200)
    media = parse_offer(ok.body)
    return ok, (media.address, media.port)


async def test_a_call_is_answered_spoken_to_keyed_and_hung_up() -> None:
    async with sip_server() as (where, http):
        phone = await SipPhone(where).open()
        try:
            invite, branch = phone.request("INVITE", offer(phone.rtp_port))
            phone.send_raw(invite)
            statuses = []
            while not statuses or statuses[-1] != 200:
                message = await phone.next()
                assert isinstance(message, SipResponse)
                statuses.append(message.status)
            assert statuses == [100, 180, 200]
            ok = phone.received[-1]
            assert isinstance(ok, SipResponse)
            phone.to_tag = ok.to_tag
            assert ok.content_type == "application/sdp" and ok.headers.get("contact")
            media = parse_offer(ok.body)
            server_rtp = (media.address, media.port)
            # No ACK yet: the 200 comes again (UDP), and the INVITE again is no second call.
            again = await phone.response(200, 3)
            assert again.body == ok.body
            phone.send_raw(invite)
            assert (await phone.response(200)).to_tag == ok.to_tag
            assert await calls(http) == 1
            phone.send("ACK", cseq=1, branch=branch)

            for seq in range(25):  # half a second of speech, then silence: a turn
                phone.send_rtp(server_rtp, rtp.RtpPacket(0, seq, seq * 160, 7, LOUD))
            for seq in range(25, 60):
                phone.send_rtp(server_rtp, rtp.RtpPacket(0, seq, seq * 160, 7, QUIET))
            async with asyncio.timeout(10):
                while (packet := await phone.rtp_packet()).payload == QUIET:
                    pass  # silence until the reply
            assert packet.payload_type == 0 and len(packet.payload) == 160

            for i, digit in enumerate("42"):  # each key press sent three times, as phones do
                for repeat in range(3):
                    payload = event_payload(digit, 160 * (repeat + 1), repeat == 2)
                    phone.send_rtp(
                        server_rtp, rtp.RtpPacket(101, 60 + 3 * i + repeat, 20000 + i, 7, payload)
                    )
            await until(lambda: _digits(http, "4", "2"))

            phone.send_rtp_raw(server_rtp, b"\x80\x00")  # bad RTP: dropped, counted
            phone.send_rtp(server_rtp, rtp.RtpPacket(9, 70, 0, 7, LOUD))  # not negotiated
            await until(lambda: _dropped(http, "short", "payload_type"))

            phone.send("BYE")
            bye_ok = await phone.response(200)
            assert bye_ok.cseq is not None and bye_ok.cseq.method == "BYE"
            await until(lambda: _no_calls(http))
        finally:
            phone.close()


async def _digits(http: httpx.AsyncClient, *digits: str) -> bool:
    return all([await metric(http, f'voxpipe_dtmf_total{{digit="{d}"}}') == 1 for d in digits])


async def _dropped(http: httpx.AsyncClient, *reasons: str) -> bool:
    text = (await http.get("/metrics")).text
    return all(
        (metric_value(text, f'voxpipe_rtp_dropped_total{{reason="{r}"}}') or 0) >= 1
        for r in reasons
    )


async def _no_calls(http: httpx.AsyncClient) -> bool:
    return await calls(http) == 0


async def test_cancel_while_ringing_is_487_and_the_call_is_gone() -> None:
    async with sip_server(ring_ms=5000) as (where, http):
        phone = await SipPhone(where).open()
        try:
            branch = phone.send("INVITE", offer(phone.rtp_port))
            await phone.response(180)
            phone.send("CANCEL", branch=branch, cseq=2)
            cancel_ok = await phone.response(200)
            assert cancel_ok.cseq is not None and cancel_ok.cseq.method == "CANCEL"
            terminated = await phone.response(487)
            assert terminated.cseq is not None and terminated.cseq.method == "INVITE"
            await until(lambda: _no_calls(http))
            phone.send("CANCEL", branch=branch, cseq=2)  # again: the same answer
            assert (await phone.response(200)).cseq == cancel_ok.cseq
        finally:
            phone.close()


async def answered_and_said(phone: SipPhone) -> None:
    """The call answered and confirmed; half a second of speech, then silence: a turn."""
    _, server_rtp = await answered(phone)
    phone.send("ACK", cseq=phone.cseq)
    for seq in range(60):
        payload = LOUD if seq < 25 else QUIET
        phone.send_rtp(server_rtp, rtp.RtpPacket(0, seq, seq * 160, 7, payload))


async def test_end_call_hangs_up_with_our_bye() -> None:
    agent = Agent(instructions="Hang up when asked.", tools=[end_call])
    llm = FakeLlm([called("end_call")])  # every reply (the server's warm-up's too) hangs up
    async with sip_server(agent=agent, llm=llm, heard="thanks, bye") as (where, http):
        phone = await SipPhone(where).open()
        try:
            await answered_and_said(phone)
            bye = await phone.request_in("BYE", 20)
            assert bye.to_tag == phone.tag and bye.from_tag is not None
            phone.answer(bye)
            await until(lambda: _no_calls(http))
        finally:
            phone.close()


@contextlib.asynccontextmanager
async def transferring(target: str) -> AsyncIterator[tuple[SipPhone, httpx.AsyncClient, Any]]:
    """A call whose caller asks for a person: the agent's transfer_call sends a REFER."""
    agent = Agent(instructions="Put callers through.", tools=[transfer_call_to(target)])
    llm = FakeLlm([called("transfer_call")])
    async with sip_server(agent=agent, llm=llm, heard="can I talk to a person") as (where, http):
        phone = await SipPhone(where).open()
        try:
            await answered_and_said(phone)
            refer = await phone.request_in("REFER", 20)
            yield phone, http, refer
        finally:
            phone.close()


def _notify(phone: SipPhone, sipfrag: str) -> None:
    phone.send(
        "NOTIFY",
        f"{sipfrag}\r\n".encode(),
        extra="Event: refer\r\nSubscription-State: terminated;reason=noresource\r\n",
        content_type="message/sipfrag",
    )


async def test_transfer_call_is_a_refer_and_the_call_ends_once_the_new_one_is_answered() -> None:
    async with transferring("+15550100") as (phone, http, refer):
        # A number is put through at the host the call came from (the trunk).
        assert refer.headers.get("refer-to") == "<sip:+15550100@127.0.0.1>"
        assert refer.to_tag == phone.tag and refer.headers.get("referred-by")
        phone.answer(refer, 202)
        _notify(phone, "SIP/2.0 100 Trying")
        await phone.response(200)
        _notify(phone, "SIP/2.0 200 OK")
        await phone.response(200)
        bye = await phone.request_in("BYE", 10)
        phone.answer(bye)
        await until(lambda: _no_calls(http))
        assert await metric(http, 'voxpipe_errors_total{code="transfer_failed"}') == 0


async def test_a_refused_transfer_leaves_the_call_up() -> None:
    async with transferring("sip:desk@192.0.2.9") as (phone, http, refer):
        assert refer.headers.get("refer-to") == "<sip:desk@192.0.2.9>"
        phone.answer(refer, 603)
        await until(lambda: _errors(http, "transfer_failed"))
        assert await calls(http) == 1  # still up: the caller hangs up
        phone.send("BYE")
        await phone.response(200)
        await until(lambda: _no_calls(http))


async def _errors(http: httpx.AsyncClient, code: str) -> bool:
    return await metric(http, f'voxpipe_errors_total{{code="{code}"}}') == 1


async def test_an_idle_call_is_ended_with_our_bye_re_sent_until_answered() -> None:
    async with sip_server(server={"idle_timeout_s": 1.0}) as (where, http):
        phone = await SipPhone(where).open()
        try:
            await answered(phone)
            phone.send("ACK", cseq=phone.cseq)
            first = await phone.request_in("BYE", 10)
            again = await phone.request_in("BYE", 5)  # not answered: re-sent
            assert again.cseq == first.cseq
            phone.answer(again)
            await until(lambda: _no_calls(http))
        finally:
            phone.close()


def _without(name: str, data: bytes) -> bytes:
    lines = data.split(b"\r\n")
    return b"\r\n".join(line for line in lines if not line.startswith(name.encode()))


async def test_bad_requests_are_answered_4xx_and_counted_and_the_server_goes_on() -> None:
    async with sip_server() as (where, http):
        phone = await SipPhone(where).open()
        try:
            invite, _ = phone.request("INVITE", offer(phone.rtp_port))
            no_codec = offer(phone.rtp_port, (9,))
            cases: list[tuple[bytes, int]] = [
                (b"GARBAGE\r\nVia: SIP/2.0/UDP 127.0.0.1;branch=z9hG4bK1\r\n\r\n", 400),
                (b"INVITE sip:a SIP/2.0\r\nCall-ID: x\r\n\r\n", 400),  # no Via, From, To, CSeq
                (_without("Call-ID", invite), 400),
                (_without("CSeq", invite), 400),
                (phone.request("INVITE", b"v=0\r\nnonsense\r\n")[0], 400),
                (phone.request("INVITE", no_codec)[0], 488),
                (phone.request("INVITE")[0], 488),  # no offer
                (phone.request("BYE")[0], 481),
                (phone.request("CANCEL", cseq=9)[0], 481),
                (phone.request("REGISTER")[0], 405),
                (
                    phone.request("INVITE", offer(phone.rtp_port), extra="Require: 100rel\r\n")[0],
                    420,
                ),
            ]
            for data, status in cases:
                phone.send_raw(data)
                reply = await phone.next()
                assert isinstance(reply, SipResponse), data
                assert reply.status == status, (data, reply.status, reply.headers.get("warning"))
            phone.send_raw(b"\r\n\r\n")  # a keep-alive: no answer, no count
            phone.send("OPTIONS")
            options = await phone.response(200)
            assert "INVITE" in (options.headers.get("allow") or "")
            assert await calls(http) == 0
            refused = sum(
                [
                    await metric(http, f'voxpipe_sip_refused_total{{status="{s}"}}')
                    for s in ("400", "405", "420", "481", "488")
                ]
            )
            assert refused == len(cases)
        finally:
            phone.close()
        # Still answering calls after all that.
        caller = await SipPhone(where).open()
        try:
            await answered(caller)
            caller.send("ACK", cseq=caller.cseq)
            caller.send("BYE")
            await caller.response(200)
            await until(lambda: _no_calls(http))
        finally:
            caller.close()


async def test_options_is_503_and_an_invite_refused_while_the_server_is_full() -> None:
    async with sip_server(limits={"max_calls": 1}) as (where, http):
        first, second = await SipPhone(where).open(), await SipPhone(where).open()
        try:
            first.send("OPTIONS")
            await first.response(200)  # a call would be taken: a dispatcher sends one
            await answered(first)
            first.send("ACK", cseq=first.cseq)
            second.send("OPTIONS")
            probe = await second.response(503)
            assert probe.headers.get("retry-after") == "1"
            second.send("INVITE", offer(second.rtp_port))
            refused = await second.response(503)
            assert "capacity" in (refused.headers.get("warning") or "")
            first.send("BYE")
            await first.response(200)
            await until(lambda: _no_calls(http))
        finally:
            first.close()
            second.close()


async def test_a_request_over_the_size_limit_is_413() -> None:
    async with sip_server(max_message_bytes=1024) as (where, _):
        phone = await SipPhone(where).open()
        try:
            phone.send("OPTIONS", extra="X-Pad: " + "a" * 1100 + "\r\n")
            assert (await phone.next()).status == 413  # type: ignore[union-attr]
        finally:
            phone.close()


async def _tcp_answer(reader: asyncio.StreamReader) -> bytes:
    """One SIP message off a TCP stream (framed by its Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"Content-Length: *([0-9]+)", head, re.IGNORECASE)
    return head + await reader.readexactly(int(length[1]) if length else 0)


async def test_a_tcp_connection_stays_open_while_its_call_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Idle TCP connections are closed after TCP_IDLE_S, but not one a call's signalling
    needs: a quiet call's BYE still goes over it."""
    monkeypatch.setattr(user_agent, "TCP_IDLE_S", 0.3)
    async with sip_server() as (where, http):
        phone = await SipPhone(where).open()  # writes the requests; TCP carries them
        reader, writer = await asyncio.open_connection(*where)
        idle_reader, idle_writer = await asyncio.open_connection(*where)
        try:
            invite, _ = phone.request("INVITE", offer(phone.rtp_port))
            writer.write(invite.replace(b"SIP/2.0/UDP", b"SIP/2.0/TCP"))
            async with asyncio.timeout(10):
                while not (answer := await _tcp_answer(reader)).startswith(b"SIP/2.0 200"):
                    pass
            phone.to_tag = re.search(rb"To: [^\r]*;tag=([^;\r]+)", answer)[1].decode()  # type: ignore[index]
            ack, _ = phone.request("ACK", cseq=1)
            writer.write(ack.replace(b"SIP/2.0/UDP", b"SIP/2.0/TCP"))
            await asyncio.sleep(1.0)  # over three idle timeouts, nothing said
            assert await asyncio.wait_for(idle_reader.read(), 5) == b""  # no call: closed
            bye, _ = phone.request("BYE")
            writer.write(bye.replace(b"SIP/2.0/UDP", b"SIP/2.0/TCP"))
            async with asyncio.timeout(10):
                assert (await _tcp_answer(reader)).startswith(b"SIP/2.0 200")
            await until(lambda: _no_calls(http))
        finally:
            phone.close()
            writer.close()
            idle_writer.close()
