"""A SIP dialog as the answering side keeps it (RFC 3261, 12.1.1), its state, and the
requests it sends (BYE, REFER).

The state is an enum with one owner (:class:`~voxpipe.transports.sip.call.SipCall`), which
changes it in one method. The flow is where the INVITE came from (a UDP address, a TCP
connection): our requests go back the same way, which reaches a caller behind NAT and needs
no DNS; a Record-Route set, when the INVITE has one, is sent back as Route headers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from voxpipe.transports.sip.message import (
    SIP_VERSION,
    Outgoing,
    SipRequest,
    new_branch,
    uri_of,
)


class CallState(Enum):
    """Where a call is: each step's only way forward is written in ``SipCall._set_state``."""

    RINGING = "ringing"  # INVITE taken: 100 and 180 sent, not yet answered
    ANSWERED = "answered"  # 200 OK sent (re-sent over UDP), waiting for the ACK
    CONFIRMED = "confirmed"  # ACK in: audio both ways
    TERMINATED = "terminated"  # BYE either way, CANCEL (487), no ACK, or the server ended it


NEXT = {
    CallState.RINGING: {CallState.ANSWERED, CallState.TERMINATED},
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


@dataclass
class Dialog:
    """What our in-dialog requests need: the INVITE's ids, our tag, their contact, routes."""

    invite: SipRequest
    local_tag: str
    local_host: str  # the address written in Contact and SDP
    flow: Flow
    cseq: int = 0
    routes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, invite: SipRequest, local_tag: str, local_host: str, flow: Flow) -> Dialog:
        return cls(invite, local_tag, local_host, flow, routes=invite.headers.all("record-route"))

    @property
    def call_id(self) -> str:
        return self.invite.call_id

    @property
    def remote_target(self) -> str:
        """Their Contact's URI (where in-dialog requests are addressed), else their From."""
        contact = self.invite.headers.get("contact")
        return uri_of(contact or self.invite.headers.get("from") or "")

    def contact(self) -> str:
        host, port = self.local_host, self.flow.local[1]
        where = f"[{host}]" if ":" in host else host
        return f"<sip:voxpipe@{where}:{port};transport={self.flow.transport.lower()}>"

    def request(self, method: str, user_agent: str) -> Outgoing:
        """A new in-dialog request from us: our tag in From, theirs in To (RFC 3261, 12.2.1)."""
        self.cseq += 1
        headers = self.invite.headers
        host, port = self.local_host, self.flow.local[1]
        where = f"[{host}]" if ":" in host else host
        out = Outgoing(f"{method} {self.remote_target} {SIP_VERSION}")
        out.add("Via", f"{SIP_VERSION}/{self.flow.transport} {where}:{port};branch={new_branch()}")
        out.add("Max-Forwards", "70")
        for route in self.routes:  # the UAS keeps Record-Route's order (RFC 3261, 12.1.1)
            out.add("Route", route)
        out.add("From", f"{headers.get('to')};tag={self.local_tag}")
        out.add("To", headers.get("from") or "")
        out.add("Call-ID", self.call_id)
        out.add("CSeq", f"{self.cseq} {method}")
        out.add("Contact", self.contact())
        out.add("User-Agent", user_agent)
        return out
