"""A SIP dialog as either side keeps it (RFC 3261, 12.1), its state, and the requests it
sends (BYE, REFER).

A call we answer makes its dialog from the caller's INVITE (:meth:`Dialog.of`, 12.1.1); a
call we place, from our INVITE and the callee's 2xx (:meth:`Dialog.called`, 12.1.2). Either
way the dialog is our URI with our tag, theirs with their tag, where their requests come
from (their Contact) and the route: from then on both directions read the same.

A flow is a UDP address (:class:`UdpFlow`, on the user agent's socket) or a TCP connection
(:class:`TcpFlow`): where a dialog's requests and answers go.

The state is an enum with one owner (:class:`~voxpipe.transports.sip.call.SipCall`), which
changes it in one method. The flow is where the INVITE came from or went to (a UDP address,
a TCP connection): our requests go the same way, which reaches a caller behind NAT and
needs no DNS; a Record-Route set is sent back as Route headers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from voxpipe.transports.sip.message import (
    SIP_VERSION,
    Outgoing,
    SipMessage,
    SipRequest,
    bracketed,
    new_branch,
    new_request,
    uri_of,
)


class CallState(Enum):
    """Where a call is: each step's only way forward is written in ``SipCall._set_state``."""

    RINGING = "ringing"  # INVITE taken (100 and 180 sent) or sent (ours), not yet answered
    ANSWERED = "answered"  # 200 OK sent (re-sent over UDP), waiting for the ACK
    CONFIRMED = "confirmed"  # ACK in (or, a call we placed, out): audio both ways
    TERMINATED = "terminated"  # BYE either way, CANCEL (487), no ACK, or the server ended it


NEXT = {
    CallState.RINGING: {CallState.ANSWERED, CallState.CONFIRMED, CallState.TERMINATED},
    CallState.ANSWERED: {CallState.CONFIRMED, CallState.TERMINATED},
    CallState.CONFIRMED: {CallState.TERMINATED},
    CallState.TERMINATED: set(),
}


class Flow(Protocol):
    """Where a call's signalling goes back: the UDP address or TCP connection it came on."""

    transport: str  # "UDP" or "TCP": Via's and Contact's transport
    reliable: bool  # TCP: nothing is re-sent
    local: tuple[str, int]  # our address on this flow (Via, Contact)
    peer: tuple[str, int]  # theirs

    def send(self, data: bytes) -> None: ...

    @property
    def closed(self) -> bool:
        """Nothing can be sent on it any more (a TCP connection closed, idle or by the peer)."""
        ...

    def close(self) -> None:
        """A connection of the call's own (a call we placed over TCP) is closed."""
        ...


@dataclass
class UdpFlow:
    sock: asyncio.DatagramTransport
    peer: tuple[str, int]
    local: tuple[str, int]
    transport: str = "UDP"
    reliable: bool = False

    def send(self, data: bytes) -> None:
        if not self.sock.is_closing():
            self.sock.sendto(data, self.peer)

    @property
    def closed(self) -> bool:
        return self.sock.is_closing()

    def close(self) -> None:
        """Nothing of its own: the socket is the user agent's."""


@dataclass
class TcpFlow:
    writer: asyncio.StreamWriter
    peer: tuple[str, int]
    local: tuple[str, int]
    transport: str = "TCP"
    reliable: bool = True

    def send(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    @property
    def closed(self) -> bool:
        return self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


@dataclass
class Dialog:
    """What our in-dialog requests need: the INVITE's ids, both ends' URIs with their tags,
    their contact, the route."""

    invite: SipRequest  # the INVITE that made the call: the caller's, or ours as sent
    local_tag: str
    local_host: str  # the address written in Contact and SDP
    flow: Flow
    local: str  # our From (To, in the caller's requests), with our tag
    remote: str  # theirs, with their tag once we know it
    remote_target: str  # their Contact's URI: where our in-dialog requests are addressed
    cseq: int = 0
    routes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, invite: SipRequest, local_tag: str, local_host: str, flow: Flow) -> Dialog:
        """The dialog of a call we answer (RFC 3261, 12.1.1)."""
        headers = invite.headers
        caller = headers.get("from") or ""
        return cls(
            invite,
            local_tag,
            local_host,
            flow,
            local=f"{headers.get('to')};tag={local_tag}",
            remote=caller,
            remote_target=uri_of(headers.get("contact") or caller),
            routes=headers.all("record-route"),  # the UAS keeps their order
        )

    def called(self, response: SipMessage) -> None:
        """A call we placed is answered (its 2xx): their tag, contact and route (12.1.2)."""
        self.remote = response.headers.get("to") or self.remote
        contact = response.headers.get("contact")
        if contact:
            self.remote_target = uri_of(contact)
        self.routes = list(reversed(response.headers.all("record-route")))

    @property
    def call_id(self) -> str:
        return self.invite.call_id

    def contact(self) -> str:
        where = bracketed(self.local_host)
        return f"<sip:voxpipe@{where}:{self.flow.local[1]};transport={self.flow.transport.lower()}>"

    def request(self, method: str, user_agent: str, cseq: int | None = None) -> Outgoing:
        """A new in-dialog request from us: our tag in From, theirs in To (RFC 3261, 12.2.1).
        ``cseq``: the number it must carry (an ACK: its INVITE's); else the next one."""
        if cseq is None:
            self.cseq += 1
        where = f"{bracketed(self.local_host)}:{self.flow.local[1]}"
        out = new_request(
            method,
            self.remote_target,
            f"{SIP_VERSION}/{self.flow.transport} {where};branch={new_branch()}",
            self.local,
            self.remote,
            self.call_id,
            self.cseq if cseq is None else cseq,
            self.contact(),
            self.routes,
        )
        out.add("User-Agent", user_agent)
        return out
