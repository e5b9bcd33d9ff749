"""Plivo's Voice API, for what the media stream cannot do: transfer, dial out; and the
Plivo XML those requests point Plivo at.

Plivo takes no XML inline: a transfer and an outbound call each name a URL that Plivo
fetches for the XML to run. This server answers those at ``/v1/plivo/xml`` (``GET`` or
``POST``), and only for URLs it made itself: each carries an HMAC-SHA256 of what it asks
for, keyed with ``telephony.plivo_auth_token``, so the route cannot be used to make XML
for anyone else. Both requests are JSON with HTTP basic auth (``plivo_auth_id``,
``plivo_auth_token``):

- a transfer, ``POST /v1/Account/{auth_id}/Call/{call_uuid}/`` with ``legs: aleg`` and
  ``aleg_url``, the call uuid being the stream start's ``callId``. Plivo leaves the
  ``<Stream>`` (our stream ends) and runs the XML there: ``<Dial><Number>`` (or ``<User>``
  for a SIP URI) (https://www.plivo.com/docs/voice/api/call/transfer-a-call,
  https://www.plivo.com/docs/voice/xml/dial, https://www.plivo.com/docs/voice/xml/dial/user);
- an outbound call, ``POST /v1/Account/{auth_id}/Call/`` with ``from``, ``to`` and
  ``answer_url``, whose XML streams the call both ways to our ``/v1/plivo`` as
  docs/telephony.md#plivo shows; the answer's ``request_uuid`` names the request
  (https://www.plivo.com/docs/voice/api/call/make-a-call).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any
from urllib.parse import urlencode
from xml.sax.saxutils import escape, quoteattr

import httpx
from starlette.requests import Request
from starlette.responses import Response

from voxpipe.config import TelephonyConfig
from voxpipe.transports.provider_rest import (
    NotDialable,
    ProviderRefused,
    e164_digits,
    field_of,
    request,
    require,
)

TITLE = "Plivo"
XML_PATH = "/v1/plivo/xml"
STREAM_CONTENT_TYPE = "audio/x-mulaw;rate=8000"


def dial_xml(target: str) -> str:
    """The XML that puts the call through to ``target``."""
    if target.lower().startswith("sip:"):
        return f"<Response><Dial><User>{escape(target)}</User></Dial></Response>"
    return f"<Response><Dial><Number>{escape(e164_digits(target))}</Number></Dial></Response>"


def stream_xml(stream_url: str) -> str:
    """The XML of an outbound call: both ways to ``stream_url`` while the agent talks, then
    hang up (the agent's ``end_call`` closes the stream)."""
    stream = (
        f'<Stream bidirectional="true" keepCallAlive="true" audioTrack="inbound" '
        f"contentType={quoteattr(STREAM_CONTENT_TYPE)}>{escape(stream_url)}</Stream>"
    )
    return f"<Response>{stream}<Hangup/></Response>"


def https_base(public_url: str) -> str:
    """``wss://host`` as Plivo fetches XML from it: ``https://host``."""
    return re.sub(r"^ws(s?)://", r"http\1://", public_url.rstrip("/"))


def _signature(token: str, what: str, value: str) -> str:
    return hmac.new(token.encode(), f"{what}\n{value}".encode(), hashlib.sha256).hexdigest()


def xml_url(cfg: TelephonyConfig, what: str, value: str) -> str:
    """A signed URL of ``/v1/plivo/xml``: ``what`` is ``dial`` (``value`` the target) or
    ``stream`` (``value`` the stream URL)."""
    require(cfg, "plivo_auth_token", "public_url")
    assert cfg.plivo_auth_token is not None and cfg.public_url is not None
    sig = _signature(cfg.plivo_auth_token.get_secret_value(), what, value)
    query = urlencode({"what": what, "value": value, "sig": sig})
    return f"{https_base(cfg.public_url)}{XML_PATH}?{query}"


async def xml_endpoint(request: Request, cfg: TelephonyConfig) -> Response:
    """``/v1/plivo/xml``: the XML a signed URL asks for; 403 for any other."""
    what, value = request.query_params.get("what", ""), request.query_params.get("value", "")
    sig = request.query_params.get("sig", "")
    token = cfg.plivo_auth_token
    if token is None or what not in ("dial", "stream") or not value:
        return Response("not a URL of this server", 403, media_type="text/plain")
    if not hmac.compare_digest(sig, _signature(token.get_secret_value(), what, value)):
        return Response("bad signature", 403, media_type="text/plain")
    xml = dial_xml(value) if what == "dial" else stream_xml(value)
    return Response(xml, media_type="application/xml")


async def transfer(cfg: TelephonyConfig, call_uuid: str, target: str) -> None:
    """Put the call through to ``target``; raises ``ProviderRefused``."""
    require(cfg, "plivo_auth_id", "plivo_auth_token", "public_url")
    body = {"legs": "aleg", "aleg_url": xml_url(cfg, "dial", target), "aleg_method": "GET"}
    await _post(cfg, f"Call/{call_uuid}/", body)


async def dial(cfg: TelephonyConfig, to: str, stream_url: str, parameters: dict[str, str]) -> str:
    """Dial ``to`` from ``telephony.plivo_from``, streaming to ``stream_url``; the request's
    uuid. Plivo's ``extraHeaders`` take letters and digits only, so no instructions."""
    if parameters:
        raise NotDialable(
            f"{TITLE}'s stream carries letters and digits only: {sorted(parameters)} cannot "
            "reach the call (the agent's instructions are used)"
        )
    require(cfg, "plivo_auth_id", "plivo_auth_token", "plivo_from", "public_url")
    assert cfg.plivo_from is not None
    body = {
        "from": e164_digits(cfg.plivo_from),
        "to": to if to.lower().startswith("sip:") else e164_digits(to),
        "answer_url": xml_url(cfg, "stream", stream_url),
        "answer_method": "GET",
    }
    response = await _post(cfg, "Call/", body)
    return field_of(response, TITLE, "request_uuid")


async def _post(cfg: TelephonyConfig, path: str, body: dict[str, Any]) -> httpx.Response:
    if cfg.plivo_auth_id is None or cfg.plivo_auth_token is None:
        raise ProviderRefused("telephony.plivo_auth_id and plivo_auth_token must be set")
    url = f"{cfg.plivo_api_base.rstrip('/')}/v1/Account/{cfg.plivo_auth_id}/{path}"
    auth = (cfg.plivo_auth_id, cfg.plivo_auth_token.get_secret_value())
    return await request(cfg, TITLE, "POST", url, json=body, auth=auth)
