"""Twilio's REST API, for what the media stream cannot do: hand the call to someone else,
and place a call.

A transfer updates the live call with new TwiML (``POST .../Calls/{CallSid}.json``,
``Twiml=<Response><Dial>...</Dial></Response>``, HTTP basic auth with the account SID and
its auth token). Twilio then leaves the ``<Connect><Stream>``, which ends our stream, and
dials the target: a phone number, or a SIP URI in ``<Sip>``.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

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


def stream_twiml(stream_url: str, parameters: dict[str, str]) -> str:
    """The TwiML of an outbound call: its audio streams to ``stream_url`` (our
    ``/v1/twilio``), with ``parameters`` as the start's ``customParameters``."""
    params = "".join(
        f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in parameters.items()
    )
    stream = f"<Stream url={quoteattr(stream_url)}>{params}</Stream>"
    return f"<Response><Connect>{stream}</Connect></Response>"


async def place_call(cfg: TelephonyConfig, to: str, twiml: str) -> str:
    """Dial ``to`` from ``telephony.twilio_from``; the new call's SID. Raises
    :class:`TransferFailed` (the provider refused, or is not configured)."""
    missing = [
        name
        for name in ("twilio_account_sid", "twilio_auth_token", "twilio_from")
        if getattr(cfg, name) is None
    ]
    if missing or cfg.twilio_auth_token is None or cfg.twilio_account_sid is None:
        raise TransferFailed(f"telephony.{', telephony.'.join(missing)} not set")
    base = cfg.twilio_api_base.rstrip("/")
    url = f"{base}/2010-04-01/Accounts/{cfg.twilio_account_sid}/Calls.json"
    auth = (cfg.twilio_account_sid, cfg.twilio_auth_token.get_secret_value())
    form = {"To": to, "From": cfg.twilio_from or "", "Twiml": twiml}
    try:
        async with httpx.AsyncClient(timeout=cfg.rest_timeout_s) as client:
            response = await client.post(url, data=form, auth=auth)
    except httpx.HTTPError as exc:
        raise TransferFailed(f"{type(exc).__name__}: {exc}") from exc
    if response.status_code >= 300:
        raise TransferFailed(f"Twilio answered {response.status_code}: {response.text[:200]}")
    try:
        sid = response.json()["sid"]
    except (ValueError, KeyError, TypeError) as exc:
        raise TransferFailed("Twilio's answer has no call sid") from exc
    return str(sid)


class TransferFailed(Exception):
    """The provider did not take the request (a transfer: the call goes on where it was)."""
