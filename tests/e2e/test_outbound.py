"""``POST /v1/calls`` with the real server: it asks Twilio's REST API (a local recorder) to
dial with TwiML that streams to this server's ``/v1/twilio``; Twilio's stream, connecting
as that TwiML says, is answered by the agent with the call's own instructions. Bad
requests get their error, and with authentication off no call is placed."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from xml.etree import ElementTree

import httpx
import pytest

from bench.turn_model import complete_sentence
from tests.e2e.test_twilio import _turns, _voiced_s
from tests.rest_recorder import RestRecorder
from tests.support import RunningServer, serving
from voxpipe.clients.twilio_client import TwilioLine

pytestmark = pytest.mark.e2e

KEY = "outbound-test-key-0123456789abcdef"
TOKEN = "test-auth-token"
ACCOUNT = "AC" + "0" * 32


@pytest.fixture(scope="module")
def dialing_server(
    tmp_path_factory: pytest.TempPathFactory, twilio_api: RestRecorder
) -> Iterator[RunningServer]:
    env = {
        "VOXPIPE_AUTH__API_KEYS": f'["{KEY}"]',
        "VOXPIPE_TELEPHONY__TWILIO_API_BASE": twilio_api.url,
        "VOXPIPE_TELEPHONY__TWILIO_AUTH_TOKEN": TOKEN,
        "VOXPIPE_TELEPHONY__TWILIO_ACCOUNT_SID": ACCOUNT,
        "VOXPIPE_TELEPHONY__TWILIO_FROM": "+15550100",
        "VOXPIPE_TELEPHONY__PUBLIC_URL": "wss://voice.example.com",
    }
    yield from serving(tmp_path_factory.mktemp("outbound"), env)


async def test_a_call_is_placed_and_its_stream_answered(
    dialing_server: RunningServer, twilio_api: RestRecorder
) -> None:
    instructions = "You are calling to confirm a table. Answer in one short sentence."
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"{dialing_server.http}/v1/calls",
            json={"to": "+15550123", "instructions": instructions},
            headers={"Authorization": f"Bearer {KEY}"},
        )
    assert response.status_code == 201, response.text
    placed = response.json()
    (request,) = twilio_api.requests
    assert placed["call_sid"].startswith("CA") and placed["to"] == "+15550123"
    assert request.path == f"/2010-04-01/Accounts/{ACCOUNT}/Calls.json"
    assert (request.form["To"], request.form["From"]) == (["+15550123"], ["+15550100"])
    basic = base64.b64decode(request.headers["Authorization"].split()[1]).decode()
    assert basic == f"{ACCOUNT}:{TOKEN}"
    stream = ElementTree.fromstring(request.form["Twiml"][0]).find("./Connect/Stream")
    assert stream is not None and stream.get("url") == "wss://voice.example.com/v1/twilio"
    parameters = {p.get("name"): p.get("value") for p in stream.findall("Parameter")}
    assert parameters == {"instructions": instructions}

    # Twilio connects the stream the TwiML names (here, to this server), with its parameters.
    url = re.sub(r"^wss://[^/]+", f"ws://127.0.0.1:{dialing_server.port}", stream.get("url", ""))
    async with TwilioLine(f"{url}?api_key={KEY}", parameters) as line:  # type: ignore[arg-type]
        await line.connect()
        line.say(complete_sentence("Hello, who is this?"), 16000)
        (turn,) = await _turns(dialing_server, line.stream_sid, 1)
        await line.wait_for(line.played_out, 60)
        await line.hang_up()
    assert turn["status"] == "completed" and turn["reply"].strip()
    assert _voiced_s([r.message for r in line.of("media")]) > 0.3


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        ({"to": "+15550123"}, {}, 401, "unauthorized"),
        ({"to": "5550123"}, {"Authorization": f"Bearer {KEY}"}, 400, "invalid_event"),
        (
            {"to": "+15550123", "from": "x"},
            {"Authorization": f"Bearer {KEY}"},
            400,
            "invalid_event",
        ),
        ("{not json", {"Authorization": f"Bearer {KEY}"}, 400, "invalid_json"),
    ],
)
def test_bad_requests_get_their_error(
    dialing_server: RunningServer,
    twilio_api: RestRecorder,
    body: object,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    before = len(twilio_api.requests)
    content = body if isinstance(body, str) else None
    response = httpx.post(
        f"{dialing_server.http}/v1/calls",
        json=None if content else body,
        content=content,
        headers=headers,
        timeout=30,
    )
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    assert len(twilio_api.requests) == before, "no call was placed"


def test_with_authentication_off_no_call_is_placed(server: RunningServer) -> None:
    response = httpx.post(f"{server.http}/v1/calls", json={"to": "+15550123"}, timeout=30)
    assert (response.status_code, response.json()["code"]) == (403, "unauthorized")
