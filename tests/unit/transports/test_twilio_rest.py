"""The transfer's REST request to Twilio: its TwiML, and a clear failure for every way it
can go wrong (no token, an error status, no answer)."""

from __future__ import annotations

import httpx
import pytest
from pydantic import SecretStr

from voxpipe.agent.call_control import transfer_call_to
from voxpipe.agent.closing import asks_for_a_person
from voxpipe.agent.tools import ToolDefinitionError
from voxpipe.config import TelephonyConfig
from voxpipe.transports.twilio_rest import TwilioRefused, dial_twiml, transfer


def test_dial_twiml_for_a_number_and_a_sip_uri() -> None:
    assert dial_twiml("+15550199") == "<Response><Dial>+15550199</Dial></Response>"
    assert dial_twiml("sip:desk@pbx.example.com") == (
        "<Response><Dial><Sip>sip:desk@pbx.example.com</Sip></Dial></Response>"
    )


async def test_no_token_is_a_clear_failure() -> None:
    with pytest.raises(TwilioRefused, match="twilio_auth_token"):
        await transfer(TelephonyConfig(), "AC1", "CA1", "+15550199")


async def test_an_error_status_and_no_answer_are_failures() -> None:
    cfg = TelephonyConfig(twilio_api_base="http://127.0.0.1:9", twilio_auth_token=SecretStr("t"))
    with pytest.raises(TwilioRefused, match="ConnectError"):
        await transfer(cfg.model_copy(update={"rest_timeout_s": 1.0}), "AC1", "CA1", "+1555")

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text='{"message": "The requested resource was not found"}')

    original = httpx.AsyncClient.__init__

    def mocked(self: httpx.AsyncClient, **kwargs: object) -> None:
        original(self, transport=httpx.MockTransport(refuse), **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(httpx.AsyncClient, "__init__", mocked)
        with pytest.raises(TwilioRefused, match="404"):
            await transfer(cfg, "AC1", "CA1", "+1555")


def test_a_target_with_markup_is_refused() -> None:
    with pytest.raises(ToolDefinitionError):
        transfer_call_to("+1555</Dial><Play>x")


def test_the_gate_hears_a_request_for_a_person() -> None:
    for said in ["Can I speak to a person?", "Put me through to the manager.", "A human, please."]:
        assert asks_for_a_person(said), said
    for said in ["What time do you open?", "Book a table for two.", ""]:
        assert not asks_for_a_person(said), said
