"""This process as one worker of a cluster: its name, on every response.

Behind a load balancer a client (or a test, or an operator reading a trace)
cannot tell which worker answered; the ``x-voxpipe-worker`` header says, on
HTTP responses and on the WebSocket handshake alike.
"""

from __future__ import annotations

import socket

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from voxpipe.config import Config

HEADER = b"x-voxpipe-worker"


def worker_id(config: Config) -> str:
    """``server.worker_id``, else host name and port (unique on one host)."""
    return config.server.worker_id or f"{socket.gethostname()}:{config.server.port}"


class WorkerHeader:
    """ASGI middleware adding ``x-voxpipe-worker`` to every response and handshake."""

    def __init__(self, app: ASGIApp, worker: str) -> None:
        self.app = app
        self.value = worker.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return

        async def send_named(message: Message) -> None:
            if message["type"] in (
                "http.response.start",
                "websocket.accept",
                "websocket.http.response.start",
            ):
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (HEADER, self.value)],
                }
            await send(message)

        await self.app(scope, receive, send_named)
