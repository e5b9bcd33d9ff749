"""The server's own HTTP endpoints, apart from the calls: liveness, readiness, metrics, the
index (the voice page for a browser) and minting tokens."""

from __future__ import annotations

import os

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from voxpipe.conversation.events import ErrorCode, ErrorEvent
from voxpipe.server import web
from voxpipe.server.auth import AuthError, Credentials, TokenRequest, TokenRequestError
from voxpipe.server.json_body import json_body
from voxpipe.server.state import ServerState
from voxpipe.server.webrtc_offers import error_response

MAX_TOKEN_REQUEST_BYTES = 4096


class Endpoints:
    """One server's endpoints, each answering from its :class:`ServerState`."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def healthz(self, request: Request) -> Response:
        state = self.state
        return JSONResponse({"status": "alive", "worker": state.worker, "pid": os.getpid()})

    async def readyz(self, request: Request) -> Response:
        state = self.state
        if state.ready:
            return JSONResponse({"status": "ready", "calls": state.calls.load})
        status = "draining" if state.calls.draining else "failed" if state.load_error else "loading"
        return JSONResponse({"status": status, "error": state.load_error}, status_code=503)

    async def metrics(self, request: Request) -> Response:
        metrics = self.state.metrics
        metrics.sample_process()
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    async def index(self, request: Request) -> Response:
        if web.wants_html(request.headers.get("accept", "")):
            return web.page()  # a browser: the voice page (voxpipe/web/)
        return JSONResponse(
            {
                "service": "voxpipe",
                "ready": self.state.ready,
                "voice": str(request.url.replace(scheme="ws", path="/v1/voice", query="")),
                "docs": "docs/protocol.md",
            }
        )

    async def tokens(self, request: Request) -> Response:
        """Mint a short-lived token for a browser; the caller proves itself with an API key
        and may narrow the token with a JSON body (:class:`~voxpipe.server.auth.TokenRequest`)."""
        auth = self.state.auth
        if not auth.enabled:
            return error_response(
                ErrorCode.TOKENS_DISABLED, "authentication is off: no API keys, no tokens", 404
            )
        try:
            issuer = auth.check_issuer(Credentials.of(request.headers, request.query_params, []))
        except AuthError as exc:
            return error_response(ErrorCode.UNAUTHORIZED, str(exc), 401)
        if not auth.tokens_enabled:
            body = ErrorEvent.of(
                ErrorCode.TOKENS_DISABLED,
                "this server mints no tokens: set auth.token_secret (VOXPIPE_AUTH__TOKEN_SECRET)",
            )
            return JSONResponse(body.to_dict(), status_code=503)
        wanted = await json_body(request, TokenRequest, MAX_TOKEN_REQUEST_BYTES, "token request")
        if isinstance(wanted, Response):
            return wanted
        try:
            issued = auth.issue(issuer, wanted)
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
