"""``/v1/realtime`` refusals that test_openai_realtime.py does not send, through a raw
WebSocket (the SDK sends neither binary frames nor oversized ones): each gets OpenAI's error
shape with its code and param, counted in ``/metrics``, and the call goes on."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from tests.support import metric_value
from tests.unit.fakes import fake_engines
from tests.unit.transports.in_process import serving
from voxpipe.config import Config

TIMEOUT_S = 10.0
MAX_MESSAGE_BYTES = 4096


@contextlib.asynccontextmanager
async def connected() -> AsyncIterator[tuple[ClientConnection, Any]]:
    config = Config.load(
        server={"turn_log_path": None, "max_message_bytes": MAX_MESSAGE_BYTES},
        store={"path": None}, deadlines={"filler": ""},
    )  # fmt: skip

    async with serving(config, fake_engines, TIMEOUT_S) as (port, http):
        url = f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-realtime"
        async with websockets.connect(url, max_size=None) as ws:
            for kind in ("session.created", "conversation.created"):
                assert json.loads(await ws.recv())["type"] == kind
            yield ws, http


async def next_error(ws: ClientConnection) -> dict[str, Any]:
    event = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
    assert event["type"] == "error" and event["event_id"].startswith("event_"), event
    error = event["error"]
    assert set(error) == {"type", "code", "message", "param", "event_id"}, error
    assert error["type"] == "invalid_request_error" and error["message"], error
    return dict(error)


def item(**fields: Any) -> dict[str, Any]:
    body = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    return {"type": "conversation.item.create", "item": {**body, **fields}}


CASES: list[tuple[str | bytes | dict[str, Any], str, str | None]] = [
    (b"\x00\x01", "invalid_value", None),  # audio goes in base64 appends
    ("x" * (MAX_MESSAGE_BYTES + 1), "message_too_large", None),
    (item(type="function_call"), "invalid_value", "item.role"),  # a function item has none
    (item(role=None), "missing_required_parameter", "item.role"),
    (item(content=[{"type": "input_audio", "audio": ""}]), "invalid_value", "item.content.0.type"),
    ({**item(), "previous_item_id": "item_nope"}, "invalid_value", "previous_item_id"),
    ({"type": "response.create", "response": {"conversation": "none"}}, "invalid_value",
     "response.conversation"),
    ({"type": "response.cancel", "response_id": "resp_nope"}, "response_cancel_not_active",
     "response_id"),
    ({"type": "conversation.item.retrieve", "item_id": "item_nope"}, "item_not_found", "item_id"),
]  # fmt: skip


async def test_each_refusal_has_its_code_and_param_and_the_call_goes_on() -> None:
    async with connected() as (ws, http):
        for message, code, param in CASES:
            await ws.send(json.dumps(message) if isinstance(message, dict) else message)
            error = await next_error(ws)
            assert (error["code"], error["param"]) == (code, param), (message, error)
        metrics = (await http.get("/metrics")).text
        for code in {code for _, code, _ in CASES}:
            want = sum(c == code for _, c, _ in CASES)
            found = metric_value(metrics, f'voxpipe_errors_total{{code="{code}"}}')
            assert found == want, (code, found, want)
        await ws.send(json.dumps({**item(), "event_id": "mine"}))  # a good one, after all that
        for kind in ("conversation.item.added", "conversation.item.done"):
            assert json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))["type"] == kind
        await ws.send(json.dumps({"type": "conversation.item.create", "event_id": "e9"}))
        assert (await next_error(ws))["event_id"] == "e9", "the client's event id comes back"
