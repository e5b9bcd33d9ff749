"""SIGTERM drains: new calls are refused, active calls finish, the rest are closed."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx
import pytest
import websockets

from tests.support import librivox_clips, start_server, wait_ready
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient
from voxpipe.conversation.events import ErrorCode

pytestmark = pytest.mark.e2e

DRAIN_S = 12  # the answer in flight (a sentence read, then about 4 s of reply) must fit
BRIEF = "You are a voice assistant. Answer every message with one short sentence."


async def test_sigterm_lets_active_calls_finish_then_closes_them(tmp_path: object) -> None:
    server = start_server(
        tmp_path,  # type: ignore[arg-type]
        env={"VOXPIPE_SERVER__DRAIN_TIMEOUT_S": str(DRAIN_S)},
    )
    try:
        wait_ready(server)
        ask = read_wav(librivox_clips()[1].path)
        finishing = NativeClient(server.ws)  # hangs up after its reply, during the drain
        staying = NativeClient(server.ws)  # never hangs up: closed at the deadline
        await finishing.connect(instructions=BRIEF)
        await staying.connect(instructions=BRIEF)
        finishing.say(*ask)
        await finishing.wait_for(lambda: finishing.turns.get(1), 60)  # the turn has begun

        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        async with httpx.AsyncClient(timeout=5) as http:
            deadline = time.monotonic() + 5
            while (ready := await http.get(f"{server.http}/readyz")).status_code == 200:
                assert time.monotonic() < deadline, "still ready after SIGTERM"
                await asyncio.sleep(0.05)
        assert ready.status_code == 503 and ready.json()["status"] == "draining"

        # A new call is refused with a clear reason while the drain runs.
        async with websockets.connect(server.ws) as late:
            event = json.loads(await asyncio.wait_for(late.recv(), 5))
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(late.recv(), 5)
        assert event["code"] == ErrorCode.SHUTTING_DOWN and late.close_code == 1013

        # The turn in flight is answered in full, then that caller hangs up.
        turn = finishing.turns[1]
        await finishing.wait_for(lambda: turn.complete.is_set(), 60)
        assert turn.status == "completed" and len(turn.audio) > 0
        await finishing.close()

        # The other call is closed at the drain deadline, with a reason and code 1001.
        await staying.wait_for(lambda: staying.errors, DRAIN_S + 10)
        closed_after = time.monotonic() - signalled
        assert staying.errors[-1]["code"] == ErrorCode.SHUTTING_DOWN
        await staying.wait_for(lambda: staying._ws.close_code is not None, 5)
        assert staying._ws.close_code == 1001
        assert DRAIN_S - 1 <= closed_after <= DRAIN_S + 5, closed_after
        await staying.close()
        assert server.process.wait(20) is not None, "the server did not exit after the drain"
    finally:
        server.stop()
