"""A client-chosen id is a printable token at every door: the native ``session.start``, a
WebRTC offer, a Realtime item, a token request and a token's signed claims (Twilio's ids in
test_twilio.py). An id with a newline or an escape code is refused with the door's own typed
error, so it never reaches a log line or ``voxpipe calls`` (issue 29, finding 7)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.unit.server.test_auth import app, post_token, wait_ready
from tests.unit.server.test_auth_credentials import auth, signed
from voxpipe.server.auth import AuthError, Credentials

HOSTILE_IDS = [
    "call-1\nINFO voxpipe.server: forged line",  # a forged log or table line
    "\x1b[2J\x1b[H",  # clear the screen
    "call\r1",
    "call 1",
    "call\u202e1",  # right-to-left override: the text after it is shown reversed
    "call\x9b1",  # C1 CSI, an escape on some terminals
    "\t",
]
NATIVE = "/v1/voice?api_key=k-web"


def start(client: TestClient, session_id: str) -> dict[str, Any]:
    with client.websocket_connect(NATIVE) as ws:
        ws.send_json({"type": "session.start", "session_id": session_id})
        answer = ws.receive_json()
        if answer["type"] == "error":  # the connection goes on: a good start still works
            ws.send_json({"type": "session.start", "session_id": "call-1"})
            assert ws.receive_json()["type"] == "session.started"
        return dict(answer)


@pytest.mark.parametrize("session_id", HOSTILE_IDS, ids=repr)
def test_a_native_session_id_must_be_printable(session_id: str) -> None:
    with app() as client:
        wait_ready(client)
        refused = start(client, session_id)
    assert refused["type"] == "error" and refused["code"] == "invalid_event", refused
    assert refused["message"].startswith("session.start: session_id:"), refused


def test_a_webrtc_offer_s_session_id_must_be_printable() -> None:
    with app() as client:
        wait_ready(client)
        for session_id in HOSTILE_IDS:
            offer = {"sdp": "v=0", "type": "offer", "session_id": session_id}
            refused = client.post("/v1/webrtc/offer?api_key=k-web", json=offer)
            assert refused.status_code == 400, refused.text
            body = refused.json()
            assert body["code"] == "invalid_event", body
            assert body["message"].startswith("offer: session_id:"), body


def test_a_token_request_s_session_id_must_be_printable() -> None:
    with app() as client:
        for session_id in HOSTILE_IDS:
            refused = post_token(client, json={"session_id": session_id})
            assert refused.status_code == 400, refused.text
            body = refused.json()
            assert body["code"] == "invalid_event", body
            assert body["message"].startswith("token request: session_id:"), body
        assert post_token(client, json={"session_id": "call-1"}).status_code == 200


@pytest.mark.parametrize("session_id", HOSTILE_IDS, ids=repr)
def test_a_signed_token_naming_a_bad_session_id_is_malformed(session_id: str) -> None:
    """A token an older version minted (the signature is good) is refused at every door."""
    claims = {"iss": "key:web", "exp": 2**40, "sid": session_id}
    with pytest.raises(AuthError, match="malformed token"):
        auth().check(Credentials.of({"authorization": f"Bearer {signed(claims)}"}, {}, []))


def test_a_realtime_item_id_must_be_printable() -> None:
    text = {"type": "input_text", "text": "hi"}
    with app() as client:
        wait_ready(client)
        with client.websocket_connect("/v1/realtime?api_key=k-web") as ws:
            assert ws.receive_json()["type"] == "session.created"
            assert ws.receive_json()["type"] == "conversation.created"
            for item_id in HOSTILE_IDS:
                item = {"id": item_id, "type": "message", "role": "user", "content": [text]}
                ws.send_json({"type": "conversation.item.create", "item": item})
                error = ws.receive_json()
                assert error["type"] == "error", error
                assert error["error"]["code"] == "invalid_value", error
                assert error["error"]["param"] == "item.id", error
            item = {"id": "item-1", "type": "message", "role": "user", "content": [text]}
            ws.send_json({"type": "conversation.item.create", "item": item})
            assert ws.receive_json()["type"] == "conversation.item.added"
