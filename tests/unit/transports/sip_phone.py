"""A small SIP caller for the tests: raw SIP over UDP and RTP, so every byte is the test's.

It writes requests as a softphone would (its own Via branch, From tag, CSeq), collects every
response and request the server sends, and speaks RTP on a socket of its own.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field

from voxpipe.transports.sip import rtp
from voxpipe.transports.sip.message import SipRequest, SipResponse, parse

OFFER = (
    "v=0\r\no=phone 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    "m=audio {port} RTP/AVP {types}\r\n{maps}a=sendrecv\r\n"
)
MAPS = {0: "PCMU/8000", 8: "PCMA/8000", 101: "telephone-event/8000", 9: "G722/8000"}


def offer(port: int, types: tuple[int, ...] = (0, 8, 101)) -> bytes:
    maps = "".join(f"a=rtpmap:{t} {MAPS[t]}\r\n" for t in types if t in MAPS)
    return OFFER.format(port=port, types=" ".join(map(str, types)), maps=maps).encode()


class _Inbox(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.queue.put_nowait(data)


@dataclass
class SipPhone:
    """One caller: a SIP socket and an RTP socket on loopback."""

    server: tuple[str, int]
    call_id: str = field(default_factory=lambda: f"{secrets.token_hex(8)}@test")
    tag: str = field(default_factory=lambda: secrets.token_hex(4))
    cseq: int = 1
    to_tag: str | None = None
    received: list[SipRequest | SipResponse] = field(default_factory=list)

    async def open(self) -> SipPhone:
        loop = asyncio.get_running_loop()
        self._sip, self._sip_in = await loop.create_datagram_endpoint(
            _Inbox, local_addr=("127.0.0.1", 0)
        )
        self._rtp, self._rtp_in = await loop.create_datagram_endpoint(
            _Inbox, local_addr=("127.0.0.1", 0)
        )
        self.port = self._sip.get_extra_info("sockname")[1]
        self.rtp_port = self._rtp.get_extra_info("sockname")[1]
        return self

    def close(self) -> None:
        self._sip.close()
        self._rtp.close()

    def send_raw(self, data: bytes) -> None:
        self._sip.sendto(data, self.server)

    def request(
        self,
        method: str,
        body: bytes = b"",
        branch: str | None = None,
        cseq: int | None = None,
        extra: str = "",
        content_type: str = "application/sdp",
    ) -> tuple[bytes, str]:
        """A request's bytes and its branch (``cseq`` None: the next number)."""
        branch = branch or f"z9hG4bK{secrets.token_hex(6)}"
        if cseq is None:
            self.cseq += 0 if method in ("ACK", "CANCEL") else 1
            cseq = self.cseq
        to = f"<sip:agent@{self.server[0]}>" + (f";tag={self.to_tag}" if self.to_tag else "")
        lines = [
            f"{method} sip:agent@{self.server[0]}:{self.server[1]} SIP/2.0",
            f"Via: SIP/2.0/UDP 127.0.0.1:{self.port};branch={branch};rport",
            "Max-Forwards: 70",
            f"From: <sip:caller@127.0.0.1>;tag={self.tag}",
            f"To: {to}",
            f"Call-ID: {self.call_id}",
            f"CSeq: {cseq} {method}",
            f"Contact: <sip:caller@127.0.0.1:{self.port}>",
        ]
        if body:
            lines.append(f"Content-Type: {content_type}")
        lines.append(f"Content-Length: {len(body)}")
        text = "\r\n".join(lines) + "\r\n" + extra + "\r\n"
        return text.encode() + body, branch

    def send(self, method: str, body: bytes = b"", **kw: object) -> str:
        data, branch = self.request(method, body, **kw)  # type: ignore[arg-type]
        self.send_raw(data)
        return branch

    async def next(self, timeout_s: float = 5.0) -> SipRequest | SipResponse:
        data = await asyncio.wait_for(self._sip_in.queue.get(), timeout_s)
        message = parse(data)
        self.received.append(message)
        return message

    async def response(self, status: int, timeout_s: float = 5.0) -> SipResponse:
        """The next response with ``status`` (others before it are kept in ``received``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            message = await self.next(max(0.01, deadline - time.monotonic()))
            if isinstance(message, SipResponse) and message.status == status:
                invite = message.cseq is not None and message.cseq.method == "INVITE"
                if invite and message.to_tag and status < 300:  # the dialog's tag
                    self.to_tag = message.to_tag
                return message

    async def request_in(self, method: str, timeout_s: float = 5.0) -> SipRequest:
        deadline = time.monotonic() + timeout_s
        while True:
            message = await self.next(max(0.01, deadline - time.monotonic()))
            if isinstance(message, SipRequest) and message.method == method:
                return message

    def answer(self, request: SipRequest, status: int = 200) -> None:
        """Answer a request the server sent (its BYE)."""
        h = request.headers
        lines = [
            f"SIP/2.0 {status} OK",
            *(f"Via: {v}" for v in h.all("via")),
            f"From: {h.get('from')}",
            f"To: {h.get('to')}",
            f"Call-ID: {h.get('call-id')}",
            f"CSeq: {h.get('cseq')}",
            "Content-Length: 0",
        ]
        self.send_raw(("\r\n".join(lines) + "\r\n\r\n").encode())

    # -- RTP --------------------------------------------------------------------

    def send_rtp(self, to: tuple[str, int], packet: rtp.RtpPacket) -> None:
        self._rtp.sendto(rtp.build(packet), to)

    def send_rtp_raw(self, to: tuple[str, int], data: bytes) -> None:
        self._rtp.sendto(data, to)

    async def rtp_packet(self, timeout_s: float = 5.0) -> rtp.RtpPacket:
        return rtp.parse(await asyncio.wait_for(self._rtp_in.queue.get(), timeout_s))
