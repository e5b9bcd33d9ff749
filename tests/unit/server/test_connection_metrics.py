"""Every WebSocket connection is counted by outcome, and a reconnect by the client's version
(``voxpipe_connections_total``, ``voxpipe_reconnects_total``): what the alerts on connection
failures and reconnect rates read."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.config import Config
from voxpipe.engines.base import Engines
from voxpipe.server.app import create_app

TIMEOUT_S = 20.0


def fake_engines(config: Config) -> Engines:
    return Engines(FakeVad(), FakeStt("hello"), FakeLlm(), FakeTts())


@contextlib.contextmanager
def app(**auth: Any) -> Iterator[TestClient]:
    """The app on fake engines, once ready (the models load in the background)."""
    config = Config.load(
        server={"turn_log_path": None}, store={"path": None}, deadlines={"filler": ""}, auth=auth
    )
    with TestClient(create_app(config, fake_engines)) as client:
        deadline = time.monotonic() + TIMEOUT_S
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the fake engines never got ready"
            time.sleep(0.01)
        yield client


def sample(client: TestClient, name: str, **labels: str) -> float:
    registry = client.app.state.voxpipe.metrics.registry  # type: ignore[attr-defined]
    return registry.get_sample_value(name, labels) or 0.0


def test_an_accepted_connection_is_counted_with_its_client_version() -> None:
    with app() as client:
        with client.websocket_connect("/v1/voice?client=web/1.4.2") as ws:
            ws.send_json({"type": "session.start"})
            assert ws.receive_json()["type"] == "session.started"
        with client.websocket_connect("/v1/voice?client=" + "x" * 80):
            pass
        accepted = {"transport": "native", "outcome": "accepted"}
        assert sample(client, "voxpipe_connections_total", **accepted, client_version="web/1.4.2")
        assert sample(client, "voxpipe_connections_total", **accepted, client_version="other")


def test_a_refused_connection_is_counted_by_its_error_code() -> None:
    with app(api_keys={"web": "k-web-0123456789"}) as client:
        with pytest.raises(WebSocketDisconnect):
            with client.websocket_connect("/v1/voice?client=web/1.4.2") as ws:
                ws.receive_json()  # the error, then the close
                ws.receive_json()
        labels = {"transport": "native", "outcome": "unauthorized", "client_version": "unknown"}
        assert sample(client, "voxpipe_connections_total", **labels) == 1
        assert sample(client, "voxpipe_reconnects_total", transport="native",
                      client_version="unknown") == 0  # fmt: skip


def test_a_connection_back_to_a_live_session_is_a_reconnect() -> None:
    with app() as client:
        url = "/v1/voice?session_id=call-7&client=app/2.0.0"
        with client.websocket_connect(url) as first:
            first.send_json({"type": "session.start", "session_id": "call-7"})
            assert first.receive_json()["type"] == "session.started"
            labels = {"transport": "native", "client_version": "app/2.0.0"}
            assert sample(client, "voxpipe_reconnects_total", **labels) == 0  # a first connect
            with client.websocket_connect(url):
                pass
            assert sample(client, "voxpipe_reconnects_total", **labels) == 1
