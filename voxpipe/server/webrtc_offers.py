"""``POST /v1/webrtc/offer``: the door and the lifetime of a WebRTC call.

A WebRTC call is signalled over one HTTP request and then lives on UDP, so it cannot
ride the WebSocket lifecycle of ``lifecycle.serve_call``; it gets the same checks here,
in the same order: readiness (503), auth (401), then admission (429 at capacity, 503
draining), each answered with the protocol's ``error`` JSON. An admitted call holds its
slot until its peer connection closes, and is ended like any other by the idle and
maximum-duration watchdog, by drain, and by the server's shutdown (:meth:`close`): its
lifetime is the WebSocket calls' own, ``lifecycle.run_call``.
"""

from __future__ import annotations

import asyncio
import contextlib

from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from voxpipe.conversation import ownership
from voxpipe.conversation.events import ErrorCode, ErrorEvent
from voxpipe.observability.client_labels import claimed_client
from voxpipe.server.auth import AuthError, Credentials
from voxpipe.server.lifecycle import run_call
from voxpipe.server.state import ServerState
from voxpipe.transports.base import Undecodable, decode_json, describe_error
from voxpipe.transports.call import Call, CallEnd, CloseCode
from voxpipe.transports.webrtc import OfferError, WebRTCConnection, WebRTCOffer

PATH = "/v1/webrtc/offer"
ANSWER_TIMEOUT_S = 10.0  # ICE gathering is local (no STUN): this is generous
STATUS = {
    ErrorCode.NOT_READY: 503,
    ErrorCode.SHUTTING_DOWN: 503,
    ErrorCode.AT_CAPACITY: 429,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
}


def error_response(code: ErrorCode, message: str, status: int | None = None) -> JSONResponse:
    """The protocol's ``error`` event as the HTTP answer; 429 and 503 say when to retry."""
    status = status or STATUS.get(code, 400)
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return JSONResponse(ErrorEvent.of(code, message).to_dict(), status, headers=headers)


class WebRTCOffers:
    """Answers offers and owns the WebRTC calls they start (one task each)."""

    path = PATH

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._calls: set[asyncio.Task[None]] = set()
        self._closing = False

    async def offer(self, request: Request) -> Response:
        state = self.state
        services = state.services
        if self._closing:
            return self._refuse(ErrorCode.SHUTTING_DOWN, "the server is shutting down")
        if services is None:
            return self._refuse(
                ErrorCode.NOT_READY, "models are still loading; retry when /readyz is 200"
            )
        try:
            principal = await state.auth.admit(
                Credentials.of(request.headers, request.query_params, []), "webrtc"
            )
        except AuthError as exc:
            return self._refuse(ErrorCode.UNAUTHORIZED, str(exc))
        body = await self._read_offer(request)
        if isinstance(body, Response):
            return body
        wanted = body.session_id or principal.session_id
        if wanted is not None:
            taken = await ownership.check_new(state.calls, services.store, principal, wanted)
            if taken is not None:
                status = 403 if taken.code is ErrorCode.UNAUTHORIZED else 409
                return self._refuse(taken.code, taken.message, status)
        client = state.metrics.client_version(claimed_client(request.headers, request.query_params))
        call = Call("webrtc", services, state.calls, principal, client_version=client)
        refusal = state.calls.admit(call)
        if refusal is not None:
            return self._refuse(refusal.code, refusal.message)
        connection: WebRTCConnection | None = None
        try:
            connection = WebRTCConnection(call, body)
            sdp = await asyncio.wait_for(connection.answer(), ANSWER_TIMEOUT_S)
        except BaseException as exc:  # refused, timed out, or the request was cancelled
            if connection is not None:
                await connection.close()
            state.calls.release(call)
            if isinstance(exc, OfferError):
                return self._refuse(exc.code, exc.message)
            if isinstance(exc, ValidationError):  # the turn options, merged with the server's
                return self._refuse(ErrorCode.INVALID_EVENT, f"offer: {describe_error(exc)}")
            if isinstance(exc, TimeoutError):
                return self._refuse(ErrorCode.INTERNAL, "the answer took too long", 500)
            raise
        task = asyncio.get_running_loop().create_task(
            self._run(connection, call), name=f"call-{call.id}"
        )
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        return JSONResponse(
            {"type": "answer", "sdp": sdp, "session_id": connection.session.id, "call_id": call.id}
        )

    def _refuse(self, code: ErrorCode, message: str, status: int | None = None) -> Response:
        self.state.metrics.errors.labels(code).inc()
        return error_response(code, message, status)

    async def _read_offer(self, request: Request) -> WebRTCOffer | Response:
        limit = self.state.config.server.max_message_bytes
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    return self._refuse(
                        ErrorCode.MESSAGE_TOO_LARGE, f"the offer exceeds {limit} bytes"
                    )
        except ClientDisconnect:
            return Response(status_code=400)
        payload = decode_json(bytes(body), limit)
        if isinstance(payload, Undecodable):
            return self._refuse(payload.code, f"the body is not valid JSON: {payload.reason}")
        try:
            return WebRTCOffer.model_validate(payload)
        except ValidationError as exc:
            return self._refuse(ErrorCode.INVALID_EVENT, f"offer: {describe_error(exc)}")

    async def _run(self, connection: WebRTCConnection, call: Call) -> None:
        """The call's lifetime (``lifecycle.run_call``), then its slot is free again."""

        async def close() -> None:
            with contextlib.suppress(BaseException):
                await connection.close()  # waits for the cleanup, even if serving was cancelled

        try:
            await run_call(call, connection.run(), self.state, on_closed=close, name="webrtc")
        finally:
            self.state.calls.release(call)

    async def close(self) -> None:
        """Server shutdown: end every WebRTC call and wait until its cleanup is done."""
        self._closing = True
        why = CallEnd(ErrorCode.SHUTTING_DOWN, "the server is shutting down", CloseCode.GOING_AWAY)
        calls = [c for c in self.state.calls.active if c.transport == "webrtc"]
        await asyncio.gather(*(c.end(why) for c in calls), return_exceptions=True)
        await asyncio.gather(*self._calls, return_exceptions=True)
