"""``POST /v1/calls``: the agent calls someone, through a provider's REST API or, with
``provider: sip``, by dialling a SIP URI itself.

The body names who to call (an E.164 number or a SIP URI), the ``provider`` (``twilio``
unless it says otherwise: Telnyx, Plivo and Vonage too, or ``sip``) and may give the call
its own instructions. For a provider, the server asks it (its ``Provider.dial``, from the one
registry ``telephony.PROVIDERS``) to dial with its own request that streams the call's audio
to ``{telephony.public_url}/v1/<provider>``, where it is answered like any call of that
provider (authenticated as an inbound stream is: ``docs/telephony.md``); the response comes at
once (``queued``). With ``sip`` (``sip.enabled``), the server's own user agent sends the
INVITE (``server/sip_calls.py``) and the response waits for the callee: ``answered`` (the
agent's session is running, its greeting first) or the SIP status that said no
(``docs/sip.md``).

Placing a call costs money and reaches a stranger's phone, so it needs an API key in the
``Authorization`` header, and with authentication off (no ``auth.api_keys``) the server
places no calls. A retried request places no second call: with the same ``Idempotency-Key``
header (and the same API key and body) it gets the first one's response, waiting for it if
that is still being placed (:class:`IdempotentCalls`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voxpipe.conversation.events import ErrorCode, ErrorEvent
from voxpipe.server.auth import AuthError, Credentials
from voxpipe.server.json_body import json_body
from voxpipe.server.sip_calls import NotAdmitted, SipCalls
from voxpipe.server.state import ServerState
from voxpipe.server.webrtc_offers import error_response
from voxpipe.transports.provider_rest import NotDialable, ProviderRefused
from voxpipe.transports.sip.outbound import DialFailed
from voxpipe.transports.telephony import PROVIDERS
from voxpipe.transports.telephony.base import MAX_INSTRUCTIONS

log = logging.getLogger("voxpipe.outbound")

MAX_CALL_REQUEST_BYTES = 16 * 1024
TO_PATTERN = r"^(\+[1-9][0-9]{6,14}|sip:[!-~]{3,250})$"
PROVIDER_PATTERN = f"^({'|'.join([*(p.name for p in PROVIDERS), 'sip'])})$"
KEY_PATTERN = r"[!-~]{1,255}"  # an Idempotency-Key: printable ASCII, no spaces
MAX_KEYS = 10_000  # live Idempotency-Keys remembered, per worker
IDEMPOTENCY_TTL_S = 24 * 3600.0  # how long a key's response is kept for its retries


SIP = "sip"  # the provider name of calls this server dials itself


class CallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    to: str = Field(pattern=TO_PATTERN, description="E.164 (+15550123) or a SIP URI.")
    instructions: str | None = Field(None, min_length=1, max_length=MAX_INSTRUCTIONS)
    provider: str = Field("twilio", pattern=PROVIDER_PATTERN, description="Who dials.")


@dataclass(frozen=True)
class CallResponse:
    """What ``POST /v1/calls`` responded; ``placed``: a call may exist because of it (such
    a response is kept for the key's retries; one that placed nothing is not)."""

    status: int
    body: dict[str, Any]
    placed: bool

    def response(self, replayed: bool = False) -> JSONResponse:
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        if self.status in (429, 503):
            headers["Retry-After"] = "1"
        return JSONResponse(self.body, self.status, headers=headers)


def _error(code: ErrorCode, message: str, status: int, placed: bool, **extra: Any) -> CallResponse:
    return CallResponse(status, {**ErrorEvent.of(code, message).to_dict(), **extra}, placed)


@dataclass
class _Entry:
    request: str  # the request it is the response to, as JSON: a retry must be the same
    response: asyncio.Future[CallResponse]
    expires: float  # time.monotonic()


class IdempotentCalls:
    """The responses to ``POST /v1/calls`` by (API key, ``Idempotency-Key``), for
    :data:`IDEMPOTENCY_TTL_S`. Bound: :data:`MAX_KEYS` live keys; past it a request with a
    new key is refused (503; forgetting a live key could place a retry's call twice).
    Held by this worker: a retry must reach the worker that took the first request (with
    several workers behind one address, route ``/v1/calls`` to one of them)."""

    def __init__(self, capacity: int = MAX_KEYS, ttl_s: float = IDEMPOTENCY_TTL_S) -> None:
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, issuer: str, key: str) -> _Entry | None:
        self._expire()
        return self._entries.get((issuer, key))

    def begin(self, issuer: str, key: str, request: str) -> _Entry | None:
        """A new key's entry, whose response the first request sets; None when full."""
        self._expire()
        if len(self._entries) >= self.capacity:
            return None
        future: asyncio.Future[CallResponse] = asyncio.get_running_loop().create_future()
        entry = _Entry(request, future, time.monotonic() + self.ttl_s)
        self._entries[(issuer, key)] = entry
        return entry

    def forget(self, issuer: str, key: str) -> None:
        self._entries.pop((issuer, key), None)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._entries:
            entry = next(iter(self._entries.values()))
            if entry.expires > now or not entry.response.done():
                return
            self._entries.popitem(last=False)


class OutboundCalls:
    """The ``POST /v1/calls`` endpoint: checks, idempotency, then the provider or SIP."""

    def __init__(self, state: ServerState, sip: SipCalls | None) -> None:
        self.state = state
        self.sip = sip
        self.responses = IdempotentCalls()

    async def place(self, request: Request) -> Response:
        state = self.state
        if not state.auth.enabled:
            return error_response(
                ErrorCode.UNAUTHORIZED, "outbound calls need authentication: set auth.api_keys", 403
            )
        try:
            issuer = state.auth.check_issuer(
                Credentials.of(request.headers, request.query_params, [])
            )
        except AuthError as exc:
            return error_response(ErrorCode.UNAUTHORIZED, str(exc), 401)
        key = request.headers.get("idempotency-key")
        if key is not None and not re.fullmatch(KEY_PATTERN, key):
            why = "Idempotency-Key: 1 to 255 printable ASCII characters"
            return error_response(ErrorCode.INVALID_EVENT, why, 400)
        wanted = await json_body(request, CallRequest, MAX_CALL_REQUEST_BYTES, "call request")
        if isinstance(wanted, Response):
            return wanted
        if key is None:
            return (await self._place(wanted, issuer)).response()
        asked = json.dumps(wanted.model_dump(), sort_keys=True)
        entry = self.responses.find(issuer, key)
        if entry is not None:
            if entry.request != asked:
                why = "this Idempotency-Key was used with another request"
                return error_response(ErrorCode.INVALID_EVENT, why, 422)
            log.info("outbound call request retried (Idempotency-Key) for %s", issuer)
            return (await asyncio.shield(entry.response)).response(replayed=True)
        entry = self.responses.begin(issuer, key, asked)
        if entry is None:
            why = "too many outbound call requests remembered; try again later"
            return error_response(ErrorCode.AT_CAPACITY, why, 503)
        placing = asyncio.ensure_future(self._place(wanted, issuer))  # outlives a hang-up
        placing.add_done_callback(lambda done: self._settle(issuer, key, entry, done))
        return (await asyncio.shield(placing)).response()

    def _settle(
        self, issuer: str, key: str, entry: _Entry, done: asyncio.Future[CallResponse]
    ) -> None:
        """The first request's response is its retries'; one that placed nothing (or a bug)
        frees the key, so a retry tries again."""
        response = None if done.cancelled() or done.exception() else done.result()
        if response is None or not response.placed:
            self.responses.forget(issuer, key)
        if response is None:
            response = _error(ErrorCode.CALL_FAILED, "the call request failed", 500, False)
        entry.response.set_result(response)

    async def _place(self, wanted: CallRequest, issuer: str) -> CallResponse:
        if wanted.provider == SIP:
            return await self._dial_sip(wanted, issuer)
        cfg = self.state.config.telephony
        if cfg.public_url is None:
            return _error(ErrorCode.CALL_FAILED, "telephony.public_url is not set", 503, False)
        provider = next(p for p in PROVIDERS if p.name == wanted.provider)
        stream_url = f"{cfg.public_url.rstrip('/')}/v1/{provider.name}"
        parameters = {"instructions": wanted.instructions} if wanted.instructions else {}
        try:
            call_id = await provider.dial(cfg, wanted.to, stream_url, parameters)
        except NotDialable as exc:
            return _error(ErrorCode.INVALID_EVENT, f"call request: {exc}", 400, False)
        except ProviderRefused as exc:  # maybe placed (a timeout): kept for retries
            log.error("outbound %s call for %s failed: %s", provider.name, issuer, exc)
            self.state.metrics.errors.labels(ErrorCode.CALL_FAILED).inc()
            return _error(ErrorCode.CALL_FAILED, f"the call was not placed: {exc}", 502, True)
        log.info("outbound %s call %s placed for %s", provider.name, call_id, issuer)
        placed = {
            "provider": provider.name,
            "call_id": call_id,
            "to": wanted.to,
            "status": "queued",
        }
        if provider.name == "twilio":
            placed["call_sid"] = call_id  # the field clients of the Twilio-only endpoint read
        return CallResponse(201, placed, True)

    async def _dial_sip(self, wanted: CallRequest, issuer: str) -> CallResponse:
        if self.sip is None:
            why = "this server dials no SIP calls: set sip.enabled"
            return _error(ErrorCode.CALL_FAILED, why, 503, False)
        try:
            dialed = await self.sip.dial(wanted.to, wanted.instructions)
        except NotAdmitted as exc:
            return _error(exc.end.code, exc.end.message, 503, False)
        except DialFailed as exc:
            if exc.status == 400:  # nothing sent: a URI this user agent cannot call
                return _error(ErrorCode.INVALID_EVENT, f"call request: {exc.reason}", 400, False)
            log.info("outbound sip call for %s to %s: %s", issuer, wanted.to, exc)
            message = f"the call was not answered: {exc.reason}"
            return _error(ErrorCode.CALL_FAILED, message, 502, True, sip_status=exc.status)
        log.info("outbound sip call %s to %s answered, for %s", dialed.call_id, wanted.to, issuer)
        return CallResponse(
            201,
            {
                "provider": SIP,
                "call_id": dialed.call_id,
                "to": wanted.to,
                "status": "answered",
                "session_id": dialed.session_id,
            },
            True,
        )
