"""Vonage's Voice API, for what the media stream cannot do: transfer, dial out.

Every request carries a JWT the server signs for it (RS256, with the application's private
key; claims ``application_id``, ``iat``, ``exp`` and a unique ``jti``,
https://developer.vonage.com/en/getting-started/concepts/authentication), as
``Authorization: Bearer``. Both requests hand Vonage an NCCO ``connect``
(https://developer.vonage.com/en/voice/voice-api/ncco-reference,
https://developer.vonage.com/en/voice/voice-api/concepts/endpoints):

- a transfer, ``PUT /v1/calls/{uuid}`` with ``action: transfer`` and ``destination: {type:
  ncco, ncco: [connect to the target]}``, the uuid being the NCCO header ``call_uuid`` the
  stream was started with (``telephony/vonage.py``). Vonage runs the new NCCO, which ends
  the WebSocket leg (https://developer.vonage.com/en/voice/voice-api/code-snippets/
  controlling-conversations/transfer-a-call-inline-ncco);
- an outbound call, ``POST /v1/calls`` with ``to: [{type: phone, number}]``, ``from`` and an
  NCCO that connects the callee to our ``/v1/vonage`` WebSocket, the call's parameters as
  its ``headers``; the answer's ``uuid`` names the call
  (https://developer.vonage.com/en/voice/voice-api/api-overview).

Vonage writes numbers without the ``+`` (E.164 digits); a SIP URI is a ``sip`` endpoint.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import jwt

from voxpipe.config import TelephonyConfig
from voxpipe.transports.provider_rest import (
    ProviderRefused,
    e164_digits,
    field_of,
    request,
    require,
)

TITLE = "Vonage"
JWT_TTL_S = 300  # a token per request; Vonage takes up to 24 h
STREAM_CONTENT_TYPE = "audio/l16;rate=16000"


def endpoint(target: str) -> dict[str, str]:
    """The NCCO endpoint of a number or SIP URI."""
    if target.lower().startswith("sip:"):
        return {"type": "sip", "uri": target}
    return {"type": "phone", "number": e164_digits(target)}


def connect(endpoint: dict[str, Any], caller: str | None = None) -> list[dict[str, Any]]:
    """An NCCO of one ``connect`` to ``endpoint``, presented from ``caller``."""
    action: dict[str, Any] = {"action": "connect", "endpoint": [endpoint]}
    if caller:
        action["from"] = e164_digits(caller)
    return [action]


def token(cfg: TelephonyConfig, now: float | None = None) -> str:
    """A JWT for one request, signed with the application's private key."""
    require(cfg, "vonage_application_id", "vonage_private_key")
    assert cfg.vonage_private_key is not None
    issued = int(time.time() if now is None else now)
    claims = {
        "application_id": cfg.vonage_application_id,
        "iat": issued,
        "exp": issued + JWT_TTL_S,
        "jti": str(uuid.uuid4()),
    }
    try:
        return jwt.encode(claims, cfg.vonage_private_key.get_secret_value(), algorithm="RS256")
    except (ValueError, TypeError, jwt.PyJWTError) as exc:
        raise ProviderRefused(f"telephony.vonage_private_key: {exc}") from exc


async def transfer(cfg: TelephonyConfig, call_uuid: str, target: str) -> None:
    """Put the call through to ``target``; raises ``ProviderRefused``."""
    ncco = connect(endpoint(target), cfg.vonage_from)
    body = {"action": "transfer", "destination": {"type": "ncco", "ncco": ncco}}
    await _send(cfg, "PUT", f"/v1/calls/{call_uuid}", body)


async def dial(cfg: TelephonyConfig, to: str, stream_url: str, parameters: dict[str, str]) -> str:
    """Dial ``to`` from ``telephony.vonage_from``, connected to ``stream_url``; the call's
    uuid. ``parameters`` are the WebSocket's headers (the start's parameters)."""
    require(cfg, "vonage_application_id", "vonage_private_key", "vonage_from")
    assert cfg.vonage_from is not None
    websocket: dict[str, Any] = {
        "type": "websocket",
        "uri": stream_url,
        "content-type": STREAM_CONTENT_TYPE,
    }
    if parameters:
        websocket["headers"] = parameters
    body = {
        "to": [endpoint(to)],
        "from": {"type": "phone", "number": e164_digits(cfg.vonage_from)},
        "ncco": connect(websocket),
    }
    response = await _send(cfg, "POST", "/v1/calls", body)
    return field_of(response, TITLE, "uuid")


async def _send(
    cfg: TelephonyConfig, method: str, path: str, body: dict[str, Any]
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token(cfg)}"}
    url = cfg.vonage_api_base.rstrip("/") + path
    return await request(cfg, TITLE, method, url, json=body, headers=headers)
