"""A server that is still loading its models is alive but takes no calls.

Starts its own server (not the shared one) so that the loading window can be observed.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
import pytest
import websockets

from tests.support import RunningServer, start_server, stop_server, wait_ready
from voxpipe.conversation.events import ErrorCode

pytestmark = pytest.mark.e2e

CLOSE_NORMAL, CLOSE_TRY_AGAIN_LATER = 1000, 1013
TIMEOUT_S = 10.0


async def wait_alive(http: httpx.AsyncClient, server: RunningServer, timeout_s: float = 60) -> None:
    """Until /healthz answers 200: the process serves, the models are not necessarily loaded."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.alive(), server.log_path.read_text()
        try:
            if (await http.get("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no /healthz in {timeout_s} s:\n{server.log_path.read_text()}")


async def assert_refused_not_ready(server: RunningServer) -> None:
    async with websockets.connect(server.ws, open_timeout=30, close_timeout=5) as ws:
        event = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
        assert event.get("type") == "error", event
        assert event.get("code") == ErrorCode.NOT_READY.value, event
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), TIMEOUT_S)
    assert closed.value.rcvd is not None, "closed without a close frame"
    assert closed.value.rcvd.code == CLOSE_TRY_AGAIN_LATER, closed.value


def metric_value(text: str, sample: str) -> float | None:
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


async def test_calls_wait_for_warm_models(tmp_path: Path) -> None:
    running = start_server(tmp_path)
    try:
        async with httpx.AsyncClient(base_url=running.http, timeout=5) as http:
            await wait_alive(http, running)
            ready = await http.get("/readyz")
            assert ready.status_code == 503, "models loaded before the test could look"
            assert ready.json() == {"status": "loading", "error": None}
            metrics = (await http.get("/metrics")).text
            assert metric_value(metrics, "voxpipe_ready") == 0

            await assert_refused_not_ready(running)
            assert (await http.get("/healthz")).status_code == 200
            assert running.alive()

            await asyncio.to_thread(wait_ready, running)
            ready = await http.get("/readyz")
            assert ready.status_code == 200
            assert ready.json() == {"status": "ready", "calls": 0}
            metrics = (await http.get("/metrics")).text
            assert metric_value(metrics, "voxpipe_ready") == 1

        async with websockets.connect(running.ws, open_timeout=30, close_timeout=5) as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            started = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
            assert started.get("type") == "session.started", started
            assert set(started["models"]) == {"vad", "stt", "llm", "tts"}
            await ws.send(json.dumps({"type": "session.end"}))
            async with asyncio.timeout(TIMEOUT_S):
                async for _ in ws:  # ends on a clean close, raises on any other
                    pass
            assert ws.close_code == CLOSE_NORMAL
    finally:
        await asyncio.to_thread(stop_server, running)


async def test_refusals_while_loading_are_counted(tmp_path: Path) -> None:
    running = start_server(tmp_path)
    try:
        async with httpx.AsyncClient(base_url=running.http, timeout=5) as http:
            await wait_alive(http, running)
            await assert_refused_not_ready(running)
            metrics = (await http.get("/metrics")).text
        sample = f'voxpipe_errors_total{{code="{ErrorCode.NOT_READY.value}"}}'
        assert metric_value(metrics, sample) == 1
    finally:
        await asyncio.to_thread(stop_server, running)
