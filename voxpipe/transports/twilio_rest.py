"""Twilio's REST API, for what the media stream cannot do: hand the call to someone else.

A transfer updates the live call with new TwiML (``POST .../Calls/{CallSid}.json``,
``Twiml=<Response><Dial>...</Dial></Response>``, HTTP basic auth with the account SID and
its auth token). Twilio then leaves the ``<Connect><Stream>``, which ends our stream, and
dials the target: a phone number, or a SIP URI in ``<Sip>``.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

import httpx

from voxpipe.config import TelephonyConfig


def dial_twiml(target: str) -> str:
    """The TwiML that puts the call through to ``target``."""
    if target.lower().startswith("sip:"):
        return f"<Response><Dial><Sip>{escape(target)}</Sip></Dial></Response>"
    return f"<Response><Dial>{escape(target)}</Dial></Response>"


async def transfer(cfg: TelephonyConfig, account_sid: str, call_sid: str, target: str) -> None:
    """Put call ``call_sid`` through to ``target``; raises :class:`TransferFailed`."""
    if cfg.twilio_auth_token is None:
        raise TransferFailed("telephony.twilio_auth_token is not set")
    base = cfg.twilio_api_base.rstrip("/")
    url = f"{base}/2010-04-01/Accounts/{account_sid}/Calls/{call_sid}.json"
    auth = (account_sid, cfg.twilio_auth_token.get_secret_value())
    try:
        async with httpx.AsyncClient(timeout=cfg.rest_timeout_s) as client:
            response = await client.post(url, data={"Twiml": dial_twiml(target)}, auth=auth)
    except httpx.HTTPError as exc:
        raise TransferFailed(f"{type(exc).__name__}: {exc}") from exc
    if response.status_code >= 300:
        raise TransferFailed(f"Twilio answered {response.status_code}: {response.text[:200]}")


class TransferFailed(Exception):
    """The provider did not take the transfer; the call goes on where it was."""
