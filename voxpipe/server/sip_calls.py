"""SIP calls as the server holds them: the user agent started and stopped with the server,
and each call admitted and watched like any other.

A SIP call is signalled on the user agent's own sockets and lives on RTP, so, like a WebRTC
call (``webrtc_offers.py``), it cannot ride the WebSocket lifecycle; it gets the same door:
readiness, then admission (at capacity or draining: refused, the user agent answers 503),
and the same lifetime (``lifecycle.run_call``: the idle and maximum-duration watchdog, drain,
shutdown). SIP has no credentials of ours: the principal is anonymous, and the operator
opens the port to the trunk's addresses only (``docs/sip.md``).

A call we place (``POST /v1/calls`` with ``provider: sip``, ``server/outbound.py``) goes
through the same door: :meth:`SipCalls.dial` admits it, the user agent dials, and it runs
under the same watch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from voxpipe.conversation.events import ErrorCode
from voxpipe.conversation.principal import ANONYMOUS
from voxpipe.observability.client_labels import UNKNOWN
from voxpipe.observability.logs import log_context
from voxpipe.observability.metrics import ACCEPTED
from voxpipe.server.lifecycle import run_call
from voxpipe.server.state import ServerState
from voxpipe.transports.call import Call, CallEnd, CloseCode
from voxpipe.transports.sip.user_agent import SipUserAgent

log = logging.getLogger("voxpipe.sip")

TRANSPORT = "sip"


class NotAdmitted(Exception):
    """No call is placed now (models loading, at capacity, draining): why."""

    def __init__(self, end: CallEnd) -> None:
        super().__init__(end.message)
        self.end = end


@dataclass(frozen=True)
class Dialed:
    """A call we placed, answered: its SIP Call-ID and its session's id."""

    call_id: str
    session_id: str


class SipCalls:
    """The server's door for SIP calls (:class:`~voxpipe.transports.sip.user_agent.CallDoor`)
    and the owner of their tasks."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.agent = SipUserAgent(state.config.sip, self, state.metrics)
        self._calls: set[asyncio.Task[None]] = set()
        self._closing = False

    async def start(self) -> None:
        await self.agent.start()
        for transport, host, port in self.agent.addresses:
            log.info("SIP listening on %s %s:%d", transport, host, port)

    def refusing(self) -> CallEnd | None:
        state = self.state
        if self._closing or state.calls.draining:
            return CallEnd(ErrorCode.SHUTTING_DOWN, "shutting down", CloseCode.TRY_AGAIN_LATER)
        if state.services is None:
            return CallEnd(ErrorCode.NOT_READY, "models are loading", CloseCode.TRY_AGAIN_LATER)
        if state.calls.load >= state.calls.max_calls:
            return CallEnd(ErrorCode.AT_CAPACITY, "at capacity", CloseCode.TRY_AGAIN_LATER)
        return None

    def admit(self) -> Call | CallEnd:
        state = self.state
        why = self.refusing()
        if why is None and state.services is not None:
            call = Call(TRANSPORT, state.services, state.calls, ANONYMOUS)
            refusal = state.calls.admit(call)
            if refusal is None:
                state.metrics.count_connection(TRANSPORT, ACCEPTED, call.client_version)
                return call
            why = refusal
        assert why is not None
        state.metrics.errors.labels(why.code).inc()
        state.metrics.count_connection(TRANSPORT, why.code, UNKNOWN)
        return why

    def release(self, call: Call) -> None:
        self.state.calls.release(call)

    def run(self, call: Call, serving: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(
            self._run(call, serving), name=f"sip-{call.id}"
        )
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def dial(self, to: str, instructions: str | None = None) -> Dialed:
        """Call the SIP URI ``to`` and wait until it is answered (its session runs then, as a
        call we answered would) or fails; :class:`DialFailed` says why (its SIP status).
        The call is the server's own task: the caller of this method going away (an HTTP
        client hanging up) neither ends nor repeats it."""
        admitted = self.admit()
        if isinstance(admitted, CallEnd):
            raise NotAdmitted(admitted)
        try:
            placed = await self.agent.dial(admitted, to, instructions)
        except BaseException:
            self.release(admitted)
            raise
        self.run(admitted, placed.run())
        session_id = await asyncio.shield(placed.outcome)
        return Dialed(placed.call_id, session_id)

    async def _run(self, call: Call, serving: Coroutine[Any, Any, None]) -> None:
        async def closed() -> None:
            """Nothing left: the call's own cleanup sent the BYE and closed its RTP."""

        try:
            with log_context(connection_id=call.id, transport=TRANSPORT):
                await run_call(call, serving, self.state, on_closed=closed, name="sip")
        finally:
            self.state.calls.release(call)

    async def close(self) -> None:
        """Server shutdown: no new calls, every SIP call ended (BYE), then the sockets."""
        self._closing = True
        why = CallEnd(ErrorCode.SHUTTING_DOWN, "the server is shutting down", CloseCode.GOING_AWAY)
        calls = [c for c in self.state.calls.active if c.transport == TRANSPORT]
        await asyncio.gather(*(c.end(why) for c in calls), return_exceptions=True)
        await asyncio.gather(*self._calls, return_exceptions=True)
        await self.agent.close()
