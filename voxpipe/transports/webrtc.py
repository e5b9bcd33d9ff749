"""WebRTC (``POST /v1/webrtc/offer``, ``docs/webrtc.md``): Opus audio both ways and a data
channel carrying the native protocol's JSON events, on aiortc.

Decode and encode only, as every transport: the caller's Opus track is decoded by aiortc
and fed to the session as PCM16 at 48 kHz; the session's reply frames (made at 48 kHz) are
played by :class:`~voxpipe.transports.webrtc_media.ReplyTrack`, 20 ms each in real time;
session events go out on the data channel as the same JSON the WebSocket carries, and the
client's events are handled as the WebSocket's are (``native_protocol.ClientEvents``). The
offer's HTTP exchange, readiness, auth and admission live in ``server/webrtc_offers.py``.

Because the server itself is the player of the reply track, it knows when each frame leaves
for the caller and reports it to the session as a playback ack: a barge-in keeps only the
words that were sent to the caller's ear, with no help from the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)
from aiortc.rtcsctptransport import WEBRTC_STRING
from pydantic import BaseModel, ConfigDict, Field

from voxpipe.conversation.events import AudioOut, ErrorCode, ErrorEvent, Event, PlaybackClear
from voxpipe.conversation.hang_up import hang_up
from voxpipe.conversation.saved_state import new_session_id
from voxpipe.observability.logs import PrintableId
from voxpipe.transports.call import Call, CallEnd, Rates, SessionSinks
from voxpipe.transports.native_protocol import (
    ClientEvents,
    TurnOptions,
    merge_turn,
    started_event,
)
from voxpipe.transports.webrtc_media import FRAME_MS, RATE, ReplyTrack, read_caller_audio

log = logging.getLogger("voxpipe.webrtc")

MAX_OFFER_SDP = 64 * 1024
PENDING_EVENTS = 256  # events queued before the data channel opens; the oldest are dropped
INBOX_EVENTS = 64  # client events waiting to be handled; more are refused with an error
CHANNEL_BUFFER_BYTES = 1 << 20  # data channel bytes not yet sent: beyond, a slow consumer
END_FLUSH_S = 0.5  # how long the goodbye error may take to leave


class WebRTCOffer(BaseModel):
    """The body of ``POST /v1/webrtc/offer``: an SDP offer and the session's options (the
    ``session.start`` fields that a WebRTC call can choose: the audio format is Opus)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sdp: str = Field(min_length=1, max_length=MAX_OFFER_SDP)
    type: Literal["offer"]
    session_id: PrintableId | None = None
    instructions: str | None = Field(None, max_length=8000)
    turn: TurnOptions | None = None


class OfferError(Exception):
    """The offer cannot be answered (bad SDP, no audio, no Opus): the HTTP answer is 400."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def event_text(event: Event) -> str:
    return json.dumps(event.to_dict(), separators=(",", ":"))


def _check_text(channel: RTCDataChannel, on_invalid: Callable[[str], None]) -> None:
    """Check a text message is UTF-8 before aiortc decodes it. aiortc decodes inside its DTLS
    receive loop, where the error ends the loop: a traceback in the log and the whole peer
    connection gone. The check wraps the receive of this call's SCTP association only."""
    sctp = channel.transport
    receive = getattr(sctp, "_data_channel_receive", None)
    if receive is None or getattr(receive, "checks_text", False):
        return

    async def checked(stream_id: int, pp_id: int, data: bytes) -> None:
        if pp_id == WEBRTC_STRING and not data.isascii():
            try:
                data.decode()
            except UnicodeDecodeError as exc:
                on_invalid(f"{exc.reason} at byte {exc.start} of {len(data)}")
                return
        await receive(stream_id, pp_id, data)

    checked.checks_text = True  # type: ignore[attr-defined]
    sctp._data_channel_receive = checked  # type: ignore[method-assign]


class WebRTCConnection:
    """One call over one peer connection: answer the offer, then translate until hang-up.

    :meth:`run` returns on a hang-up (``session.end``, the connection closed or failed, or
    never connecting within ``server.start_timeout_s``) and may be cancelled by the server
    (``call.end``); either way its cleanup closes the session and the peer connection.
    """

    def __init__(self, call: Call, offer: WebRTCOffer) -> None:
        turn = merge_turn(call.services.config.turn, offer.turn)  # first: it may raise
        self.call = call
        self.services = call.services
        self.cfg = call.services.config
        self.offer = offer
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.channel: RTCDataChannel | None = None
        self._pending: deque[str] = deque(maxlen=PENDING_EVENTS)
        self._inbox: asyncio.Queue[str | bytes] = asyncio.Queue(INBOX_EVENTS)
        self._hangup = asyncio.Event()
        self._connected = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._cleanup: asyncio.Future[None] | None = None
        self._invalid_text_logged = False
        self.track = ReplyTrack(self.cfg.audio.playback_lead_ms + 1000, self._played, self._dropped)
        self.session = call.open_session(
            offer.session_id or call.principal.session_id or new_session_id(),
            SessionSinks(self.send_event, self.send_audio),
            Rates.both(RATE),
            turn,
            offer.instructions,
        )
        self.events = ClientEvents.of_call(
            call, self.send_event, lambda: self.session, self._on_start
        )

    # -- signalling -----------------------------------------------------------

    async def answer(self) -> str:
        """The SDP answer to the offer; raises :class:`OfferError` for an offer we cannot take."""
        pc = self.pc
        pc.on("track", self._on_track)
        pc.on("datachannel", self._on_datachannel)
        pc.on("connectionstatechange", self._on_state)
        transceiver = pc.addTransceiver(self.track, direction="sendrecv")
        opus = [c for c in RTCRtpSender.getCapabilities("audio").codecs if c.name == "opus"]
        transceiver.setCodecPreferences(opus)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(self.offer.sdp, "offer"))
        except Exception as exc:  # aiortc raises ValueError, OperationError, ... on bad SDP
            raise OfferError(
                ErrorCode.INVALID_EVENT, f"the offer was refused: {type(exc).__name__}: {exc}"
            ) from exc
        kinds = [t.kind for t in pc.getTransceivers() if t.mid is not None]
        if transceiver.mid is None:
            raise OfferError(ErrorCode.INVALID_EVENT, "the offer has no audio section")
        if "video" in kinds:
            raise OfferError(ErrorCode.INVALID_EVENT, "voxpipe takes audio only: drop the video")
        await pc.setLocalDescription(await pc.createAnswer())
        return pc.localDescription.sdp

    def _on_track(self, track: MediaStreamTrack) -> None:
        # No backpressure here: RTP comes at the sender's real-time clock and cannot be
        # slowed, and not reading would only queue it in aiortc, unbounded. Audio the VAD
        # cannot keep up with is dropped by the session's bound, counted, logged and told
        # on the data channel (audio_dropped).
        if track.kind == "audio":
            self._spawn(read_caller_audio(track, self.session.feed), "inbound")

    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        if self.channel is not None:
            channel.close()  # one events channel per call
            return
        self.channel = channel
        _check_text(channel, self._on_invalid_text)
        channel.on("message", self._on_message)
        if channel.readyState == "open":
            self._flush_pending()
        else:
            channel.on("open", self._flush_pending)

    def _on_state(self) -> None:
        state = self.pc.connectionState
        log.debug("call %s: connection %s", self.call.id, state)
        if state == "connected":
            self._connected.set()
        elif state in ("failed", "closed"):
            self._hangup.set()

    def _spawn(self, work: Any, what: str) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            work, name=f"webrtc-{what}-{self.call.id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- sending --------------------------------------------------------------

    async def send_event(self, event: Event) -> None:
        if isinstance(event, PlaybackClear):
            self.track.clear()
        if isinstance(event, ErrorEvent):
            self.services.metrics.errors.labels(event.code).inc()
        self._send_text(event_text(event))

    async def send_audio(self, frame: AudioOut) -> None:
        self.track.push(frame)

    def _send_text(self, text: str) -> None:
        channel = self.channel
        if channel is None or channel.readyState != "open":
            self._pending.append(text)
            return
        if channel.bufferedAmount > CHANNEL_BUFFER_BYTES:
            self._slow_consumer()
            return
        channel.send(text)

    def _flush_pending(self) -> None:
        self._send_text(event_text(started_event(self.services, self.session, FRAME_MS)))
        while self._pending and self.channel is not None and self.channel.readyState == "open":
            self._send_text(self._pending.popleft())

    def _played(self, seq: int) -> None:
        self.session.playback_ack(seq)

    def _dropped(self, seconds: float) -> None:
        self.services.metrics.audio_dropped.labels("outbound", "drop_oldest", "webrtc").inc(seconds)

    def _slow_consumer(self) -> None:
        self.call.slow_consumer(
            f"the client stopped reading its data channel ({CHANNEL_BUFFER_BYTES} bytes wait)"
        )

    async def error(self, code: ErrorCode, message: str) -> None:
        await self.send_event(ErrorEvent.of(code, message))

    # -- receiving ------------------------------------------------------------

    def _on_message(self, message: str | bytes) -> None:
        try:
            self._inbox.put_nowait(message)
        except asyncio.QueueFull:
            self.services.metrics.errors.labels(ErrorCode.INVALID_EVENT).inc()
            self._send_text(
                event_text(
                    ErrorEvent.of(
                        ErrorCode.INVALID_EVENT,
                        f"over {INBOX_EVENTS} events wait to be handled; this one was dropped",
                    )
                )
            )

    def _on_invalid_text(self, detail: str) -> None:
        """A data channel text message that is not UTF-8: dropped with a typed error, as any
        malformed event is (a data channel has no close code for it); logged once per call."""
        if not self._invalid_text_logged:
            self._invalid_text_logged = True
            log.warning("webrtc call %s: a text message is not UTF-8 (%s)", self.call.id, detail)
        self.services.metrics.errors.labels(ErrorCode.INVALID_UTF8).inc()
        self._send_text(
            event_text(
                ErrorEvent.of(
                    ErrorCode.INVALID_UTF8,
                    f"a text message must be UTF-8 ({detail}); this one was dropped",
                )
            )
        )

    async def _read_events(self) -> None:
        while True:
            message = await self._inbox.get()
            if isinstance(message, bytes):
                await self.error(
                    ErrorCode.INVALID_EVENT,
                    "the data channel carries JSON text events; audio goes on the media track",
                )
            elif await self.events.handle(message):  # session.end
                self._hangup.set()
                return

    async def _on_start(self, payload: dict[str, Any]) -> None:
        await self.error(
            ErrorCode.ALREADY_STARTED,
            "a WebRTC session starts with its offer; send session.update to change it",
        )

    # -- lifetime -------------------------------------------------------------

    async def run(self) -> None:
        self._spawn(self._read_events(), "events")
        try:
            timeout = self.cfg.server.start_timeout_s
            try:
                await asyncio.wait_for(self._wait_connected(), timeout)
            except TimeoutError:
                log.info("call %s: no WebRTC connection in %.0f s", self.call.id, timeout)
                self.services.metrics.errors.labels(ErrorCode.START_TIMEOUT).inc()
                return
            if not self._hangup.is_set():
                self.session.greet()  # the agent's greeting, if it has one
            await self._hangup.wait()
        finally:
            await self.close()

    async def _wait_connected(self) -> None:
        waits = [asyncio.ensure_future(e.wait()) for e in (self._connected, self._hangup)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def close(self) -> None:
        """Stop everything this call started. Safe to call again, and to cancel: the cleanup
        runs to its end once begun, and every caller waits for the same one."""
        if self._cleanup is None:
            self._cleanup = asyncio.ensure_future(self._close())
        await asyncio.shield(self._cleanup)

    async def _close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ended = self.call.ended
        if ended is not None:
            await self._say_goodbye(ended)
        await hang_up(self.session)
        self.track.stop()
        with contextlib.suppress(Exception):
            await self.pc.close()

    async def _say_goodbye(self, ended: CallEnd) -> None:
        """Tell the caller why the server ends the call, if its channel is still there."""
        channel = self.channel
        if channel is None or channel.readyState != "open":
            return
        sent = asyncio.Event()
        channel.once("bufferedamountlow", sent.set)  # fires when the buffer drains to 0
        channel.send(event_text(ErrorEvent.of(ended.code, ended.message)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sent.wait(), END_FLUSH_S)
