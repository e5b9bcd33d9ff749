"""One request to a telephony provider's REST API, as every provider's ``*_rest.py`` makes
it: a fresh client bounded by ``telephony.rest_timeout_s``, and every way of not getting a
2xx answer (no connection, a timeout, an error status) one exception,
:class:`ProviderRefused`, whose message names the provider and what it said. A transfer that
gets it leaves the call where it was (``transfer_failed``); an outbound call is not placed
(``call_failed``)."""

from __future__ import annotations

from typing import Any

import httpx

from voxpipe.config import TelephonyConfig


class ProviderRefused(Exception):
    """The provider did not take the request, could not be asked, or is not configured."""


def require(cfg: TelephonyConfig, *names: str) -> None:
    """Raise :class:`ProviderRefused` naming each of ``telephony.<names>`` left unset."""
    missing = [f"telephony.{n}" for n in names if getattr(cfg, n) is None]
    if missing:
        raise ProviderRefused(f"{', '.join(missing)} not set")


async def request(
    cfg: TelephonyConfig, title: str, method: str, url: str, **kwargs: Any
) -> httpx.Response:
    """``method url`` with httpx's ``kwargs`` (``json``, ``data``, ``auth``, ``headers``)."""
    try:
        async with httpx.AsyncClient(timeout=cfg.rest_timeout_s) as client:
            response = await client.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise ProviderRefused(f"{title}: {type(exc).__name__}: {exc}") from exc
    if response.status_code >= 300:
        raise ProviderRefused(f"{title} answered {response.status_code}: {response.text[:200]}")
    return response


def field_of(response: httpx.Response, title: str, *path: str) -> str:
    """The string at ``path`` in the JSON answer (the new call's id)."""
    try:
        value: Any = response.json()
        for key in path:
            value = value[key]
    except (ValueError, KeyError, TypeError) as exc:
        raise ProviderRefused(f"{title}'s answer has no {'.'.join(path)}") from exc
    return str(value)


def e164_digits(number: str) -> str:
    """``+15550123`` as Plivo and Vonage write numbers: country code and number, no ``+``."""
    return number.removeprefix("+")


class NotDialable(ProviderRefused):
    """The request asks what this provider's outbound call cannot do (a 400, not a 502)."""
