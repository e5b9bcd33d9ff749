"""``transfer_call`` over Twilio with the real models: a caller who asks for a person hears
the agent say so, then the server updates the live call through Twilio's REST API, here a
local HTTP server that records the request: ``<Dial>`` TwiML, basic auth with the
account SID and token, the stream's call SID in the path."""

from __future__ import annotations

import base64
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from tests.e2e.test_twilio import say_on_a_line
from tests.support import RunningServer, serving

pytestmark = pytest.mark.e2e

TOKEN = "test-auth-token"


class _Recorder(BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, dict[str, str], dict[str, list[str]]]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        self.requests.append((self.path, dict(self.headers), urllib.parse.parse_qs(body)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status": "in-progress"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def twilio_api() -> Iterator[ThreadingHTTPServer]:
    api = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=api.serve_forever, daemon=True)
    thread.start()
    yield api
    api.shutdown()


@pytest.fixture(scope="module")
def transfer_server(
    tmp_path_factory: pytest.TempPathFactory, twilio_api: ThreadingHTTPServer
) -> Iterator[RunningServer]:
    env = {
        "VOXPIPE_AGENT": "tests.e2e.transfer_agent:agent",
        "VOXPIPE_TELEPHONY__TWILIO_API_BASE": f"http://127.0.0.1:{twilio_api.server_port}",
        "VOXPIPE_TELEPHONY__TWILIO_AUTH_TOKEN": TOKEN,
    }
    yield from serving(tmp_path_factory.mktemp("transfer"), env)


async def test_asking_for_a_person_transfers_the_call(transfer_server: RunningServer) -> None:
    ask = "Can I speak to a person, please?"
    line, turn, unplayed_s, _ = await say_on_a_line(
        transfer_server, ask, lambda _: _Recorder.requests
    )

    assert [t["name"] for t in turn.get("tools", [])] == ["transfer_call"], turn.get("tools")
    assert "put you through" in turn["reply"], turn["reply"]
    assert unplayed_s < 0.25, f"the transfer came with {unplayed_s:.2f} s of the agent unplayed"
    ((path, headers, form),) = _Recorder.requests
    assert path == f"/2010-04-01/Accounts/{line.account_sid}/Calls/{line.call_sid}.json"
    assert form["Twiml"] == ["<Response><Dial>+15550199</Dial></Response>"]
    basic = base64.b64decode(headers["Authorization"].split()[1]).decode()
    user, _, password = basic.partition(":")
    assert (user, password) == (line.account_sid, TOKEN)
