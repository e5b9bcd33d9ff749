"""The ASGI app: health, readiness, metrics, tokens and one route per transport.

Models load in the background after the process starts, so ``/healthz``
(liveness) answers at once while ``/readyz`` stays 503 until every engine has
loaded *and* run a warm-up inference. Calls that arrive before that are told
``server_not_ready``: no caller ever meets a cold model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket

from voxpipe.config import Config
from voxpipe.conversation.services import CallStore, Filler, Runners, Services
from voxpipe.engines.base import Engines
from voxpipe.engines.loader import load_engines
from voxpipe.engines.runner import EngineRunner
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.turn_log import TurnLog
from voxpipe.server import web
from voxpipe.server.auth import Authenticator, AuthError, Credentials
from voxpipe.server.calls import CallRegistry
from voxpipe.server.lifecycle import serve_call
from voxpipe.server.store import open_store
from voxpipe.server.webrtc_offers import WebRTCOffers
from voxpipe.server.worker import WorkerHeader, worker_id
from voxpipe.transports.base import Transport
from voxpipe.transports.native import NativeTransport
from voxpipe.transports.openai_realtime import RealtimeTransport
from voxpipe.transports.twilio import TwilioTransport

log = logging.getLogger("voxpipe.server")

EngineFactory = Callable[[Config], Engines]


class ServerState:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.metrics = Metrics()
        self.services: Services | None = None
        self.load_error: str | None = None
        self.on_ready: list[Callable[[], None]] = []
        self.auth = Authenticator(config.auth)
        self.calls = CallRegistry(config.limits.max_calls, self.metrics)
        self.worker = worker_id(config)

    @property
    def ready(self) -> bool:
        """Warm and admitting calls (not draining)."""
        return self.services is not None and not self.calls.draining

    def install(
        self, engines: Engines, filler: Filler | None = None, store: CallStore | None = None
    ) -> None:
        remote = self.config.llm.engine == "openai"  # its threads only wait on streams
        runners = Runners(
            *(
                EngineRunner(
                    name,
                    self.config.limits.engine_queue,
                    observer=self.metrics,
                    workers=self.config.remote_llm.max_connections
                    if remote and name == "llm"
                    else 1,
                )
                for name in ("vad", "stt", "llm", "tts")
            )
        )
        self.services = Services(
            config=self.config,
            engines=engines,
            runners=runners,
            metrics=self.metrics,
            turn_log=TurnLog(self.config.server.turn_log_path),
            filler=filler,
            store=store,
        )
        self.metrics.ready.set(1)
        for callback in self.on_ready:
            callback()


def create_app(config: Config, engine_factory: EngineFactory = load_engines) -> Starlette:
    state = ServerState(config)
    webrtc = WebRTCOffers(state)

    async def load() -> None:
        try:
            engines = await asyncio.to_thread(engine_factory, config)
            filler = await asyncio.to_thread(
                Filler.synthesize, config.deadlines.filler, engines.tts
            )
            store = await open_store(config.store)
        except Exception as exc:  # reported on /readyz and in the log; the process stays alive
            log.exception("model loading failed")
            state.load_error = f"{type(exc).__name__}: {exc}"
            return
        state.install(engines, filler, store)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loader = asyncio.create_task(load(), name="load-models")
        if config.server.bind_when_ready:  # uvicorn listens only once this yields
            await asyncio.shield(loader)
        try:
            yield
        finally:
            loader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await loader
            await webrtc.close()  # its peer connections live outside any HTTP request
            if state.services is not None:
                state.services.runners.close()
                if state.services.store is not None:
                    await state.services.store.aclose()

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "alive", "worker": state.worker, "pid": os.getpid()})

    async def readyz(request: Request) -> Response:
        if state.ready:
            return JSONResponse({"status": "ready", "calls": state.calls.load})
        status = "draining" if state.calls.draining else "failed" if state.load_error else "loading"
        return JSONResponse({"status": status, "error": state.load_error}, status_code=503)

    async def metrics(request: Request) -> Response:
        state.metrics.sample_process()
        return PlainTextResponse(state.metrics.render(), media_type="text/plain; version=0.0.4")

    async def index(request: Request) -> Response:
        if web.wants_html(request.headers.get("accept", "")):
            return web.page()  # a browser: the voice page (voxpipe/web/)
        return JSONResponse(
            {
                "service": "voxpipe",
                "ready": state.ready,
                "voice": str(request.url.replace(scheme="ws", path="/v1/voice", query="")),
                "docs": "docs/protocol.md",
            }
        )

    async def tokens(request: Request) -> Response:
        """Mint a short-lived token for a browser; the caller proves itself with an API key."""
        if not state.auth.enabled:
            return JSONResponse({"error": "authentication is off: no API keys"}, status_code=404)
        key = Credentials.of(request.headers, {}, []).bearer or ""
        try:
            subject = state.auth.check_key(key)
        except AuthError as exc:
            return JSONResponse({"error": str(exc)}, status_code=401)
        token = state.auth.issue(subject)
        return JSONResponse({"token": token, "expires_in": state.auth.ttl_s})

    def websocket_route(transport: Transport) -> WebSocketRoute:
        async def endpoint(ws: WebSocket) -> None:
            await serve_call(ws, transport, state)

        return WebSocketRoute(transport.path, endpoint)

    transports: list[Transport] = [NativeTransport(), TwilioTransport(), RealtimeTransport()]
    app = Starlette(
        routes=[
            Route("/", index),
            Mount(web.STATIC_PATH, web.WebFiles(), name="web"),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
            Route("/v1/tokens", tokens, methods=["POST"]),
            Route(webrtc.path, webrtc.offer, methods=["POST"]),
            *(websocket_route(t) for t in transports),
        ],
        lifespan=lifespan,
        middleware=[Middleware(WorkerHeader, worker=state.worker)],
    )
    app.state.voxpipe = state
    return app
