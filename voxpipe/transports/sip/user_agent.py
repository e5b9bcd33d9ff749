"""The SIP user agent: the listening sockets (UDP and TCP), and what each request gets.

Requests, once parsed and checked (:mod:`message`):

- INVITE: a new call is negotiated (:mod:`sdp`; 400 bad SDP, 488 no common codec), admitted
  by the server (:class:`CallDoor`: 503 with Retry-After when it is not ready, full or
  draining, so a trunk or Kamailio tries elsewhere), given an RTP port (503 when none is
  free), answered ``100 Trying`` and handed to a :class:`~voxpipe.transports.sip.call.SipCall`;
  the same INVITE again (UDP re-sends it) gets the last answer again, not a second call; an
  INVITE inside a call (a re-INVITE: a refresh or a hold) gets our answer again;
- ACK confirms the call (never answered); BYE ends it (200, or 481 for no such call);
  CANCEL ends a ringing call (200 to it, 487 to the INVITE) or, answered already, changes
  nothing; NOTIFY in a call (how the call our REFER asked for went) is 200; OPTIONS (a trunk's
  keep-alive, a dispatcher's probe) is 200, or 503 while a call would be refused; other
  methods 405 with Allow;
- a request that repeats one answered in the last :data:`RECENT_S` seconds (a re-sent BYE
  whose 200 was lost) gets the same answer again (:class:`RecentResponses`).

Bad input never reaches a call: a message that is no SIP, or lacks a header every request
needs, is answered 400 (to its source, with whatever of its headers could be read), and
every error answer is counted (``voxpipe_sip_refused_total{status}``) and logged (the first
:data:`LOGGED_REFUSALS`; then counted only). Nothing here takes the server down: one bad
packet is one refusal.

With ``sip.registrar`` set, the user agent also keeps a registration there
(:mod:`registration`), so that a trunk sends its calls here; calls it places go out
through :meth:`SipUserAgent.dial` (:mod:`outbound`).

Responses go back where the request came from (its UDP source, its TCP connection), as
RFC 3581's rport asks, which also reaches a caller behind NAT.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Coroutine
from typing import Any, Protocol

from voxpipe.config import SipConfig
from voxpipe.observability.metrics import Metrics
from voxpipe.transports.call import Call, CallEnd
from voxpipe.transports.sip import sdp
from voxpipe.transports.sip.call import ALLOW, SipCall
from voxpipe.transports.sip.dialog import CallState, Dialog, Flow, TcpFlow, UdpFlow
from voxpipe.transports.sip.media import bind_rtp
from voxpipe.transports.sip.message import (
    Headers,
    RecentResponses,
    SipError,
    SipRequest,
    SipResponse,
    new_tag,
    parse,
    response,
)
from voxpipe.transports.sip.outbound import DialFailed, OutboundCall, Target, target_for
from voxpipe.transports.sip.registration import Registration

log = logging.getLogger("voxpipe.sip")

LOGGED_REFUSALS = 50  # refusals logged since start; later ones only counted
TCP_IDLE_S = 300.0  # a TCP connection with nothing said for this long is closed
CONNECT_TIMEOUT_S = 5.0  # a call we place: resolving its host, opening its TCP connection


class CallDoor(Protocol):
    """The server's side of a SIP call (``server/sip_calls.py``): admission and lifetime."""

    def admit(self) -> Call | CallEnd:
        """A slot for a new call, or why not (not ready, at capacity, draining)."""
        ...

    def refusing(self) -> CallEnd | None:
        """Why a new call would be refused now (an OPTIONS probe's 503), None if it would not."""
        ...

    def release(self, call: Call) -> None:
        """Give back the slot of an admitted call that will never run."""
        ...

    def run(self, call: Call, serving: Coroutine[Any, Any, None]) -> None:
        """Serve ``call`` (``serving`` is its life) under the server's watch."""
        ...


class SipUserAgent:
    """Listens on ``sip.host:sip.port`` and answers calls through the server's door."""

    def __init__(self, config: SipConfig, door: CallDoor, metrics: Metrics) -> None:
        self.config = config
        self.door = door
        self.metrics = metrics
        self.calls: dict[str, SipCall] = {}  # by Call-ID
        self.recent = RecentResponses()
        self.refusals = 0
        self.addresses: list[tuple[str, str, int]] = []  # (transport, host, port) listened on
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.registration: Registration | None = None  # with a trunk (sip.registrar)

    # -- the sockets --------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        port = self.config.port
        if "udp" in self.config.transports:
            udp, _ = await loop.create_datagram_endpoint(
                lambda: _UdpProtocol(self), local_addr=(self.config.host, port)
            )
            self._udp = udp
            port = udp.get_extra_info("sockname")[1]  # port 0: TCP takes the same one
            self.addresses.append(("udp", self.config.host, port))
        if "tcp" in self.config.transports:
            self._tcp = await asyncio.start_server(self._serve_tcp, self.config.host, port)
            port = self._tcp.sockets[0].getsockname()[1]
            self.addresses.append(("tcp", self.config.host, port))
        if self.config.registrar is not None:
            self.registration = Registration(self.config, self._flow_to, self._local_host)
            self.registration.start()

    async def close(self) -> None:
        """Stop listening (a registration removed first); the calls themselves are ended by
        the server (their tasks)."""
        if self.registration is not None:
            await self.registration.close()
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._tcp is not None:
            await self._tcp.wait_closed()

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")[:2]
        await self._tcp_loop(
            reader, writer, TcpFlow(writer, peer, writer.get_extra_info("sockname")[:2])
        )

    async def _tcp_loop(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flow: TcpFlow
    ) -> None:
        """Every message on one TCP connection (one we accepted, or one a call we placed or
        the registration opened) until it closes, or is idle for :data:`TCP_IDLE_S` while no
        call or registration needs it (a long call's BYE goes out on it)."""
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                try:
                    data = await asyncio.wait_for(self._read_tcp(reader, flow), TCP_IDLE_S)
                except TimeoutError:
                    if self._needed(flow):
                        continue
                    return
                if data is None:
                    return
                self.received(data, flow)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _needed(self, flow: Flow) -> bool:
        """A call's signalling, or the registration's, goes over ``flow``."""
        if any(call.dialog.flow is flow for call in self.calls.values()):
            return True
        return self.registration is not None and self.registration.flow is flow

    async def _read_tcp(self, reader: asyncio.StreamReader, flow: TcpFlow) -> bytes | None:
        """One message off a TCP stream, framed by its Content-Length; None: closed, or a
        message too big to frame (answered 413 first)."""
        head = b""
        while not head.strip(b"\r\n"):  # keep-alive blank lines between messages (RFC 5626)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                self._refuse(flow, Headers(), 413, "the message head is too big")
                return None
            if not head:
                return None
        head = head.lstrip(b"\r\n")
        if len(head) > self.config.max_message_bytes:
            self._refuse(flow, Headers(), 413, "the message head is too big")
            return None
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() in (b"content-length", b"l"):
                length = int(value.strip()) if value.strip().isdigit() else -1
        if not 0 <= length <= self.config.max_message_bytes:
            self._refuse(flow, Headers(), 400 if length < 0 else 413, "a bad Content-Length")
            return None
        return head + await reader.readexactly(length)

    def datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self._udp is not None
        if not data.strip(b"\r\n\0 "):
            return  # a keep-alive
        flow = UdpFlow(self._udp, (addr[0], addr[1]), self._udp.get_extra_info("sockname")[:2])
        if len(data) > self.config.max_message_bytes:
            self._refuse(flow, Headers(), 413, f"over {self.config.max_message_bytes} bytes")
            return
        self.received(data, flow)

    # -- calls we place ---------------------------------------------------------------

    async def dial(self, admitted: Call, to: str, instructions: str | None = None) -> OutboundCall:
        """A call to ``to`` (a SIP URI; a number: at the trunk registered with), ready to run
        (its INVITE is sent by its :meth:`~voxpipe.transports.sip.outbound.OutboundCall.run`);
        :class:`DialFailed` when ``to`` cannot be called from here (400), its host is unknown
        (404) or unreachable, or no socket or RTP port is free (503)."""
        target = target_for(to, self.config)
        flow = await self._flow_to(target)
        try:
            rtp_socket = bind_rtp(self.config.host, self.config.rtp_port_range)
        except OSError as exc:
            flow.close()
            raise DialFailed(503, f"no RTP port free: {exc}") from exc
        host = self._local_host(flow)
        call = OutboundCall.to(target, admitted, flow, host, rtp_socket, self._forget, instructions)
        self.calls[call.call_id] = call
        return call

    async def _flow_to(self, target: Target) -> UdpFlow | TcpFlow:
        """Our UDP socket pointed at ``target``, or a new TCP connection to it (whose
        messages are read as any other connection's)."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                found = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_DGRAM)
        except (OSError, TimeoutError) as exc:
            raise DialFailed(404, f"{target.host[:80]} cannot be resolved: {exc}") from exc
        peer = (str(found[0][4][0]), int(found[0][4][1]))
        if target.transport == "udp":
            if self._udp is None:
                raise DialFailed(503, "SIP over UDP is not listened on (sip.transports)")
            return UdpFlow(self._udp, peer, self._udp.get_extra_info("sockname")[:2])
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(*peer)
        except (OSError, TimeoutError) as exc:
            raise DialFailed(503, f"no TCP connection to {peer[0]}:{peer[1]}: {exc}") from exc
        flow = TcpFlow(writer, peer, writer.get_extra_info("sockname")[:2])
        reading = loop.create_task(
            self._tcp_loop(reader, writer, flow), name=f"sip-tcp-{peer[0]}:{peer[1]}"
        )
        self._connections.add(reading)  # closed with the user agent
        return flow

    # -- messages -----------------------------------------------------------------

    def received(self, data: bytes, flow: Flow) -> None:
        """One message from ``flow``: whatever it is, it is answered or dropped here."""
        try:
            self._received(data, flow)
        except Exception:  # a bug of ours: this message fails, the user agent goes on
            log.exception("sip %s from %s:%d: the message failed", flow.transport, *flow.peer)
            self.metrics.sip_refused.labels("500").inc()

    def _received(self, data: bytes, flow: Flow) -> None:
        try:
            message = parse(data)
            if isinstance(message, SipResponse):
                self._response(message)
                return
            message.check()
        except SipError as exc:
            if not data.startswith((b"ACK ", b"SIP/2.0 ")):  # an ACK or response: no answer
                self._refuse(flow, exc.headers or Headers(), exc.status, exc.detail)
            else:
                self._count(exc.status, exc.detail, flow)
            return
        self._request(message, flow)

    def _request(self, request: SipRequest, flow: Flow) -> None:
        if request.method == "ACK":
            call = self.calls.get(request.call_id)
            if call is not None and request.to_tag == call.dialog.local_tag:
                call.acked()
            return  # an ACK for an error answer, or for no call: nothing to do
        again = self.recent.get(request)
        if again is not None:
            flow.send(again)  # a re-sent request: the same answer
            return
        if request.method == "INVITE":
            self._invite(request, flow)
        elif request.method == "BYE":
            self._bye(request, flow)
        elif request.method == "CANCEL":
            self._cancel(request, flow)
        elif request.method == "NOTIFY":
            self._notify(request, flow)
        elif request.method == "OPTIONS":
            self._options(request, flow)
        else:
            why = f"{request.method[:32]} is not supported"
            self._refuse(flow, request.headers, 405, why, request, (("Allow", ALLOW),))

    def _invite(self, request: SipRequest, flow: Flow) -> None:
        call = self.calls.get(request.call_id)
        if call is not None:
            if request.to_tag == call.dialog.local_tag:  # a re-INVITE: we keep our answer
                self._respond(flow, request, 200, call.dialog.local_tag, call.answer_sdp)
            elif request.branch == call.dialog.invite.branch:  # the INVITE again
                flow.send(call.last_response)
            else:
                self._refuse(flow, request.headers, 482, "a second INVITE for a call", request)
            return
        if request.to_tag is not None:
            self._refuse(flow, request.headers, 481, "a re-INVITE for no call", request)
            return
        required = request.headers.get("require")
        if required:  # no extension is supported (100rel, timer, ...)
            why = f"no extension is supported: {required[:64]}"
            self._refuse(flow, request.headers, 420, why, request, (("Unsupported", required),))
            return
        try:
            if request.content_type != "application/sdp" or not request.body:
                raise SipError(488, "the INVITE carries no SDP offer (application/sdp)")
            offer = sdp.parse_offer(request.body)
            chosen = sdp.negotiate(offer, self.config.codecs)
        except SipError as exc:
            self._refuse(flow, request.headers, exc.status, exc.detail, request)
            return
        self._start_call(request, flow, offer, chosen)

    def _start_call(
        self, request: SipRequest, flow: Flow, offer: sdp.MediaOffer, chosen: sdp.Negotiated
    ) -> None:
        admitted = self.door.admit()
        if isinstance(admitted, CallEnd):
            self._refuse(
                flow, request.headers, 503, admitted.message, request, (("Retry-After", "1"),)
            )
            return
        host = self._local_host(flow)
        try:
            rtp_socket = bind_rtp(self.config.host, self.config.rtp_port_range)
        except OSError as exc:
            self.door.release(admitted)
            self._refuse(flow, request.headers, 503, f"no RTP port free: {exc}", request)
            return
        dialog = Dialog.of(request, new_tag(), host, flow)
        answer = sdp.answer(offer, chosen, host, rtp_socket.getsockname()[1])
        call = SipCall(admitted, dialog, rtp_socket, chosen, answer, self._forget)
        self.calls[request.call_id] = call
        call.respond(100)
        self.door.run(admitted, call.run())

    def _forget(self, call: SipCall) -> None:
        """A call is over: the last answer to its INVITE stays for a re-sent one."""
        if self.calls.get(call.call_id) is call:
            del self.calls[call.call_id]
            if call.last_response:  # a call we answered
                self.recent.put(call.dialog.invite, call.last_response)

    def _bye(self, request: SipRequest, flow: Flow) -> None:
        call = self.calls.get(request.call_id)
        tags = call is not None and request.to_tag == call.dialog.local_tag
        if call is None or not tags or call.state is CallState.RINGING:
            self._refuse(flow, request.headers, 481, "a BYE for no call", request)
            return
        self._respond(flow, request, 200, call.dialog.local_tag)
        call.bye_received()

    def _options(self, request: SipRequest, flow: Flow) -> None:
        """A probe (a trunk's, Kamailio's dispatcher's): 200 while a call would be taken, 503
        while not (loading, full, draining), so a dispatcher sends calls elsewhere first."""
        refusing = self.door.refusing()
        if refusing is not None:
            retry = (("Retry-After", "1"),)
            self._refuse(flow, request.headers, 503, refusing.message, request, retry)
            return
        self._respond(flow, request, 200, extra=(("Allow", ALLOW), ("Accept", "application/sdp")))

    def _notify(self, request: SipRequest, flow: Flow) -> None:
        """A NOTIFY in a call: how the call our REFER asked for is going."""
        call = self.calls.get(request.call_id)
        if call is None or request.to_tag != call.dialog.local_tag:
            self._refuse(flow, request.headers, 481, "a NOTIFY for no call", request)
            return
        self._respond(flow, request, 200, call.dialog.local_tag)
        call.notified(request.body)

    def _cancel(self, request: SipRequest, flow: Flow) -> None:
        call = self.calls.get(request.call_id)
        if call is None or request.branch != call.dialog.invite.branch:
            self._refuse(flow, request.headers, 481, "a CANCEL for no INVITE", request)
            return
        self._respond(flow, request, 200, call.dialog.local_tag)
        call.cancelled()

    def _response(self, message: SipResponse) -> None:
        call = self.calls.get(message.call_id)
        if call is not None:
            call.response_received(message)
        elif self.registration is not None and message.call_id == self.registration.call_id:
            self.registration.response_received(message)

    # -- responses ------------------------------------------------------------------

    def _respond(
        self,
        flow: Flow,
        request: SipRequest,
        status: int,
        to_tag: str | None = None,
        body: bytes = b"",
        reason: str | None = None,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> None:
        out = response(request.headers, status, to_tag or new_tag(), reason, self.config.user_agent)
        for name, value in extra:
            out.add(name, value)
        if body:
            out.add("Contact", f"<sip:voxpipe@{self._local_host(flow)}:{flow.local[1]}>")
            out.body, out.content_type = body, "application/sdp"
        data = out.encode()
        self.recent.put(request, data)
        flow.send(data)

    def _refuse(
        self,
        flow: Flow,
        headers: Headers,
        status: int,
        detail: str,
        request: SipRequest | None = None,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """An error answer, with the reason in a Warning header; counted and logged."""
        self._count(status, detail, flow)
        out = response(headers, status, new_tag(), None, self.config.user_agent)
        for name, value in extra:
            out.add(name, value)
        if detail:
            text = detail.replace('"', "'").replace("\r", " ").replace("\n", " ")[:200]
            out.add("Warning", f'399 voxpipe "{text}"')
        data = out.encode()
        if request is not None:
            self.recent.put(request, data)
        flow.send(data)

    def _count(self, status: int, detail: str, flow: Flow) -> None:
        self.metrics.sip_refused.labels(str(status)).inc()
        self.refusals += 1
        if self.refusals <= LOGGED_REFUSALS:
            log.warning("sip %s from %s:%d: %d %s", flow.transport, *flow.peer, status, detail)
        if self.refusals == LOGGED_REFUSALS:
            log.warning("sip: further refusals are only counted (voxpipe_sip_refused_total)")

    def _local_host(self, flow: Flow) -> str:
        """The address the caller reaches us at: ``sip.public_address``, the listening
        address, or (listening on all) the one the route to the caller leaves from."""
        if self.config.public_address:
            return self.config.public_address
        host = flow.local[0]
        if not ipaddress.ip_address(host).is_unspecified:
            return host
        family = socket.AF_INET6 if ":" in flow.peer[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(flow.peer)  # no packet leaves: the kernel picks the route
            return str(probe.getsockname()[0])


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, agent: SipUserAgent) -> None:
        self.agent = agent

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.agent.datagram(data, addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("sip udp: %s", exc)
