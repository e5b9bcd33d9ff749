"""A call from connect to close: readiness, auth and admission at the door, then
idle and maximum-duration timeouts while it runs, and graceful drain on shutdown.

Each transport's ``serve`` runs as a child task of the connection. Ending a call
from the server side sends the transport's own error message, closes the socket
with a defined code and cancels ``serve``, whose cleanup cancels the session's
work: nothing outlives the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import FrameType
from typing import Any

import uvicorn
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from voxpipe.conversation.events import ErrorCode
from voxpipe.conversation.hang_up import hang_up
from voxpipe.observability.client_labels import UNKNOWN, claimed_client
from voxpipe.observability.logs import log_context
from voxpipe.observability.metrics import ACCEPTED, HANDSHAKE_FAILED
from voxpipe.server.auth import AuthError, Credentials
from voxpipe.server.state import ServerState
from voxpipe.transports.base import Transport, close_reason
from voxpipe.transports.call import Call, CallEnd, CloseCode

log = logging.getLogger("voxpipe.lifecycle")

WATCH_INTERVAL_S = 0.5
SEND_TIMEOUT_S = 1.0


async def refuse(ws: WebSocket, transport: Transport, why: CallEnd, http: bool = False) -> None:
    """Accept only to say why not, then close with the code that tells a client what to do.
    With ``http``, a refusal a client should retry (not ready, at capacity, draining) is an
    HTTP 503 before the upgrade instead, so a load balancer can try another worker."""
    if http and why.close_code is CloseCode.TRY_AGAIN_LATER:
        body = {"type": "error", "code": str(why.code), "message": why.message}
        await ws.send_denial_response(
            JSONResponse(body, status_code=503, headers={"retry-after": "1"})
        )
        return
    await ws.accept(subprotocol=transport.subprotocol(ws))
    await _say_and_close(ws, transport, why)


async def _say_and_close(ws: WebSocket, transport: Transport, why: CallEnd) -> None:
    text = transport.error_text(why.code, why.message)
    with contextlib.suppress(Exception):  # the peer may be gone or not reading
        if text is not None:
            await asyncio.wait_for(ws.send_text(text), SEND_TIMEOUT_S)
        reason = close_reason(f"{why.code}: {why.message}")
        await asyncio.wait_for(ws.close(int(why.close_code), reason), SEND_TIMEOUT_S)


async def serve_call(ws: WebSocket, transport: Transport, state: ServerState) -> None:
    """Admit a connection or refuse it; every outcome is counted in
    ``voxpipe_connections_total`` (the client's version only once it is authenticated, so
    strangers cannot fill the bounded set of version labels)."""
    metrics = state.metrics
    if state.services is None:
        why = CallEnd(
            ErrorCode.NOT_READY,
            "models are still loading; retry when /readyz is 200",
            CloseCode.TRY_AGAIN_LATER,
        )
        metrics.errors.labels(why.code).inc()
        metrics.count_connection(transport.name, why.code, UNKNOWN)
        await refuse(ws, transport, why, state.config.server.refuse_with_http)
        return
    try:
        principal = await state.auth.admit(  # the credential, and the token's transport scope
            Credentials.of(ws.headers, ws.query_params, ws.scope.get("subprotocols", [])),
            transport.name,
        )
    except AuthError as exc:
        metrics.errors.labels(ErrorCode.UNAUTHORIZED).inc()
        metrics.count_connection(transport.name, ErrorCode.UNAUTHORIZED, UNKNOWN)
        await refuse(ws, transport, CallEnd(ErrorCode.UNAUTHORIZED, str(exc), CloseCode.POLICY))
        return
    client = metrics.client_version(claimed_client(ws.headers, ws.query_params))
    call = Call(transport.name, state.services, state.calls, principal, client_version=client)
    resuming = ws.query_params.get("session_id")
    reconnect = resuming is not None and state.calls.owner_of(resuming) == principal.id
    refusal = state.calls.admit(call, resuming=resuming)
    if refusal is not None:
        metrics.errors.labels(refusal.code).inc()
        metrics.count_connection(transport.name, refusal.code, client)
        await refuse(ws, transport, refusal, state.config.server.refuse_with_http)
        return
    try:
        try:
            await ws.accept(subprotocol=transport.subprotocol(ws))
        except Exception:
            metrics.count_connection(transport.name, HANDSHAKE_FAILED, client)
            raise
        metrics.count_connection(transport.name, ACCEPTED, client)
        if reconnect:
            metrics.count_reconnect(transport.name, client)
        with log_context(connection_id=call.id, transport=transport.name):  # its tasks copy it
            await _run(ws, transport, state, call)
    finally:
        state.calls.release(call)


async def _run(ws: WebSocket, transport: Transport, state: ServerState, call: Call) -> None:
    async def say_goodbye() -> None:
        if call.ended is not None:
            await _say_and_close(ws, transport, call.ended)

    await run_call(call, transport.serve(ws, call), state, on_closed=say_goodbye)


async def run_call(
    call: Call,
    serving: Coroutine[Any, Any, None],
    state: ServerState,
    on_closed: Callable[[], Awaitable[None]],
    name: str = "call",
) -> None:
    """Serve an admitted call until it ends, whichever transport serves it: the watchdog
    and :meth:`Call.end` may end it at any time, which cancels ``serving``. Once
    ``serving`` is done, ``on_closed`` finishes the call on its wire (the goodbye, the
    peer connection's close); only then does :meth:`Call.end` return."""
    task = asyncio.create_task(serving, name=f"{name}-{call.id}")
    closed = asyncio.Event()

    async def end(why: CallEnd) -> None:
        log.info("ending call %s: %s", call.id, why.message)
        state.metrics.errors.labels(why.code).inc()
        task.cancel()
        await closed.wait()

    call.bind_end(end)
    watchdog = asyncio.create_task(watch_call(call, state), name=f"watch-{call.id}")
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
    finally:
        if not task.done():  # the caller's own task was cancelled (server exit)
            task.cancel()
        with contextlib.suppress(BaseException):
            await task
        try:
            await on_closed()
        finally:
            closed.set()
            watchdog.cancel()
            with contextlib.suppress(BaseException):
                await watchdog


async def watch_call(call: Call, state: ServerState) -> None:
    cfg = state.config.server
    while call.ended is None:
        await asyncio.sleep(WATCH_INTERVAL_S)
        now = time.monotonic_ns()
        if (now - call.started_ns) / 1e9 >= cfg.max_call_s:
            await call.end(
                CallEnd(
                    ErrorCode.MAX_DURATION,
                    f"the call reached its maximum duration of {cfg.max_call_s:g} s",
                    CloseCode.MAX_DURATION,
                )
            )
        elif call.session is not None and call.session.idle_s(now) >= cfg.idle_timeout_s:
            await call.end(
                CallEnd(
                    ErrorCode.IDLE_TIMEOUT,
                    f"no speech and no reply for {cfg.idle_timeout_s:g} s",
                    CloseCode.IDLE,
                )
            )


async def drain(state: ServerState) -> None:
    """SIGTERM: refuse new calls, let active ones finish until the deadline, close the rest."""
    calls = state.calls
    calls.draining = True
    state.metrics.ready.set(0)
    deadline = time.monotonic() + state.config.server.drain_timeout_s
    log.info("draining %d call(s), up to %.0f s", calls.load, state.config.server.drain_timeout_s)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(calls.idle.wait(), max(0.0, deadline - time.monotonic()))
    why = CallEnd(ErrorCode.SHUTTING_DOWN, "the server is shutting down", CloseCode.GOING_AWAY)
    await asyncio.gather(*(call.end(why) for call in list(calls.active)), return_exceptions=True)
    for session_id in list(calls.detached):
        entry = calls.reattach(session_id)
        if entry is not None:
            await hang_up(entry.session)


class DrainingServer(uvicorn.Server):
    """uvicorn, with SIGTERM meaning *drain*: the first signal refuses new calls and lets
    active ones finish (up to the drain deadline) before uvicorn shuts down; a second
    signal exits at once."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state
        self._drain: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain is not None or self._loop is None or self.state.services is None:
            super().handle_exit(sig, frame)  # second signal, or nothing to drain
            return
        loop = self._loop

        def start() -> None:
            self._drain = loop.create_task(self._drain_then_exit(sig, frame), name="drain")

        loop.call_soon_threadsafe(start)

    async def _drain_then_exit(self, sig: int, frame: FrameType | None) -> None:
        try:
            await drain(self.state)
        finally:
            super().handle_exit(sig, frame)
