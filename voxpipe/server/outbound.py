"""``POST /v1/calls``: the agent calls someone, through a provider's REST API.

The body names who to call (an E.164 number or a SIP URI), the ``provider`` (``twilio``
unless it says otherwise: Telnyx, Plivo and Vonage too) and may give the call its own
instructions. The server asks the provider (its ``Provider.dial``, from the one registry
``telephony.PROVIDERS``) to dial with its own request that streams the call's audio to
``{telephony.public_url}/v1/<provider>``, where it is answered like any call of that
provider (authenticated as an inbound stream is: ``docs/telephony.md``). Placing a call
costs money and reaches a stranger's phone, so it needs an API key in the ``Authorization``
header, and with authentication off (no ``auth.api_keys``) the server places no calls.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voxpipe.conversation.events import ErrorCode
from voxpipe.server.auth import AuthError, Credentials
from voxpipe.server.json_body import json_body
from voxpipe.server.state import ServerState
from voxpipe.server.webrtc_offers import error_response
from voxpipe.transports.provider_rest import NotDialable, ProviderRefused
from voxpipe.transports.telephony import PROVIDERS
from voxpipe.transports.telephony.base import MAX_INSTRUCTIONS

log = logging.getLogger("voxpipe.outbound")

MAX_CALL_REQUEST_BYTES = 16 * 1024
TO_PATTERN = r"^(\+[1-9][0-9]{6,14}|sip:[!-~]{3,250})$"
PROVIDER_PATTERN = f"^({'|'.join(p.name for p in PROVIDERS)})$"


class CallRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    to: str = Field(pattern=TO_PATTERN, description="E.164 (+15550123) or a SIP URI.")
    instructions: str | None = Field(None, min_length=1, max_length=MAX_INSTRUCTIONS)
    provider: str = Field("twilio", pattern=PROVIDER_PATTERN, description="Who dials.")


async def place_call(request: Request, state: ServerState) -> Response:
    if not state.auth.enabled:
        return error_response(
            ErrorCode.UNAUTHORIZED, "outbound calls need authentication: set auth.api_keys", 403
        )
    try:
        issuer = state.auth.check_issuer(Credentials.of(request.headers, request.query_params, []))
    except AuthError as exc:
        return error_response(ErrorCode.UNAUTHORIZED, str(exc), 401)
    wanted = await json_body(request, CallRequest, MAX_CALL_REQUEST_BYTES, "call request")
    if isinstance(wanted, Response):
        return wanted
    cfg = state.config.telephony
    if cfg.public_url is None:
        return error_response(ErrorCode.CALL_FAILED, "telephony.public_url is not set", 503)
    provider = next(p for p in PROVIDERS if p.name == wanted.provider)
    stream_url = f"{cfg.public_url.rstrip('/')}/v1/{provider.name}"
    parameters = {"instructions": wanted.instructions} if wanted.instructions else {}
    try:
        call_id = await provider.dial(cfg, wanted.to, stream_url, parameters)
    except NotDialable as exc:
        return error_response(ErrorCode.INVALID_EVENT, f"call request: {exc}", 400)
    except ProviderRefused as exc:
        log.error("outbound %s call for %s failed: %s", provider.name, issuer, exc)
        state.metrics.errors.labels(ErrorCode.CALL_FAILED).inc()
        return error_response(ErrorCode.CALL_FAILED, f"the call was not placed: {exc}", 502)
    log.info("outbound %s call %s placed for %s", provider.name, call_id, issuer)
    placed = {"provider": provider.name, "call_id": call_id, "to": wanted.to, "status": "queued"}
    if provider.name == "twilio":
        placed["call_sid"] = call_id  # the field clients of the Twilio-only endpoint read
    return JSONResponse(placed, 201)
