"""What the server needs to control a phone call through its provider (transfer)."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class TelephonyConfig(BaseModel):
    """The providers' call-control APIs. Only a transfer uses them: a call is answered and
    ended over the media stream itself."""

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
    rest_timeout_s: float = Field(
        5.0, gt=0, le=60, description="Longest wait for a provider's REST API."
    )
