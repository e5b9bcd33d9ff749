"""The native protocol's events on the WebRTC data channel, through a real aiortc peer on
loopback against the app on fake engines: every client event is answered as on
``/v1/voice`` (``docs/webrtc.md``), bad ones with the same typed errors, and the call goes on
until ``session.end``. Audio rides the media track, so a binary message is an error here."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.transports.test_webrtc_offer import TIMEOUT_S, serve
from voxpipe.clients.webrtc_client import WebRTCClient

MAX_MESSAGE_BYTES = 4096


async def answer(client: WebRTCClient, message: dict[str, Any] | str | bytes) -> dict[str, Any]:
    """Send one message on the data channel; the first event that comes after it."""
    seen = len(client.events)
    client.channel.send(json.dumps(message) if isinstance(message, dict) else message)
    return await client.wait_for(
        lambda: client.events[seen] if len(client.events) > seen else None, TIMEOUT_S
    )


async def test_data_channel_events_are_answered_as_on_the_websocket() -> None:
    server = {"max_message_bytes": MAX_MESSAGE_BYTES}
    async with serve(server=server) as app, WebRTCClient(app.url) as client:
        await client.connect(TIMEOUT_S, turn={"silence_ms": 700})
        refused: list[tuple[dict[str, Any] | str | bytes, str]] = [
            ("{", "invalid_json"),
            ("[1, 2]", "invalid_event"),
            ({"kind": "ping"}, "invalid_event"),
            ({"type": "response.create"}, "unknown_event"),
            ({"type": "session.start"}, "session_already_started"),  # the offer started it
            (b"\x00\x01", "invalid_event"),  # audio goes on the media track
            ("x" * (MAX_MESSAGE_BYTES + 1), "message_too_large"),
            ({"type": "playback.ack", "seq": 0}, "invalid_event"),
            ({"type": "playback.ack", "seq": 999}, "invalid_event"),  # never sent
            ({"type": "session.update", "turn": {"silence_ms": 31}}, "invalid_event"),
            ({"type": "session.update", "bogus": 1}, "invalid_event"),
        ]
        for message, code in refused:
            error = await answer(client, message)
            assert (error["type"], error["code"]) == ("error", code), (message, error)
            assert error["message"], error

        updated = await answer(client, {"type": "session.update", "turn": {"threshold": 0.6}})
        assert updated["type"] == "session.updated"
        assert updated["config"]["turn"]["threshold"] == 0.6
        assert updated["config"]["turn"]["silence_ms"] == 700, "the refused updates did nothing"
        history = await answer(client, {"type": "history.get"})
        assert (history["type"], history["messages"]) == ("history", [])
        assert (await answer(client, {"type": "ping"}))["type"] == "pong"

        metrics = (await app.http.get("/metrics")).text
        invalid = sum(code == "invalid_event" for _, code in refused)
        assert f'voxpipe_errors_total{{code="invalid_event"}} {invalid}.0' in metrics
        assert await app.calls() == 1
        client.send({"type": "session.end"})
        await app.wait_calls(0)
