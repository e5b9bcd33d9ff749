"""One call's RTP: a UDP port of its own, the caller's packets in, the reply's packets out.

In: each datagram is parsed (:mod:`rtp`), checked (the negotiated payload types only; a new
SSRC starts a new stream), put in order (:mod:`jitter`) and then decoded to PCM16 for the
session, or read as a keypad digit (:mod:`dtmf`). Anything else is dropped and counted by
reason (``voxpipe_rtp_dropped_total{reason}``); RTP has no error channel.

Out: the server is the player here, as with WebRTC: a 20 ms clock sends one packet a tick,
the reply's audio while there is some, silence between replies (many trunks and NATs drop a
stream that goes quiet), and tells the session each reply frame that has left (its
playback ack), so a barge-in keeps only what the caller heard and ``end_call`` hangs up once
the goodbye has gone out. A late clock (a stalled loop) restarts instead of bursting.

Where to send: the SDP's address until the caller's first good packet, then that packet's
source (symmetric RTP): a caller behind NAT is reached where it really is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import socket
import time
from typing import Protocol, cast

from voxpipe.audio.buffers import PlayoutBuffer
from voxpipe.transports.sip import rtp
from voxpipe.transports.sip.codecs import FRAME_MS
from voxpipe.transports.sip.dtmf import DtmfReceiver
from voxpipe.transports.sip.jitter import RtpReorderBuffer
from voxpipe.transports.sip.sdp import Negotiated

log = logging.getLogger("voxpipe.sip")

MAX_LATE_S = 0.1  # a clock this far behind restarts
MAX_REPLY_MS = 60_000  # reply audio buffered beyond this is dropped, oldest first
BIND_TRIES = 64


class MediaListener(Protocol):
    """What the call makes of its media."""

    def caller_audio(self, pcm: bytes) -> None: ...

    def caller_digit(self, digit: str) -> None: ...

    def reply_played(self, seq: int) -> None: ...

    def rtp_dropped(self, reason: str) -> None: ...


def bind_rtp(host: str, ports: tuple[int, int]) -> socket.socket:
    """A UDP socket on an even port of ``ports`` (RTP's convention), or any port for (0, 0);
    ``OSError`` when every try is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low, high = ports
    candidates = [0] if (low, high) == (0, 0) else list(range(low + low % 2, high + 1, 2))
    random.shuffle(candidates)
    error: OSError = OSError("the RTP port range is empty")
    for port in candidates[:BIND_TRIES]:
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            error = exc
            continue
        sock.setblocking(False)
        return sock
    raise error


class RtpMedia(asyncio.DatagramProtocol):
    """The RTP of one call, on one socket (:func:`bind_rtp`)."""

    def __init__(
        self,
        sock: socket.socket,
        chosen: Negotiated,
        listener: MediaListener,
        jitter_packets: int,
        max_frame_ms: int,
    ) -> None:
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.chosen = chosen
        self.listener = listener
        self.remote = chosen.remote
        self.codec = chosen.new_codec()
        self.reply = PlayoutBuffer(MAX_REPLY_MS * self.codec.pcm_rate // 1000 * 2)
        self._frame_bytes = self.codec.pcm_rate * FRAME_MS // 1000 * 2  # PCM16 a packet
        self._frame_ticks = self.codec.clock_rate * FRAME_MS // 1000  # RTP clock a packet
        self.jitter = RtpReorderBuffer(jitter_packets)
        self.dtmf = DtmfReceiver()
        self.received = 0
        self._max_payload = self.codec.max_payload(max_frame_ms)
        self._latched = False
        self._ssrc_in: int | None = None
        self._ssrc = secrets.randbits(32)
        self._seq = secrets.randbits(16)
        self._timestamp = secrets.randbits(32)
        self._transport: asyncio.DatagramTransport | None = None
        self._sender: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(lambda: self, sock=self.sock)
        self._sender = loop.create_task(self._send_loop(), name=f"rtp-send-{self.port}")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
        if self._transport is not None:
            self._transport.close()
        else:
            self.sock.close()

    # -- in -------------------------------------------------------------------

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            packet = rtp.parse(data)
        except rtp.BadPacket as exc:
            self.listener.rtp_dropped(exc.reason)
            return
        if packet.payload_type not in (self.chosen.payload_type, self.chosen.dtmf_payload_type):
            self.listener.rtp_dropped("payload_type")
            return
        if packet.ssrc != self._ssrc_in:  # a new stream (or the first): its own sequence
            self._ssrc_in = packet.ssrc
            self.jitter = RtpReorderBuffer(self.jitter.depth)
        if not self._latched:
            self._latched = True
            self.remote = (addr[0], addr[1])
        before = self.jitter.stats.late + self.jitter.stats.duplicate
        for ready in self.jitter.push(packet):
            self._deliver(ready)
        if self.jitter.stats.late + self.jitter.stats.duplicate > before:
            self.listener.rtp_dropped("late_or_duplicate")

    def _deliver(self, packet: rtp.RtpPacket) -> None:
        if packet.payload_type == self.chosen.dtmf_payload_type:
            try:
                digit = self.dtmf.receive(packet.timestamp, packet.payload)
            except rtp.BadPacket as exc:
                self.listener.rtp_dropped(exc.reason)
                return
            if digit is not None:
                self.listener.caller_digit(digit)
            return
        if len(packet.payload) > self._max_payload:
            self.listener.rtp_dropped("too_big")
            return
        try:
            pcm = self.codec.decode(packet.payload)
        except rtp.BadPacket as exc:  # a payload the codec cannot read (Opus)
            self.listener.rtp_dropped(exc.reason)
            return
        self.received += 1
        self.listener.caller_audio(pcm)

    def error_received(self, exc: Exception) -> None:
        log.debug("RTP port %d: %s", self.port, exc)  # ICMP unreachable: the peer's port shut

    # -- out ------------------------------------------------------------------

    async def _send_loop(self) -> None:
        start = time.monotonic()
        ticks = 0
        marker = True
        while True:
            pcm, finished = self.reply.take(self._frame_bytes)
            packet = rtp.RtpPacket(
                self.chosen.payload_type,
                self._seq,
                self._timestamp,
                self._ssrc,
                self.codec.encode(pcm),
                marker,
            )
            if self._transport is not None:
                self._transport.sendto(rtp.build(packet), self.remote)
            marker = False
            self._seq = (self._seq + 1) % 65536
            self._timestamp = (self._timestamp + self._frame_ticks) % (1 << 32)
            for seq in finished:
                self.listener.reply_played(seq)
            ticks += 1
            due = start + ticks * FRAME_MS / 1000
            now = time.monotonic()
            if now - due > MAX_LATE_S:
                start, ticks = now, 0
            elif due > now:
                await asyncio.sleep(due - now)
