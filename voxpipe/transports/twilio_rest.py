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
from voxpipe.transports.provider_rest import ProviderRefused, field_of, request


def dial_twiml(target: str) -> str:
    """The TwiML that puts the call through to ``target``."""
    if target.lower().startswith("sip:"):
        return f"<Response><Dial><Sip>{escape(target)}</Sip></Dial></Response>"
    return f"<Response><Dial>{escape(target)}</Dial></Response>"


async def transfer(cfg: TelephonyConfig, account_sid: str, call_sid: str, target: str) -> None:
    """Put call ``call_sid`` through to ``target``; raises :class:`TwilioRefused`."""
    if cfg.twilio_auth_token is None:
        raise TwilioRefused("telephony.twilio_auth_token is not set")
    await _post(cfg, account_sid, f"Calls/{call_sid}.json", {"Twiml": dial_twiml(target)})


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
    :class:`TwilioRefused` (the provider refused, or is not configured)."""
    account, token, caller = cfg.twilio_account_sid, cfg.twilio_auth_token, cfg.twilio_from
    if account is None or token is None or caller is None:
        names = ("twilio_account_sid", "twilio_auth_token", "twilio_from")
        missing = [f"telephony.{n}" for n in names if getattr(cfg, n) is None]
        raise TwilioRefused(f"{', '.join(missing)} not set")
    response = await _post(cfg, account, "Calls.json", {"To": to, "From": caller, "Twiml": twiml})
    try:
        return field_of(response, "Twilio", "sid")
    except ProviderRefused as exc:
        raise TwilioRefused(str(exc)) from exc


async def dial(cfg: TelephonyConfig, to: str, stream_url: str, parameters: dict[str, str]) -> str:
    """An outbound call whose audio streams to ``stream_url`` (``server/outbound.py``)."""
    return await place_call(cfg, to, stream_twiml(stream_url, parameters))


async def _post(
    cfg: TelephonyConfig, account_sid: str, path: str, form: dict[str, str]
) -> httpx.Response:
    """One request to the account's API, as Twilio authenticates it (the account SID and
    its auth token); any failure to get a 2xx answer is :class:`TwilioRefused`."""
    assert cfg.twilio_auth_token is not None  # the callers check, to name what is missing
    base = cfg.twilio_api_base.rstrip("/")
    url = f"{base}/2010-04-01/Accounts/{account_sid}/{path}"
    auth = (account_sid, cfg.twilio_auth_token.get_secret_value())
    try:
        return await request(cfg, "Twilio", "POST", url, data=form, auth=auth)
    except ProviderRefused as exc:
        raise TwilioRefused(str(exc)) from exc


class TwilioRefused(ProviderRefused):
    """Twilio did not take the request, or could not be asked (a transfer: the call goes
    on where it was; an outbound call: none is placed)."""
