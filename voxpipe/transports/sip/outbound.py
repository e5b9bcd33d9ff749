"""A call we place (``POST /v1/calls`` with ``provider: sip``): the INVITE client
transaction (RFC 3261, 17.1.1), then the same call as one we answer.

The user agent (:meth:`~voxpipe.transports.sip.user_agent.SipUserAgent.dial`) writes the
INVITE with our offer (:func:`~voxpipe.transports.sip.sdp.offer`: PCMU, PCMA,
telephone-event) and hands it here. :meth:`OutboundCall._set_up` is then the whole
transaction, one response at a time:

- sent again over UDP at T1, 2 T1 ... until any answer comes (Timer A);
- ``100``, ``180``, ``183``: the callee is there (ringing); early media is not played;
- ``2xx``: the answer's SDP is read (one of our codecs: else ACK and BYE, 488), the dialog
  takes the callee's tag, Contact and Record-Route, our ACK goes out (again for every 2xx
  sent again), and the call runs as any other: the session, the agent's greeting first;
- ``401``/``407`` (a trunk asking who we are): ACKed, and, with credentials configured
  (``sip.username``, ``sip.password``), the INVITE sent again once with a digest answer;
- ``3xx``-``6xx``: ACKed, and the call fails with that status (:class:`DialFailed`);
- no answer at all in ``sip.dial_timeout_s``: 408; ringing that long: CANCEL, and the 487
  that follows is ACKed (a 2xx that crosses the CANCEL is ACKed and ended with BYE).

:attr:`OutboundCall.outcome` tells whoever placed the call how it went: the session's id
once answered, or the :class:`DialFailed` with the callee's status and reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass

from voxpipe.config import SipConfig
from voxpipe.conversation.events import ErrorCode
from voxpipe.transports.call import Call
from voxpipe.transports.sip import digest, sdp
from voxpipe.transports.sip.call import ALLOW, SipCall
from voxpipe.transports.sip.dialog import CallState, Dialog, Flow
from voxpipe.transports.sip.media import RtpMedia
from voxpipe.transports.sip.message import (
    REASONS,
    SipError,
    SipRequest,
    SipResponse,
    bracketed,
    host_port,
    new_branch,
    new_request,
    new_tag,
    parse,
)

log = logging.getLogger("voxpipe.sip")

RESPONSES = 32  # responses to our INVITE waiting to be read; more are dropped (UDP re-sends)
CANCEL_WAIT_S = 4.0  # how long a CANCEL waits for the INVITE's final response


class DialFailed(Exception):
    """The call was not placed or not answered: the SIP status that says why (the callee's,
    or 408 for no answer, 400 for a URI we cannot call, 503 for no room here) and a reason
    safe to show the API caller."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Target:
    """Where a SIP URI says to send the INVITE."""

    uri: str
    host: str
    port: int
    transport: str  # "udp" or "tcp"


def target_for(to: str, config: SipConfig) -> Target:
    """Where a call to ``to`` goes: a SIP URI as it is; a number (E.164) at the trunk
    registered with (``sip:+15550123@<registrar>``)."""
    if not to.startswith("+"):
        return target_of(to)
    if config.registrar is None:
        raise DialFailed(400, "a number is dialled through a trunk: set sip.registrar")
    trunk = target_of(config.registrar)
    host = bracketed(trunk.host)
    tcp = ";transport=tcp" if trunk.transport == "tcp" else ""
    return Target(f"sip:{to}@{host}:{trunk.port}{tcp}", trunk.host, trunk.port, trunk.transport)


def address_of_record(config: SipConfig) -> str | None:
    """Who we are at the trunk (``sip:<username>@<domain>``), when registered there."""
    if config.registrar is None or config.username is None:
        return None
    domain = config.register_domain or target_of(config.registrar).host
    return f"sip:{config.username}@{domain}"


def target_of(uri: str) -> Target:
    """The request URI ``uri`` (``sip:user@host[:port][;transport=tcp]``) as a place to send
    to; :class:`DialFailed` 400 for what this user agent cannot call (``sips:``, no host)."""
    uri = uri.strip().removeprefix("<").removesuffix(">")
    if not uri.startswith("sip:"):
        raise DialFailed(400, "only sip: URIs are dialled (no TLS: sips: is not spoken)")
    where = host_port(uri)
    if where is None or not where[0]:
        raise DialFailed(400, f"no host in {uri[:80]!r}")
    params = {p.partition("=")[0].lower(): p.partition("=")[2].lower() for p in uri.split(";")[1:]}
    transport = params.get("transport", "udp") or "udp"
    if transport not in ("udp", "tcp"):
        raise DialFailed(400, f"transport={transport[:16]} is not spoken (udp, tcp)")
    return Target(uri, where[0], where[1], transport)


@dataclass(frozen=True)
class Invite:
    """Our INVITE's parts, so that it can be written again (a challenge answered: the next
    CSeq, a new branch, the credentials) with the same Call-ID, tag and offer."""

    target: Target
    caller: str  # our From URI
    local_tag: str
    call_id: str
    contact: str
    via: str  # SIP/2.0/<transport> <host>:<port>
    offer: bytes
    user_agent: str

    def write(
        self, cseq: int = 1, credentials: tuple[str, str] | None = None
    ) -> tuple[SipRequest, bytes]:
        """The INVITE, read as the callee will read it, and its bytes."""
        out = new_request(
            "INVITE",
            self.target.uri,
            f"{self.via};branch={new_branch()};rport",
            f"<{self.caller}>;tag={self.local_tag}",
            f"<{self.target.uri}>",
            self.call_id,
            cseq,
            self.contact,
        )
        if credentials is not None:
            out.add(*credentials)
        out.add("Allow", ALLOW)
        out.add("User-Agent", self.user_agent)
        out.body, out.content_type = self.offer, "application/sdp"
        data = out.encode()
        message = parse(data)
        assert isinstance(message, SipRequest)
        return message, data


def in_transaction(invite: SipRequest, method: str, to: str | None = None) -> bytes:
    """A CANCEL of our INVITE, or the ACK of its 3xx-6xx answer (then ``to`` is the
    answer's To): the INVITE's request URI, top Via (its branch), From, Call-ID and CSeq
    number (RFC 3261, 9.1 and 17.1.1.3)."""
    cseq = invite.cseq
    return new_request(
        method,
        invite.uri,
        invite.headers.all("via")[0],
        invite.headers.get("from") or "",
        to or invite.headers.get("to") or "",
        invite.call_id,
        cseq.number if cseq else 1,
    ).encode()


class OutboundCall(SipCall):
    """A call we place: the INVITE transaction, then :class:`SipCall`'s life."""

    def __init__(
        self,
        call: Call,
        dialog: Dialog,
        rtp_socket: socket.socket,
        draft: Invite,
        invite_data: bytes,
        forget: Callable[[SipCall], None],
        timeout_s: float,
        instructions: str | None = None,
    ) -> None:
        config = call.services.config.sip
        codec = config.codecs[0]
        pt = sdp.offered_payload_type(codec)
        unknown = sdp.Negotiated(codec, pt, sdp.OFFERED_DTMF, (dialog.flow.peer[0], 0))
        super().__init__(call, dialog, rtp_socket, unknown, draft.offer, forget)
        self.draft = draft
        self.instructions = instructions
        self.timeout_s = timeout_s
        self._invite = invite_data
        self.outcome: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.outcome.add_done_callback(_retrieved)
        self._responses: asyncio.Queue[SipResponse] = asyncio.Queue(RESPONSES)
        self._heard = asyncio.Event()  # any response to the INVITE: no more re-sends
        self._cancel_responded = asyncio.Event()
        self._ringing = False
        self._authenticated = False  # a challenge to our INVITE has been answered
        self._ack = b""  # our last ACK, sent again for its response sent again

    @classmethod
    def to(
        cls,
        target: Target,
        admitted: Call,
        flow: Flow,
        host: str,
        rtp_socket: socket.socket,
        forget: Callable[[SipCall], None],
        instructions: str | None = None,
    ) -> OutboundCall:
        """A call to ``target`` over ``flow``: our offer on ``rtp_socket``, ``host`` our
        address in it, From the configured caller id, the registration's address of
        record, or ``sip:voxpipe@<host>``."""
        config = admitted.services.config.sip
        where = bracketed(host)
        draft = Invite(
            target,
            config.caller_id or address_of_record(config) or f"sip:voxpipe@{where}",
            new_tag(),
            f"{secrets.token_hex(12)}@voxpipe",
            f"<sip:voxpipe@{where}:{flow.local[1]};transport={flow.transport.lower()}>",
            f"SIP/2.0/{flow.transport} {where}:{flow.local[1]}",
            sdp.offer(config.codecs, host, rtp_socket.getsockname()[1]),
            config.user_agent,
        )
        request, data = draft.write()
        dialog = Dialog(
            request,
            draft.local_tag,
            host,
            flow,
            local=request.headers.get("from") or "",
            remote=request.headers.get("to") or "",
            remote_target=target.uri,
            cseq=1,
        )
        return cls(
            admitted, dialog, rtp_socket, draft, data, forget, config.dial_timeout_s, instructions
        )

    @property
    def target(self) -> str:
        return self.dialog.invite.uri

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            self._fail(503, f"the call ended before it was answered {self.why}".strip())
            self.dialog.flow.close()  # a TCP connection of its own; UDP: nothing

    # -- the INVITE transaction --------------------------------------------------

    async def _set_up(self) -> bool:
        log.info("sip call %s: calling %s", self.call_id, self.target)
        self._resend(self._invite, self._heard, "INVITE")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while (left := deadline - loop.time()) > 0:
            try:
                response = await asyncio.wait_for(self._responses.get(), left)
            except TimeoutError:
                break
            if response.status < 200:
                if not self._ringing and response.status > 100:
                    log.info("sip call %s: %d %s", self.call_id, response.status, response.reason)
                self._ringing = self._ringing or response.status > 100
                continue
            if response.status < 300:
                return await self._accept(response)
            self._ack_failure(response)
            if response.status in (401, 407) and self._authenticate(response):
                continue  # the INVITE again, with our credentials
            reason = response.reason or REASONS.get(response.status, "")
            return self._fail(response.status, f"{self.target} answered {response.status} {reason}")
        if not self._heard.is_set():  # Timer B: nobody there
            return self._fail(408, f"no answer from {self.target} in {self.timeout_s:g} s")
        return await self._give_up()

    def _authenticate(self, response: SipResponse) -> bool:
        """A trunk's challenge (401, 407) to our INVITE answered once, with the
        registration's credentials (``sip.username``, ``sip.password``): the INVITE is sent
        again with the next CSeq. False: no credentials, or this was the second challenge."""
        config = self.config
        if config.username is None or config.password is None or self._authenticated:
            return False
        proxy = response.status == 407
        value = response.headers.get("proxy-authenticate" if proxy else "www-authenticate") or ""
        try:
            challenge = digest.parse_challenge(value)
        except digest.DigestError as exc:
            log.warning("sip call %s: cannot answer the challenge: %s", self.call_id, exc)
            return False
        self._authenticated = True
        header = "Proxy-Authorization" if proxy else "Authorization"
        user, password = config.auth_username or config.username, config.password
        credentials = digest.authorization(
            challenge, user, password.get_secret_value(), "INVITE", self.target
        )
        request, data = self.draft.write(2, (header, credentials))
        self.dialog.invite, self.dialog.cseq, self._invite = request, 2, data
        self._heard = asyncio.Event()
        self._resend(data, self._heard, "INVITE")
        return True

    async def _accept(self, response: SipResponse) -> bool:
        """A 2xx: the dialog is up; the call runs if its SDP names one of our codecs."""
        self.dialog.called(response)
        self._next_hop()
        try:
            if response.content_type != "application/sdp" or not response.body:
                raise SipError(488, "the 2xx carries no SDP answer")
            chosen = sdp.accept_answer(sdp.parse_offer(response.body), self.config.codecs)
        except SipError as exc:
            self._send_ack()
            self._set_state(CallState.CONFIRMED, "(2xx, ACK sent)")
            self._hang_up_ours(f"(an answer we cannot use: {exc.detail})")
            return self._fail(488, f"{self.target}'s answer: {exc.detail}")
        self.media = RtpMedia(
            self.media.sock,
            chosen,
            self.heard,
            self.config.jitter_packets,
            self.call.services.config.audio.max_frame_ms,
        )
        await self._start_media(self.dialog.remote)
        self._send_ack()
        self._set_state(CallState.CONFIRMED, f"({response.status}, ACK sent)")
        assert self.session is not None
        if not self.outcome.done():
            self.outcome.set_result(self.session.id)
        return True

    async def _give_up(self) -> bool:
        """Ringing for ``timeout_s``: CANCEL, then the INVITE's 487 (ACKed)."""
        self._send_cancel()
        why = f"{self.target} did not answer in {self.timeout_s:g} s (cancelled)"
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_WAIT_S):
                while True:
                    response = await self._responses.get()
                    if response.status >= 300:
                        self._ack_failure(response)
                        break
                    if response.status >= 200:  # answered as we gave up: we hang up
                        self.dialog.called(response)
                        self._next_hop()
                        self._send_ack()
                        self._set_state(CallState.CONFIRMED, "(2xx after our CANCEL)")
                        self._hang_up_ours("(answered after the CANCEL)")
                        break
        return self._fail(487, why)

    def _end_unanswered(self) -> None:
        """The server ends a call still ringing (drain, shutdown): CANCEL it."""
        if self._heard.is_set():
            self._send_cancel()
        self._fail(503, "the server ended the call before it was answered")

    def _fail(self, status: int, reason: str) -> bool:
        if not self.outcome.done():
            log.warning(
                "sip call %s to %s failed: %d %s", self.call_id, self.target, status, reason
            )
            self.metrics.errors.labels(ErrorCode.CALL_FAILED).inc()
            self.outcome.set_exception(DialFailed(status, reason))
        self._set_state(CallState.TERMINATED, f"({status} {reason})")
        return False

    # -- what we send ------------------------------------------------------------

    def _send_ack(self) -> None:
        """The ACK of a 2xx: a request of the dialog, with the INVITE's CSeq (13.2.2.4)."""
        invite_cseq = self.dialog.invite.cseq
        number = invite_cseq.number if invite_cseq else 1
        out = self.dialog.request("ACK", self.config.user_agent, number)
        self._ack = out.encode()
        self.dialog.flow.send(self._ack)

    def _ack_failure(self, response: SipResponse) -> None:
        """The ACK of a 3xx-6xx: part of the INVITE's transaction (17.1.1.3)."""
        self._ack = in_transaction(self.dialog.invite, "ACK", response.headers.get("to"))
        self.dialog.flow.send(self._ack)

    def _send_cancel(self) -> None:
        data = in_transaction(self.dialog.invite, "CANCEL")
        self._resend(data, self._cancel_responded, "CANCEL")

    def _next_hop(self) -> None:
        """Over UDP, the dialog's requests go to its first route, else the callee's Contact,
        when that is an address (a name keeps the flow the INVITE went on)."""
        flow: Flow = self.dialog.flow
        if flow.reliable:
            return
        hop = self.dialog.routes[0] if self.dialog.routes else self.dialog.remote_target
        where = host_port(hop.strip().removeprefix("<").split(">")[0])
        if where is None:
            return
        with contextlib.suppress(ValueError):
            ipaddress.ip_address(where[0])
            flow.peer = where

    # -- what comes back ---------------------------------------------------------

    def response_received(self, message: SipResponse) -> None:
        cseq = message.cseq
        if cseq is None or message.from_tag != self.dialog.local_tag:
            return
        if cseq.method == "CANCEL":
            self._cancel_responded.set()
        elif cseq.method != "INVITE":
            super().response_received(message)  # our BYE's, our REFER's
        elif self.state is CallState.RINGING:
            invite_cseq = self.dialog.invite.cseq
            if invite_cseq is not None and cseq.number != invite_cseq.number:
                return  # a response to the INVITE before a challenge, sent again
            self._heard.set()
            with contextlib.suppress(asyncio.QueueFull):
                self._responses.put_nowait(message)
        elif message.status >= 200 and self._ack:  # a final response again: our ACK was lost
            self.dialog.flow.send(self._ack)


def _retrieved(outcome: asyncio.Future[str]) -> None:
    """A failure nobody waited for (the API caller went away) is not an asyncio warning."""
    if not outcome.cancelled():
        outcome.exception()
