"""The ASGI app: health, readiness, metrics, tokens, dialing out and one route per transport.

The server gets ready in the background (``startup.py``: models loaded and warmed, the
agent started), so ``/healthz`` answers at once and ``/readyz`` turns 200 only then; the
endpoints apart from the calls are ``endpoints.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket

from voxpipe.agent import Agent, resolve_agent
from voxpipe.config import Config
from voxpipe.server import web
from voxpipe.server.endpoints import Endpoints
from voxpipe.server.lifecycle import serve_call
from voxpipe.server.outbound import OutboundCalls
from voxpipe.server.sip_calls import SipCalls
from voxpipe.server.startup import EnginesLoader, get_ready, load_cold_engines, shut_down
from voxpipe.server.state import ServerState
from voxpipe.server.webrtc_offers import WebRTCOffers
from voxpipe.server.worker import WorkerHeader
from voxpipe.transports import plivo_rest, telephony
from voxpipe.transports.base import Transport
from voxpipe.transports.native import NativeTransport
from voxpipe.transports.openai_realtime import RealtimeTransport

__all__ = ["EnginesLoader", "create_app"]


def create_app(
    config: Config, engines: EnginesLoader | None = None, agent: Agent | None = None
) -> Starlette:
    """The app; ``engines`` loads the engines (default: the configured ones, for real);
    ``agent`` defaults to the configured one (raises ``AgentLoadError``)."""
    agent = agent or resolve_agent(config)
    state = ServerState(config)
    load: EnginesLoader = engines or functools.partial(load_cold_engines, state=state)
    webrtc = WebRTCOffers(state)
    sip = SipCalls(state) if config.sip.enabled else None
    outbound = OutboundCalls(state, sip)
    endpoints = Endpoints(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if sip is not None:  # answers 503 until the models are ready
            await sip.start()
        loader = asyncio.create_task(get_ready(state, load, agent), name="load-models")
        if config.server.bind_when_ready:  # uvicorn listens only once this yields
            await asyncio.shield(loader)
        try:
            yield
        finally:
            loader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await loader
            await shut_down(state, webrtc, sip)

    async def calls(request: Request) -> Response:
        """Dial out (``server/outbound.py``)."""
        return await outbound.place(request)

    async def plivo_xml(request: Request) -> Response:
        """The Plivo XML a transfer or an outbound call points Plivo at (``plivo_rest.py``)."""
        return await plivo_rest.xml_endpoint(request, state.config.telephony)

    def websocket_route(transport: Transport) -> WebSocketRoute:
        async def endpoint(ws: WebSocket) -> None:
            await serve_call(ws, transport, state)

        return WebSocketRoute(transport.path, endpoint)

    transports: list[Transport] = [NativeTransport(), RealtimeTransport(), *telephony.transports()]
    app = Starlette(
        routes=[
            Route("/", endpoints.index),
            Mount(web.STATIC_PATH, web.WebFiles(), name="web"),
            Route("/healthz", endpoints.healthz),
            Route("/readyz", endpoints.readyz),
            Route("/metrics", endpoints.metrics),
            Route("/v1/tokens", endpoints.tokens, methods=["POST"]),
            Route("/v1/calls", calls, methods=["POST"]),
            Route(plivo_rest.XML_PATH, plivo_xml, methods=["GET", "POST"]),
            Route(webrtc.path, webrtc.offer, methods=["POST"]),
            *(websocket_route(t) for t in transports),
        ],
        lifespan=lifespan,
        middleware=[Middleware(WorkerHeader, worker=state.worker)],
    )
    app.state.voxpipe = state
    return app
