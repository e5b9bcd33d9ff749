"""What a transport gives the server, so that readiness, auth, admission and the
call's lifecycle (timeouts, drain) are enforced once, in ``server/``, for all of them.

A transport only translates: wire messages in, :class:`~voxpipe.conversation.session.Session`
calls; session events out, wire messages. The server accepts the WebSocket
(with the subprotocol the transport picks) before :meth:`Transport.serve` runs,
and it may close the call at any time by cancelling ``serve``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import ValidationError
from starlette.websockets import WebSocket

from voxpipe.conversation.events import ErrorCode
from voxpipe.transports.send_buffer import SendBuffer

if TYPE_CHECKING:
    from voxpipe.server.calls import Call


class Transport(Protocol):
    name: str  # metrics label and log name: "native", "realtime", "twilio"
    path: str  # the WebSocket route, e.g. "/v1/voice"

    def subprotocol(self, ws: WebSocket) -> str | None:
        """The subprotocol to answer the handshake with (None: none)."""
        ...

    def error_text(self, code: ErrorCode, message: str) -> str | None:
        """The transport's own error message, sent before the server closes a call it
        refuses or ends (capacity, auth, idle, drain); None sends nothing."""
        ...

    async def serve(self, ws: WebSocket, call: Call) -> None:
        """Run one accepted connection until it ends; ``call.attach`` each session it makes."""
        ...


def call_send_buffer(ws: WebSocket, call: Call, peer: str, text_only: bool = False) -> SendBuffer:
    """The bounded buffer between a call's session and its socket; a ``peer`` that stops
    reading past the bound ends the call (slow_consumer)."""
    limit_ms = call.services.config.limits.send_buffer_ms

    async def write(message: str | bytes) -> None:
        if isinstance(message, str):
            await ws.send_text(message)
        else:
            assert not text_only, f"{peer} takes JSON text only"
            await ws.send_bytes(message)

    return SendBuffer(
        write,
        max_audio_ms=limit_ms,
        on_overflow=lambda: call.slow_consumer(
            f"{peer} stopped reading: over {limit_ms} ms of audio waited for its socket"
        ),
        age=call.services.metrics.buffer_age.labels("outbound"),
    )


def describe_error(error: ValidationError, what: str = "event") -> str:
    """The first validation problem, as ``field.path: reason``, for a client's error event."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or what
    return f"{where}: {first['msg']}"
