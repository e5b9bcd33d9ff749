"""One SIP call: its dialog's state, its RTP, and the session it speaks for.

Translation only, as every transport: the caller's RTP audio is fed to the session, its
telephone-events are the session's key presses, the reply's frames go out on RTP; the
session's ``playback.clear`` drops what is not yet sent, its ``call.ended`` (the agent's
``end_call``, once the goodbye has been sent) becomes our BYE. Turn-taking, barge-in and the
keypad's turns stay in the session.

:meth:`SipCall.run` is the call's whole life, in one task the server starts
(``server/sip_calls.py``): set up (here: ring, answer, the 200 OK re-sent over UDP until the
ACK; a call we place, :class:`~voxpipe.transports.sip.outbound.OutboundCall`, dials
instead), greet, then wait for the end: the other side's BYE or CANCEL, the agent's hang-up,
no ACK in time, or the server ending it (idle, maximum duration, drain: the task is
cancelled). Its cleanup always runs: the session closed, the RTP socket shut, a BYE sent if
the dialog is still up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Callable

from voxpipe.conversation.events import (
    AudioOut,
    ErrorCode,
    ErrorEvent,
    Event,
)
from voxpipe.conversation.hang_up import hang_up
from voxpipe.conversation.saved_state import new_session_id
from voxpipe.conversation.session import Session
from voxpipe.transports.base import act_on_line
from voxpipe.transports.call import Call, Rates, SessionSinks
from voxpipe.transports.sip.dialog import NEXT, CallState, Dialog
from voxpipe.transports.sip.media import RtpMedia
from voxpipe.transports.sip.message import SipResponse, host_port, response, uri_of
from voxpipe.transports.sip.sdp import Negotiated

log = logging.getLogger("voxpipe.sip")

T1_S = 0.5  # RFC 3261's round-trip estimate: the first re-send of a 200 OK or a BYE
T2_S = 4.0  # the longest gap between re-sends
BYE_TIMEOUT_S = 4.0  # how long our BYE waits for its response before the call is over anyway
DIGITS = 32  # key presses waiting for the session; more are dropped
REFER_TIMEOUT_S = 8.0  # how long our REFER waits for its response
TRANSFER_TIMEOUT_S = 30.0  # how long a transfer waits for the new call to be answered
ALLOW = "INVITE, ACK, BYE, CANCEL, OPTIONS, NOTIFY"
_SIPFRAG = re.compile(r"^SIP/2\.0 ([1-6][0-9]{2})\b")


class TransferFailed(Exception):
    """The REFER was refused, or the call it asked for failed."""


def refer_uri(target: str, remote: str) -> str:
    """Where a REFER sends the caller: ``target`` as it is if it is a URI (``sip:``,
    ``sips:``, ``tel:``), else a number at the host the call came from (the trunk)."""
    if re.match(r"^(sips?|tel):", target):
        return target
    where = host_port(remote)
    host = where[0] if where else "invalid"
    return f"sip:{target}@{f'[{host}]' if ':' in host else host}"


def _sipfrag_status(body: bytes) -> int | None:
    match = _SIPFRAG.match(body.decode("utf-8", "replace").strip())
    return int(match[1]) if match else None


class SipCall:
    """A call the user agent took (its INVITE checked, its offer negotiated, its RTP port
    bound) and the server admitted."""

    def __init__(
        self,
        call: Call,
        dialog: Dialog,
        rtp_socket: socket.socket,
        chosen: Negotiated,
        answer_sdp: bytes,
        forget: Callable[[SipCall], None],
    ) -> None:
        config = call.services.config
        self.call = call
        self.dialog = dialog
        self.heard = CallerMedia(self)
        self.output = SessionOutput(self)
        self.media = RtpMedia(
            rtp_socket, chosen, self.heard, config.sip.jitter_packets, config.audio.max_frame_ms
        )
        self.instructions: str | None = None  # the session's own (a call we place may say)
        self.answer_sdp = answer_sdp
        self.config = config.sip
        self.metrics = call.services.metrics
        self.state = CallState.RINGING
        self.why = ""  # why it ended, for the log
        self.last_response: bytes = b""  # re-sent for a re-sent INVITE
        self.session: Session | None = None
        self._forget = forget
        self._acked = asyncio.Event()
        self._over = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._responded: dict[int, asyncio.Event] = {}  # our requests, by CSeq: responded
        self._statuses: dict[int, int] = {}  # their final responses' status
        self._resends: set[asyncio.Task[None]] = set()  # our requests re-sent over UDP
        self._bye_responded: asyncio.Event | None = None
        self._transferred = asyncio.Event()  # a NOTIFY said how the REFER's call went
        self._transfer_status = 0

    @property
    def call_id(self) -> str:
        return self.dialog.call_id

    def _set_state(self, state: CallState, why: str = "") -> bool:
        """The one place the state changes; a move the table does not allow is refused."""
        if state not in NEXT[self.state]:
            return False
        log.info("sip call %s: %s -> %s %s", self.call_id, self.state.value, state.value, why)
        self.state = state
        if state is CallState.CONFIRMED:
            self._acked.set()
        if state is CallState.TERMINATED:
            self.why = why
            self._over.set()
        return True

    # -- signalling in (from the user agent) ----------------------------------

    def respond(self, status: int, body: bytes = b"", reason: str | None = None) -> bytes:
        """Answer the INVITE; the bytes are kept for a re-sent INVITE."""
        out = response(
            self.dialog.invite.headers,
            status,
            self.dialog.local_tag if status > 100 else None,
            reason,
            self.config.user_agent,
        )
        if status < 300 and status > 100:
            out.add("Contact", self.dialog.contact())
        if status == 200:
            out.add("Allow", ALLOW)
            out.body, out.content_type = body, "application/sdp"
        data = out.encode()
        self.last_response = data
        self.dialog.flow.send(data)
        return data

    def acked(self) -> None:
        self._set_state(CallState.CONFIRMED, "(ACK)")

    def cancelled(self) -> bool:
        """CANCEL: ends a call still ringing (487 to its INVITE); True if it did."""
        if self.state is not CallState.RINGING:
            return False
        self.respond(487)
        return self._set_state(CallState.TERMINATED, "(CANCEL: the caller gave up)")

    def bye_received(self) -> None:
        self._set_state(CallState.TERMINATED, "(BYE: the caller hung up)")

    def response_received(self, message: SipResponse) -> None:
        """A response to our BYE or REFER: a final one ends its wait."""
        cseq = message.cseq
        responded = self._responded.get(cseq.number) if cseq is not None else None
        if cseq is not None and responded is not None and message.status >= 200:
            self._statuses.setdefault(cseq.number, message.status)
            responded.set()

    def notified(self, body: bytes) -> None:
        """A NOTIFY of our REFER's progress (RFC 3515): its body is the new call's status
        line (``SIP/2.0 200 OK``); a final one ends the transfer's wait."""
        status = _sipfrag_status(body)
        if status is not None and status >= 200 and not self._transferred.is_set():
            self._transfer_status = status
            self._transferred.set()

    # -- the call's life --------------------------------------------------------

    async def run(self) -> None:
        try:
            if not await self._set_up():
                return
            assert self.session is not None
            self.session.greet()  # the agent's greeting, if it has one
            self._spawn(self.heard.press_keys(self.session), "keys")
            await self._over.wait()
        finally:
            await self._close()

    async def _set_up(self) -> bool:
        """Ring, answer, wait for the ACK; True once the call is up."""
        await self._answer()
        if self.state is CallState.TERMINATED:
            return False
        try:
            await asyncio.wait_for(self._acked.wait(), self.config.ack_timeout_s)
        except TimeoutError:
            self.metrics.sip_refused.labels("ack_timeout").inc()
            self._hang_up_ours(f"(no ACK in {self.config.ack_timeout_s:g} s)")
            return False
        return True

    async def _answer(self) -> None:
        self.respond(180)
        if self.config.ring_ms:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._over.wait(), self.config.ring_ms / 1000)
            if self.state is CallState.TERMINATED:  # CANCEL while ringing
                return
        await self._start_media(self.dialog.invite.headers.get("from") or "")
        self.respond(200, self.answer_sdp)
        self._set_state(CallState.ANSWERED)
        if not self.dialog.flow.reliable:
            self._spawn(self._resend_until(self._acked, self.last_response), "resend-200")

    async def _start_media(self, other_party: str) -> None:
        """The session (the other party's URI is its caller, as tools see it) and the RTP."""
        self.session = self.call.open_session(
            new_session_id(),
            SessionSinks(self.output.send_event, self.output.send_audio),
            Rates.both(self.media.codec.pcm_rate),
            instructions=self.instructions,
            caller=_caller_uri(other_party),
        )
        await self.media.start()
        log.info(
            "sip call %s up: session %s, %s pt %d (keys pt %s), RTP %d <-> %s:%d",
            self.call_id,
            self.session.id,
            self.media.chosen.codec,
            self.media.chosen.payload_type,
            self.media.chosen.dtmf_payload_type,
            self.media.port,
            *self.media.remote,
        )

    async def _resend_until(self, done: asyncio.Event, data: bytes) -> None:
        """Re-send ``data`` over UDP at T1, 2 T1, ... (at most T2 apart) until ``done``."""
        wait = T1_S
        while not done.is_set():  # bounded by the ACK's timeout, or by our BYE's
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), wait)
            if not done.is_set():
                self.dialog.flow.send(data)
                wait = min(2 * wait, T2_S)

    def _hang_up_ours(self, why: str) -> None:
        """We end a call that is up: a BYE goes out (and its response is awaited in cleanup)."""
        if self.state in (CallState.ANSWERED, CallState.CONFIRMED):
            self._set_state(CallState.TERMINATED, why)
            self._send_bye()

    def _send_bye(self) -> None:
        self._bye_responded = self._send_request("BYE")

    def _send_request(self, method: str, *headers: tuple[str, str]) -> asyncio.Event:
        """One of our in-dialog requests, re-sent over UDP until answered; the event is set
        by its final response (whose status is then in ``_statuses``)."""
        out = self.dialog.request(method, self.config.user_agent)
        for name, value in headers:
            out.add(name, value)
        responded = self._responded[self.dialog.cseq] = asyncio.Event()
        data = out.encode()
        self._resend(data, responded, method)
        return responded

    def _resend(self, data: bytes, done: asyncio.Event, method: str) -> None:
        """Send ``data``; over UDP again at T1, 2 T1 ... until ``done`` (or the call's end)."""
        self.dialog.flow.send(data)
        if not self.dialog.flow.reliable:
            task = asyncio.get_running_loop().create_task(
                self._resend_until(done, data), name=f"sip-{method}-{self.call.id}"
            )
            self._resends.add(task)
            task.add_done_callback(self._resends.discard)

    async def _transfer(self, target: str) -> None:
        """Blind transfer by REFER (RFC 3515): the caller's side is asked to call ``target``;
        once its NOTIFY says that call was answered, we hang up. A refusal, a failed call or
        no word in time: the call goes on here, the error counted and logged."""
        refer_to = refer_uri(target, self.dialog.remote_target)
        responded = self._send_request(
            "REFER", ("Refer-To", f"<{refer_to}>"), ("Referred-By", self.dialog.contact())
        )
        cseq = self.dialog.cseq
        try:
            await asyncio.wait_for(responded.wait(), REFER_TIMEOUT_S)
            if self._statuses[cseq] >= 300:
                raise TransferFailed(f"the REFER was answered {self._statuses[cseq]}")
            await asyncio.wait_for(self._transferred.wait(), TRANSFER_TIMEOUT_S)
            if self._transfer_status >= 300:
                raise TransferFailed(f"the new call failed: {self._transfer_status}")
        except (TimeoutError, TransferFailed) as exc:
            why = str(exc) or "no answer in time"
            self.metrics.errors.labels(ErrorCode.TRANSFER_FAILED).inc()
            log.error("sip call %s: the transfer to %s failed: %s", self.call_id, refer_to, why)
            return
        log.info("sip call %s: transferred to %s", self.call_id, refer_to)
        self._hang_up_ours(f"(transferred to {refer_to})")

    async def _close(self) -> None:
        """Everything this call started stops; a dialog still up is ended with our BYE."""
        if self.state is CallState.RINGING:  # the server ended it before the answer
            self._end_unanswered()
        elif self.state is not CallState.TERMINATED:  # idle, max duration, drain, end_call
            self._set_state(CallState.TERMINATED, "(the server ended the call)")
            self._send_bye()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            if self.session is not None:
                await hang_up(self.session)
            await self.media.close()
            if self._bye_responded is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._bye_responded.wait(), BYE_TIMEOUT_S)
        finally:
            resends = list(self._resends)
            for task in resends:
                task.cancel()
            await asyncio.gather(*resends, return_exceptions=True)
            self._forget(self)
            log.info(
                "sip call %s ended %s: %d RTP packets in",
                self.call_id,
                self.why,
                self.media.received,
            )

    def _end_unanswered(self) -> None:
        """The server ends a call before it is answered: our 503 to the INVITE."""
        self.respond(503, reason="Service Unavailable")
        self._set_state(CallState.TERMINATED, "(ended before the answer)")

    def _spawn(self, work: object, what: str) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            work,  # type: ignore[arg-type]
            name=f"sip-{what}-{self.call.id}",
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class CallerMedia:
    """What the call's RTP (:class:`~voxpipe.transports.sip.media.RtpMedia`, whose listener
    this is) hears, for the call's session: the caller's audio (once the call is answered,
    until it ends), key presses in order, the reply frames sent as playback acks; what RTP
    drops, counted."""

    def __init__(self, call: SipCall) -> None:
        self.call = call
        self._digits: asyncio.Queue[str] = asyncio.Queue(DIGITS)

    def caller_audio(self, pcm: bytes) -> None:
        """The caller may speak once our 200 is out, before its ACK reaches us."""
        session = self.call.session
        if session is not None and self.call.state is not CallState.TERMINATED:
            session.feed(pcm)

    def caller_digit(self, digit: str) -> None:
        try:
            self._digits.put_nowait(digit)
        except asyncio.QueueFull:
            self.rtp_dropped("dtmf_overflow")

    def reply_played(self, seq: int) -> None:
        if self.call.session is not None:
            self.call.session.playback_ack(seq)

    def rtp_dropped(self, reason: str) -> None:
        self.call.metrics.rtp_dropped.labels(reason).inc()

    async def press_keys(self, session: Session) -> None:
        """Key presses to the session's keypad (``conversation/keypad.py``), in order."""
        while True:
            digit = await self._digits.get()
            self.call.metrics.dtmf.labels(digit).inc()
            log.info("sip call %s: DTMF %s", self.call.call_id, digit)
            await session.keypad.pressed(digit)


class SessionOutput:
    """What the call's session sends it: reply audio to the RTP, and its events done to the
    dialog (a :class:`~voxpipe.transports.base.PhoneLine`: SIP has no channel for them)."""

    def __init__(self, call: SipCall) -> None:
        self.call = call

    async def send_event(self, event: Event) -> None:
        await act_on_line(self, event, self.call.metrics.errors)

    async def send_audio(self, frame: AudioOut) -> None:
        self.call.media.reply.push(frame.seq, frame.pcm)

    def clear_playback(self) -> None:
        self.call.media.reply.clear()

    async def end_call(self, reason: str) -> None:
        log.info("sip call %s: %s", self.call.call_id, reason)
        self.call._hang_up_ours(f"(end_call: {reason})")

    async def transfer(self, target: str) -> None:
        """The REFER's answer and the new call's NOTIFY take seconds: the session goes on."""
        self.call._spawn(self.call._transfer(target), "transfer")

    def warn(self, error: ErrorEvent) -> None:
        log.warning("sip call %s: %s: %s", self.call.call_id, error.code, error.message)


def _caller_uri(from_value: str) -> str | None:
    """The caller's SIP URI from the INVITE's From (tools see it as the caller)."""
    return uri_of(from_value)[:256] or None
