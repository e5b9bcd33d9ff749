"""``transfer_call`` over Twilio with the real models: a caller who asks for a person hears
the agent say so, then the server updates the live call through Twilio's REST API, here a
local HTTP server that records the request: ``<Dial>`` TwiML, basic auth with the
account SID and token, the stream's call SID in the path."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from tests.e2e.test_twilio import say_on_a_line
from tests.rest_recorder import RestRecorder
from tests.support import RunningServer, serving

pytestmark = pytest.mark.e2e

TOKEN = "test-auth-token"


@pytest.fixture(scope="module")
def transfer_server(
    tmp_path_factory: pytest.TempPathFactory, twilio_api: RestRecorder
) -> Iterator[RunningServer]:
    env = {
        "VOXPIPE_AGENT": "tests.e2e.transfer_agent:agent",
        "VOXPIPE_TELEPHONY__TWILIO_API_BASE": twilio_api.url,
        "VOXPIPE_TELEPHONY__TWILIO_AUTH_TOKEN": TOKEN,
    }
    yield from serving(tmp_path_factory.mktemp("transfer"), env)


async def test_asking_for_a_person_transfers_the_call(
    transfer_server: RunningServer, twilio_api: RestRecorder
) -> None:
    ask = "Can I speak to a person, please?"
    line, turn, unplayed_s, _ = await say_on_a_line(
        transfer_server, ask, lambda _: twilio_api.requests
    )

    assert [t["name"] for t in turn.get("tools", [])] == ["transfer_call"], turn.get("tools")
    assert "put you through" in turn["reply"], turn["reply"]
    assert unplayed_s < 0.25, f"the transfer came with {unplayed_s:.2f} s of the agent unplayed"
    (request,) = twilio_api.requests
    assert request.path == f"/2010-04-01/Accounts/{line.account_sid}/Calls/{line.call_sid}.json"
    assert request.form["Twiml"] == ["<Response><Dial>+15550199</Dial></Response>"]
    basic = base64.b64decode(request.headers["Authorization"].split()[1]).decode()
    user, _, password = basic.partition(":")
    assert (user, password) == (line.account_sid, TOKEN)
