"""Telnyx's Call Control API, for what the media stream cannot do: transfer, dial out.

Both are JSON requests with the API key as a Bearer token (``telephony.telnyx_api_key``):

- a transfer, ``POST /v2/calls/{call_control_id}/actions/transfer`` with ``to`` (a number
  or a SIP URI), the call control id being the stream start's ``call_control_id``. Telnyx
  dials the target and bridges the caller to it, which ends our stream
  (https://developers.telnyx.com/api-reference/call-commands/transfer-call);
- an outbound call, ``POST /v2/calls`` with ``connection_id``, ``to``, ``from`` and
  ``stream_url``, ``stream_track: inbound_track``, ``stream_bidirectional_mode: rtp`` and
  ``stream_bidirectional_codec: PCMU``, so the callee's audio streams to our ``/v1/telnyx``
  both ways once answered (https://developers.telnyx.com/api-reference/call-commands/dial,
  https://developers.telnyx.com/docs/voice/programmable-voice/media-streaming). The
  answer's ``data.call_control_id`` names the call.
"""

from __future__ import annotations

from typing import Any

import httpx

from voxpipe.config import TelephonyConfig
from voxpipe.transports.provider_rest import NotDialable, field_of, request, require

TITLE = "Telnyx"


async def transfer(cfg: TelephonyConfig, call_control_id: str, target: str) -> None:
    """Put the call through to ``target``; raises ``ProviderRefused``."""
    require(cfg, "telnyx_api_key")
    await _post(cfg, f"/v2/calls/{call_control_id}/actions/transfer", {"to": target})


async def dial(cfg: TelephonyConfig, to: str, stream_url: str, parameters: dict[str, str]) -> str:
    """Dial ``to`` from ``telephony.telnyx_from``, streaming to ``stream_url``; the new
    call's control id. The dial request has no stream parameters, so none are sent."""
    if parameters:
        raise NotDialable(
            f"{TITLE}'s dial request carries no stream parameters: {sorted(parameters)} "
            "cannot reach the call (the agent's instructions are used)"
        )
    require(cfg, "telnyx_api_key", "telnyx_connection_id", "telnyx_from")
    body = {
        "connection_id": cfg.telnyx_connection_id,
        "to": to,
        "from": cfg.telnyx_from,
        "stream_url": stream_url,
        "stream_track": "inbound_track",
        "stream_bidirectional_mode": "rtp",
        "stream_bidirectional_codec": "PCMU",
    }
    response = await _post(cfg, "/v2/calls", body)
    return field_of(response, TITLE, "data", "call_control_id")


async def _post(cfg: TelephonyConfig, path: str, body: dict[str, Any]) -> httpx.Response:
    assert cfg.telnyx_api_key is not None  # the callers check, to name what is missing
    headers = {"Authorization": f"Bearer {cfg.telnyx_api_key.get_secret_value()}"}
    url = cfg.telnyx_api_base.rstrip("/") + path
    return await request(cfg, TITLE, "POST", url, json=body, headers=headers)
