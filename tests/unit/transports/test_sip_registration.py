"""Registration (``transports/sip/registration.py``) with a registrar written here over
loopback UDP: the challenge answered with a digest the registrar checks, the binding renewed
before it expires (the same Call-ID and tag, a rising CSeq), a 423's Min-Expires honoured,
wrong credentials given up on until the retry, and the binding removed (Expires: 0) when
the user agent closes."""

from __future__ import annotations

import asyncio
import re

from tests.unit.transports.sip_phone import SipPhone
from tests.unit.transports.test_sip_outbound import reply
from voxpipe.config import SipConfig
from voxpipe.observability.metrics import Metrics
from voxpipe.transports.call import CallEnd
from voxpipe.transports.sip import digest
from voxpipe.transports.sip.message import SipRequest
from voxpipe.transports.sip.user_agent import SipUserAgent

REALM, NONCE = "trunk.test", "n0nce-1"
CHALLENGE = f'Digest realm="{REALM}", nonce="{NONCE}", qop="auth", algorithm=MD5'


class _Door:
    def refusing(self) -> CallEnd | None:
        return None


def agent(registrar: SipPhone, password: str = "pw", **sip: object) -> SipUserAgent:
    config = SipConfig(
        enabled=True,
        host="127.0.0.1",
        port=0,
        registrar=f"sip:127.0.0.1:{registrar.port}",
        username="agent",
        password=password,  # type: ignore[arg-type]
        **sip,  # type: ignore[arg-type]
    )
    return SipUserAgent(config, _Door(), Metrics())  # type: ignore[arg-type]


async def started(user_agent: SipUserAgent, registrar: SipPhone) -> None:
    """The user agent listening, and the registrar answering to its port."""
    await user_agent.start()
    registrar.server = ("127.0.0.1", user_agent.addresses[0][2])


def challenge(registrar: SipPhone, request: SipRequest) -> None:
    extra = f"WWW-Authenticate: {CHALLENGE}\r\n"
    reply(registrar, request, 401, "reg", extra=extra)


def checked(request: SipRequest, password: str = "pw") -> bool:
    """The request's Authorization is the digest of ``agent``:``password``."""
    value = request.headers.get("authorization") or ""
    fields = dict(re.findall(r'(\w+)="?([^",]*)"?', value.removeprefix("Digest ")))
    expected = digest.response(
        digest.parse_challenge(CHALLENGE),
        "agent",
        password,
        "REGISTER",
        fields.get("uri", ""),
        fields.get("cnonce"),
        int(fields.get("nc", "0"), 16),
    )
    return fields.get("username") == "agent" and fields.get("response") == expected


def granted(registrar: SipPhone, request: SipRequest, expires: int) -> None:
    contact = (request.headers.get("contact") or "").split(";expires")[0]
    extra = f"Contact: {contact};expires={expires}\r\n"
    reply(registrar, request, 200, "reg", extra=extra, contact=False)


async def test_a_challenge_is_answered_the_binding_renewed_and_removed() -> None:
    registrar = await SipPhone(("127.0.0.1", 0)).open()
    user_agent = agent(registrar, register_expires_s=2)
    try:
        await started(user_agent, registrar)
        seen: list[SipRequest] = []
        for _ in range(2):  # the first registration, then its renewal (at 80% of 2 s)
            first = await registrar.request_in("REGISTER", 5)
            assert first.headers.get("authorization") is None
            challenge(registrar, first)
            second = await registrar.request_in("REGISTER", 5)
            assert checked(second), second.headers.get("authorization")
            granted(registrar, second, 2)
            seen += [first, second]
        registration = user_agent.registration
        assert registration is not None
        async with asyncio.timeout(5):
            while registration.registrations < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        closing = asyncio.create_task(user_agent.close())
        bye = await registrar.request_in("REGISTER", 5)
        assert bye.headers.get("expires") == "0" and "expires=0" in (
            bye.headers.get("contact") or ""
        )
        challenge(registrar, bye)
        bye_again = await registrar.request_in("REGISTER", 5)
        assert checked(bye_again)
        granted(registrar, bye_again, 0)
        await asyncio.wait_for(closing, 5)
        seen += [bye, bye_again]
        assert len({r.call_id for r in seen}) == 1 and len({r.from_tag for r in seen}) == 1
        numbers = [r.cseq.number for r in seen if r.cseq]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
        assert seen[0].headers.get("to") == "<sip:agent@127.0.0.1>"
    finally:
        registrar.close()


async def test_423_asks_for_a_longer_lifetime() -> None:
    registrar = await SipPhone(("127.0.0.1", 0)).open()
    user_agent = agent(registrar, register_expires_s=1)
    try:
        await started(user_agent, registrar)
        first = await registrar.request_in("REGISTER", 5)
        assert first.headers.get("expires") == "1"
        reply(registrar, first, 423, "reg", extra="Min-Expires: 60\r\n")
        second = await registrar.request_in("REGISTER", 5)
        assert second.headers.get("expires") == "60"
        granted(registrar, second, 60)
        registration = user_agent.registration
        assert registration is not None
        async with asyncio.timeout(5):
            while registration.registered_s != 60:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        user_agent.registration = None  # nothing to remove at a registrar that has gone
        await user_agent.close()
        registrar.close()


async def test_wrong_credentials_are_not_sent_again_until_the_retry() -> None:
    registrar = await SipPhone(("127.0.0.1", 0)).open()
    user_agent = agent(registrar, password="wrong", register_retry_s=0.5)
    try:
        await started(user_agent, registrar)
        for _ in range(2):  # the try, and the one after register_retry_s
            first = await registrar.request_in("REGISTER", 5)
            challenge(registrar, first)
            second = await registrar.request_in("REGISTER", 5)
            assert not checked(second) and checked(second, "wrong")
            challenge(registrar, second)  # the same nonce again: refused
        assert user_agent.registration is not None
        assert user_agent.registration.registrations == 0
    finally:
        await user_agent.close()
        registrar.close()
