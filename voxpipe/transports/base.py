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


def describe_error(error: ValidationError, what: str = "event") -> str:
    """The first validation problem, as ``field.path: reason``, for a client's error event."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or what
    return f"{where}: {first['msg']}"
