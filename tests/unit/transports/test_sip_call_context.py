"""Who a SIP call is from, as its tools are told (issue 29): the INVITE's From URI is the
call context's ``caller``, beside the transport and the session; a From that is not a
printable URI reaches no tool, and a Call-ID that is not printable is refused with a 400,
as every client-chosen id at every door (``observability/logs.py``)."""

from __future__ import annotations

import asyncio

from tests.unit.conversation.tools_support import called
from tests.unit.fakes import FakeLlm
from tests.unit.transports.sip_phone import SipPhone, offer
from tests.unit.transports.test_sip_user_agent import (
    LOUD,
    QUIET,
    _no_calls,
    calls,
    sip_server,
    until,
)
from voxpipe.agent import Agent, CallContext, tool
from voxpipe.transports.sip import rtp
from voxpipe.transports.sip.message import SipResponse
from voxpipe.transports.sip.sdp import parse_offer

FROM = b"From: <sip:caller@127.0.0.1>"
URI = "sip:+15550142@carrier.example;user=phone"  # the URI: its parameters are part of it


def whoami_agent(seen: list[CallContext]) -> Agent:
    @tool(effect="read_only", says="message")
    async def whoami(call: CallContext) -> dict[str, str]:
        """Who is calling."""
        seen.append(call)
        return {"message": "You are you."}

    return Agent(instructions="Say who calls.", tools=[whoami])


async def call_from(phone: SipPhone, from_uri: bytes) -> None:
    """INVITE from ``from_uri``, ACK, then half a second of speech: a turn."""
    invite, _ = phone.request("INVITE", offer(phone.rtp_port))
    assert FROM in invite
    phone.send_raw(invite.replace(FROM, b"From: <" + from_uri + b">"))
    ok = await phone.response(200)
    media = parse_offer(ok.body)
    phone.send("ACK", cseq=phone.cseq)
    for seq in range(60):
        payload = LOUD if seq < 25 else QUIET
        phone.send_rtp((media.address, media.port), rtp.RtpPacket(0, seq, seq * 160, 7, payload))


async def context_of_a_call_from(from_uri: str) -> tuple[CallContext, FakeLlm]:
    """The call context a tool gets in a call whose INVITE is from ``from_uri``, and the
    LLM that called the tool (what it was offered)."""
    seen: list[CallContext] = []
    llm = FakeLlm([called("whoami")])
    async with sip_server(agent=whoami_agent(seen), llm=llm, heard="who am I") as (where, http):
        phone = await SipPhone(where).open()
        try:
            await call_from(phone, from_uri.encode())
            async with asyncio.timeout(20):
                while not seen:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            phone.send("BYE")
            await phone.response(200)
            await until(lambda: _no_calls(http))
        finally:
            phone.close()
    return seen[0], llm


async def test_the_from_uri_reaches_the_tools_call_context() -> None:
    context, llm = await context_of_a_call_from(URI)
    assert (context.caller, context.transport) == (URI, "sip")
    assert context.principal == "anonymous" and context.session_id and context.call_id
    assert context.identity == f"tel:{URI}"
    [offered] = llm.tools[0]
    assert offered.name == "whoami" and not offered.parameters.get("properties")


async def test_a_from_that_is_not_printable_reaches_no_tool() -> None:
    context, _ = await context_of_a_call_from("sip:\x1b[2Jroot\u202e@127.0.0.1")
    assert context.caller is None and context.identity == "anonymous", context


async def test_a_call_id_that_is_not_printable_is_refused() -> None:
    async with sip_server() as (where, http):
        for call_id in ("a\x1b[2J@evil", "a\u202eb@evil", "a\x7f@evil"):
            phone = await SipPhone(where, call_id=call_id).open()
            try:
                phone.send("INVITE", offer(phone.rtp_port))
                reply = await phone.next()
                assert isinstance(reply, SipResponse) and reply.status == 400, reply
                assert "Call-ID" in (reply.headers.get("warning") or ""), reply.headers
            finally:
                phone.close()
        assert await calls(http) == 0
