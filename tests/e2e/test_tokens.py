"""Browser tokens against the real server: a token opens only the transports it names, a
single-use token opens one connection, an expired one none, and a token minted before an
API-key rotation still opens a spoken call after it (the token secret is its own value)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.support import RunningServer, librivox_clips, start_server, wait_ready
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient
from voxpipe.conversation.events import ErrorCode

pytestmark = pytest.mark.e2e

TOKEN_SECRET = "e2e-token-secret-kept-across-key-rotations"
KEYS_BEFORE = {"web": "web-key-before-rotation", "phone": "phone-key-1"}
KEYS_AFTER = {"web": "web-key-after-rotation", "phone": "phone-key-1"}
BRIEF = "You are a voice assistant. Answer every message with one short sentence."


class Servers:
    """One server at a time in its own folder; :meth:`restart` is a new process with another
    key list and the same token secret. ``keys`` are the keys in force, so a test that runs
    after the rotation mints with the new ones."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs = 0
        self.keys = KEYS_BEFORE
        self.current = self._start(KEYS_BEFORE)

    def _start(self, keys: dict[str, str]) -> RunningServer:
        self.runs += 1
        server = start_server(
            self.root / f"run{self.runs}",
            env={
                "VOXPIPE_AUTH__API_KEYS": json.dumps(keys),
                "VOXPIPE_AUTH__TOKEN_SECRET": TOKEN_SECRET,
            },
        )
        wait_ready(server)
        return server

    def restart(self, keys: dict[str, str]) -> RunningServer:
        self.current.stop()
        self.current = self._start(keys)
        self.keys = keys
        return self.current


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    running = Servers(tmp_path_factory.mktemp("tokens"))
    try:
        yield running
    finally:
        running.current.stop()


async def mint(server: RunningServer, key: str, **request: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(
            f"{server.http}/v1/tokens", headers={"Authorization": f"Bearer {key}"}, json=request
        )
    assert answer.status_code == 200, answer.text
    minted: dict[str, Any] = answer.json()
    return minted


def url(server: RunningServer, path: str, token: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}?token={token}"


async def refused(ws_url: str) -> tuple[str | None, int]:
    """Connect and expect a refusal: the error text (None when the transport has none, as
    Twilio) and the close code."""
    async with websockets.connect(ws_url, open_timeout=10) as ws:
        text = None
        with pytest.raises(websockets.ConnectionClosed):
            text = str(await asyncio.wait_for(ws.recv(), 10))
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code is not None
        return text, ws.close_code


async def starts(ws_url: str) -> dict[str, Any]:
    async with websockets.connect(ws_url, open_timeout=10) as ws:
        await ws.send(json.dumps({"type": "session.start"}))
        event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
        return event


async def test_a_token_for_native_opens_no_other_transport(servers: Servers) -> None:
    server = servers.current
    minted = await mint(server, servers.keys["web"], subject="alice", transports=["native"])
    assert minted["principal"] == "key:web/alice" and minted["transports"] == ["native"]
    token = minted["token"]
    assert await refused(url(server, "/v1/twilio", token)) == (None, 1008)
    text, code = await refused(url(server, "/v1/realtime", token) + "&model=x")
    assert code == 1008 and text is not None
    error = json.loads(text)["error"]
    assert error["code"] == ErrorCode.UNAUTHORIZED
    assert "does not open realtime (it allows: native)" in error["message"]
    started = await starts(url(server, "/v1/voice", token))
    assert started["type"] == "session.started", started


async def test_a_single_use_token_is_refused_the_second_time(servers: Servers) -> None:
    server = servers.current
    token = (await mint(server, servers.keys["web"], single_use=True))["token"]
    assert (await starts(url(server, "/v1/voice", token)))["type"] == "session.started"
    text, code = await refused(url(server, "/v1/voice", token))
    assert code == 1008 and text is not None
    error = json.loads(text)
    assert error["code"] == ErrorCode.UNAUTHORIZED and "already used" in error["message"]


async def test_an_expired_token_is_refused(servers: Servers) -> None:
    server = servers.current
    minted = await mint(server, servers.keys["web"], ttl_s=1)
    assert minted["expires_in"] == 1
    await asyncio.sleep(2.1)  # the expiry is whole seconds: past it for certain
    text, code = await refused(url(server, "/v1/voice", minted["token"]))
    assert code == 1008 and text is not None
    error = json.loads(text)
    assert error["code"] == ErrorCode.UNAUTHORIZED
    assert error["message"] == "token expired (in ?token=)", error  # where it was presented


async def test_a_token_outlives_the_rotation_of_the_key_that_minted_it(servers: Servers) -> None:
    """It restarts the module's server with the web key rotated (``servers.keys`` follows)."""
    assert servers.keys == KEYS_BEFORE, "the module's server rotates once"
    before = servers.current
    minted = await mint(before, KEYS_BEFORE["web"], subject="alice")
    started_at = time.monotonic()
    after = servers.restart(KEYS_AFTER)
    assert time.monotonic() - started_at < minted["expires_in"], "restart outlived the token"
    # The old key is gone; the new one works; the old key's token still opens a spoken call.
    async with httpx.AsyncClient(timeout=10) as http:
        old = await http.post(
            f"{after.http}/v1/tokens", headers={"Authorization": f"Bearer {KEYS_BEFORE['web']}"}
        )
    assert old.status_code == 401 and old.json()["code"] == ErrorCode.UNAUTHORIZED
    assert (await mint(after, KEYS_AFTER["web"]))["principal"] == "key:web"
    clip = librivox_clips()[0]
    audio, rate = read_wav(clip.path)
    async with NativeClient(url(after, "/v1/voice", minted["token"]), input_rate=rate) as client:
        await client.connect(instructions=BRIEF)
        turn = await client.speak(audio, rate)
    assert turn.status == "completed", turn.done
    assert turn.transcript.strip() and turn.reply.strip() and turn.audio
