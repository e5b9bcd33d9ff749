"""What the server needs to control a phone call through its provider (transfer, dial out)."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class TelephonyConfig(BaseModel):
    """The providers' call-control APIs, for a transfer and an outbound call: a call is
    answered and ended over the media stream itself."""

    twilio_api_base: str = Field(
        "https://api.twilio.com",
        description="Twilio's REST API. A transfer updates the live call (POST "
        "/2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json) with <Dial> TwiML.",
    )
    twilio_auth_token: SecretStr | None = Field(
        None,
        description="The Twilio account's auth token (the account SID comes from the "
        "stream's start). None: transfer_call fails with a clear error, and the call goes on.",
    )
    twilio_account_sid: str | None = Field(
        None,
        description="The Twilio account that places outbound calls (POST /v1/calls); a "
        "transfer uses the stream's own.",
    )
    twilio_from: str | None = Field(
        None, description="The Twilio number outbound calls come from (E.164)."
    )
    public_url: str | None = Field(
        None,
        description="Where Twilio reaches this server (wss://voice.example.com): an outbound "
        "call's TwiML streams to {public_url}/v1/twilio.",
    )
    rest_timeout_s: float = Field(
        5.0, gt=0, le=60, description="Longest wait for a provider's REST API."
    )
