"""The ASGI app: health, readiness, metrics, tokens and one route per transport.

Models load in the background after the process starts, so ``/healthz``
(liveness) answers at once while ``/readyz`` stays 503 until every engine has
loaded *and* run a warm-up inference. Calls that arrive before that are told
``server_not_ready``: no caller ever meets a cold model.

Each engine warms up on its runner's thread, the one that serves its calls. An OpenMP
runtime (llama.cpp's, CTranslate2's) keeps a pool of workers for every thread that ever
ran a parallel region; a second live pool makes it throttle its spinning barriers (more
workers than cores), which cost llama.cpp about 35 % of its speed on 2 cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.websockets import WebSocket

from voxpipe.agent import Agent, RunningAgent, resolve_agent
from voxpipe.config import Config
from voxpipe.conversation.events import ErrorCode, ErrorEvent
from voxpipe.conversation.services import Filler
from voxpipe.conversation.tool_step import phrases_of
from voxpipe.engines.base import CancelToken, ChatMessage, EngineError, Engines, LlmUsage
from voxpipe.engines.llama_llm import WARMUP_SENTENCE
from voxpipe.engines.loader import load_engines, warm_one
from voxpipe.engines.model_files import ModelFileError
from voxpipe.engines.queued import QueuedEngines, QueuedLlm, Runners
from voxpipe.server import web
from voxpipe.server.auth import (
    AuthError,
    Credentials,
    TokenRequest,
    TokenRequestError,
)
from voxpipe.server.json_body import json_body
from voxpipe.server.lifecycle import serve_call
from voxpipe.server.outbound import OutboundCalls
from voxpipe.server.sip_calls import SipCalls
from voxpipe.server.state import ServerState
from voxpipe.server.store import open_store
from voxpipe.server.webrtc_offers import WebRTCOffers, error_response
from voxpipe.server.worker import WorkerHeader
from voxpipe.transports import plivo_rest, telephony
from voxpipe.transports.base import Transport
from voxpipe.transports.native import NativeTransport
from voxpipe.transports.openai_realtime import RealtimeTransport

log = logging.getLogger("voxpipe.server")

EngineFactory = Callable[[Config], Engines]
"""Loads the engines without running them: the server warms each one on its runner."""
MAX_TOKEN_REQUEST_BYTES = 4096


async def warm_up(engines: QueuedEngines) -> None:
    """One warm-up inference per engine, in turn, each on the thread that will serve it."""
    for queued in engines.all():
        await queued.run(warm_one)


async def warm_agent(config: Config, llm: QueuedLlm, agent: RunningAgent) -> None:
    """With tools, the embedded model's prompt starts with the agent's instructions and its
    tools (Qwen's template puts them in the system message), and its first reply takes the
    tool path (the decision on the first token, its scan of the vocabulary, the grammar):
    run that once now, on the LLM's thread, and leave the prompt's KV in the context."""
    tools = agent.toolbox.specs()
    if not tools or config.llm.engine != "llama":
        return
    system = ChatMessage("system", agent.agent.instructions)
    session, cancel = "__warmup_tools__", CancelToken()
    stream = llm.stream(
        session, [system, ChatMessage("user", WARMUP_SENTENCE)], cancel, LlmUsage(), tools=tools
    )
    async with contextlib.aclosing(stream):
        async for _ in stream:
            pass
    await llm.prefill(session, [system], cancel, tools=tools)
    llm.forget(session)


def load_cold_engines(config: Config, state: ServerState | None = None) -> Engines:
    """The engines, not yet warm; a remote LLM's refusals go to the server's metrics."""
    on_refusal = None if state is None else functools.partial(state.metrics.upstream_refused, "llm")
    return load_engines(config, warm=False, on_refusal=on_refusal)


def create_app(
    config: Config, engine_factory: EngineFactory | None = None, agent: Agent | None = None
) -> Starlette:
    """The app; ``agent`` defaults to the configured one (raises ``AgentLoadError``)."""
    agent = agent or resolve_agent(config)
    state = ServerState(config)
    factory: EngineFactory = engine_factory or functools.partial(load_cold_engines, state=state)
    webrtc = WebRTCOffers(state)
    sip = SipCalls(state) if config.sip.enabled else None
    outbound = OutboundCalls(state, sip)

    async def load() -> None:
        runners: Runners | None = None
        try:
            engines = await asyncio.to_thread(factory, config)
            runners = state.start_runners(engines)
            queued = QueuedEngines.of(engines, runners)
            await warm_up(queued)
            filler = await queued.tts.run(
                functools.partial(Filler.synthesize, config.deadlines.filler)
            )
            state.agent = await RunningAgent.start(agent)  # MCP servers' tools found here
            await warm_agent(config, queued.llm, state.agent)
            phrases = await queued.tts.run(
                functools.partial(Filler.synthesize_all, phrases_of(state.agent.toolbox))
            )
            store = await open_store(config.store, state.worker)
        except Exception as exc:  # reported on /readyz and in the log; the process stays alive
            if isinstance(exc, EngineError | ModelFileError):  # a model refused: no bug
                log.error("model loading failed: %s", exc)
            else:
                log.exception("model loading failed")
            state.load_error = f"{type(exc).__name__}: {exc}"
            if runners is not None:
                runners.close()
            return
        state.install(engines, runners, filler, store, phrases)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if sip is not None:  # answers 503 until the models are ready
            await sip.start()
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
            if sip is not None:
                await sip.close()  # so do SIP calls: each ends with a BYE
            await state.auth.aclose()
            if state.agent is not None:
                await state.agent.aclose()
            if state.services is not None:
                state.services.runners.close()
                if state.services.store is not None:
                    await state.services.store.aclose()
            await asyncio.to_thread(state.tracing.shutdown)  # the spans still buffered go out

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
        """Mint a short-lived token for a browser; the caller proves itself with an API key
        and may narrow the token with a JSON body (:class:`~voxpipe.server.auth.TokenRequest`)."""
        if not state.auth.enabled:
            return error_response(
                ErrorCode.TOKENS_DISABLED, "authentication is off: no API keys, no tokens", 404
            )
        try:
            issuer = state.auth.check_issuer(
                Credentials.of(request.headers, request.query_params, [])
            )
        except AuthError as exc:
            return error_response(ErrorCode.UNAUTHORIZED, str(exc), 401)
        if not state.auth.tokens_enabled:
            body = ErrorEvent.of(
                ErrorCode.TOKENS_DISABLED,
                "this server mints no tokens: set auth.token_secret (VOXPIPE_AUTH__TOKEN_SECRET)",
            )
            return JSONResponse(body.to_dict(), status_code=503)
        wanted = await json_body(request, TokenRequest, MAX_TOKEN_REQUEST_BYTES, "token request")
        if isinstance(wanted, Response):
            return wanted
        try:
            issued = state.auth.issue(issuer, wanted)
        except TokenRequestError as exc:
            return error_response(ErrorCode.INVALID_EVENT, f"token request: {exc}", 400)
        scope = issued.principal
        return JSONResponse(
            {
                "token": issued.token,
                "expires_in": issued.expires_in,
                "principal": scope.id,
                "transports": sorted(scope.transports) if scope.transports is not None else None,
                "session_id": scope.session_id,
                "single_use": scope.jti is not None,
            }
        )

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
            Route("/", index),
            Mount(web.STATIC_PATH, web.WebFiles(), name="web"),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
            Route("/v1/tokens", tokens, methods=["POST"]),
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
