"""What the server needs to control a phone call through its provider (transfer, dial out).

Each provider's REST API has its base URL here (tests point it at a local server), its
credentials (secrets as ``SecretStr``: never logged, never in ``voxpipe config``), and the
number its outbound calls come from. A provider left unconfigured still answers its media
streams; only its transfer and outbound calls fail, with an error naming the missing field.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr

from voxpipe.config.section import Section


def _caller_number(provider: str, also: str = "") -> Any:
    """The number a provider's outbound calls come from, one meaning for every provider."""
    return Field(None, description=f"The {provider} number outbound calls come from{also} (E.164).")


class TelephonyConfig(Section):
    """The providers' call-control APIs, for a transfer and an outbound call: a call is
    answered and ended over the media stream itself (docs/telephony.md). A provider's
    account setting left unset (None) fails only the transfers and outbound calls that need
    it, with an error naming it; the call goes on."""

    twilio_api_base: str = "https://api.twilio.com"
    """Twilio's REST API. A transfer updates the live call (POST
    /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json) with <Dial> TwiML."""

    twilio_auth_token: SecretStr | None = None
    """The Twilio account's auth token (the account SID comes from the stream's start)."""

    twilio_account_sid: str | None = None
    """The Twilio account that places outbound calls (POST /v1/calls); a transfer uses the stream's
    own."""

    twilio_from: str | None = _caller_number("Twilio")

    telnyx_api_base: str = "https://api.telnyx.com"
    """Telnyx's Call Control API. A transfer is POST /v2/calls/{call_control_id}/actions/transfer;
    an outbound call POST /v2/calls."""

    telnyx_api_key: SecretStr | None = None
    """A Telnyx API key (sent as a Bearer token)."""

    telnyx_connection_id: str | None = None
    """The Call Control application (connection) Telnyx outbound calls are placed from."""

    telnyx_from: str | None = _caller_number("Telnyx")

    plivo_api_base: str = "https://api.plivo.com"
    """Plivo's Voice API. A transfer is POST /v1/Account/{auth_id}/Call/{call_uuid}/ with an
    aleg_url this server answers with <Dial> XML; an outbound call POST
    /v1/Account/{auth_id}/Call/ with an answer_url answered with <Stream> XML."""

    plivo_auth_id: str | None = None
    """The Plivo account's Auth ID (HTTP basic auth user, and in the path)."""

    plivo_auth_token: SecretStr | None = None
    """The Plivo account's Auth Token (HTTP basic auth password); it also signs the XML URLs this
    server gives Plivo (/v1/plivo/xml), so only they are answered."""

    plivo_from: str | None = _caller_number("Plivo")

    vonage_api_base: str = "https://api.nexmo.com"
    """Vonage's Voice API. A transfer is PUT /v1/calls/{uuid} with an NCCO connect; an outbound
    call POST /v1/calls with an NCCO connect to the WebSocket."""

    vonage_application_id: str | None = None
    """The Vonage application whose private key signs each request's JWT (RS256, claim
    application_id)."""

    vonage_private_key: SecretStr | None = None
    """That application's private key, PEM text (-----BEGIN PRIVATE KEY-----...)."""

    vonage_from: str | None = _caller_number("Vonage", ", and a transferred call is presented from")

    public_url: str | None = None
    """Where the providers reach this server (wss://voice.example.com): an outbound call streams to
    {public_url}/v1/<provider>; Plivo fetches its XML from the same host over https."""

    rest_timeout_s: float = Field(5.0, gt=0, le=60)
    """Longest wait for a provider's REST API."""
