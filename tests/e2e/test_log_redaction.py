"""No API key or token in the server's log: calls with every kind of credential on the real
server at debug level (where the handshake's headers are logged too), then a grep of all it
wrote. The requests themselves are logged, with the credential's value redacted."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import uuid
from pathlib import Path

import httpx
import pytest
import websockets

from tests.support import librivox_clips, start_server, wait_ready
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient
from voxpipe.clients.twilio_client import TwilioLine
from voxpipe.server.local_cluster import LocalCluster, free_port_run

pytestmark = pytest.mark.e2e

KEY_A = "alpha-key-3f9d2c7e51b84a06"
KEY_B = "beta-key-8c1e4b7a92d35f60"
TOKEN_SECRET = "log-test-token-secret-9a8b7c6d5e4f3a2b1c0d"
WRONG_KEY = "not-a-key-5e6f7a8b9c0d"
FORGED_TOKEN = "vxt1.eyJzdWIiOiJrZXk6YWxwaGEifQ.Zm9yZ2VkLXNpZ25hdHVyZQ"
TIMEOUT_S = 30.0


async def start_and_end(url: str, **connect: object) -> None:
    """Open a native call, start it, hang up."""
    async with websockets.connect(url, open_timeout=TIMEOUT_S, **connect) as ws:
        await ws.send(json.dumps({"type": "session.start"}))
        started = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
        assert started["type"] == "session.started", started
        await ws.send(json.dumps({"type": "session.end"}))
        await asyncio.wait_for(ws.wait_closed(), TIMEOUT_S)


async def refused(url: str) -> None:
    async with websockets.connect(url, open_timeout=TIMEOUT_S) as ws:
        event = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT_S))
        assert event["code"] == "unauthorized", event
        await asyncio.wait_for(ws.wait_closed(), TIMEOUT_S)


async def mint(http: httpx.AsyncClient, key: str) -> str:
    minted = await http.post("/v1/tokens", headers={"Authorization": f"Bearer {key}"})
    assert minted.status_code == 200, minted.text
    token: str = minted.json()["token"]
    return token


async def run_calls(http: httpx.AsyncClient, port: int) -> list[str]:
    """Calls on every transport with every credential; the tokens they used."""
    voice, base = f"ws://127.0.0.1:{port}/v1/voice", f"ws://127.0.0.1:{port}/v1"
    clip = librivox_clips()[1]
    async with NativeClient(f"{voice}?api_key={KEY_A}") as client:  # a spoken turn
        await client.connect()
        turn = await client.speak(*read_wav(clip.path), timeout_s=90)
        assert turn.status == "completed", client.errors
    tokens = [await mint(http, KEY_B) for _ in range(3)]  # one per use: tokens may be single-use
    await start_and_end(f"{voice}?token={tokens[0]}")
    page = await http.get(f"/?token={tokens[1]}", headers={"Accept": "text/html"})
    assert page.status_code == 200
    await start_and_end(voice, additional_headers={"Authorization": f"Bearer {KEY_B}"})
    await start_and_end(f"{voice}?session_id=log-test-call&token={tokens[2]}")
    async with websockets.connect(
        f"{base}/realtime?model=gpt-realtime",
        subprotocols=["realtime", f"openai-insecure-api-key.{KEY_A}"],
        open_timeout=TIMEOUT_S,
    ) as rt:
        assert json.loads(await rt.recv())["type"] == "session.created"
    async with TwilioLine(f"{base}/twilio?api_key={KEY_B}") as line:
        await line.connect()
        await asyncio.sleep(0.5)
        assert await line.hang_up() == 1000
    await refused(f"{voice}?api_key={WRONG_KEY}")
    await refused(f"{voice}?token={FORGED_TOKEN}")
    return tokens


def leaks(log: str, tokens: list[str]) -> list[str]:
    """Lines of ``log`` that hold a key, a token, a part of a token, or the token secret."""
    secrets = [KEY_A, KEY_B, TOKEN_SECRET, WRONG_KEY, FORGED_TOKEN, *tokens]
    # Every part of a token that could stand for it (its payload, its signature) too.
    secrets += [part for token in tokens for part in token.split(".")[1:] if len(part) >= 8]
    return [line for line in log.splitlines() if any(s in line for s in secrets)]


def test_no_key_or_token_reaches_the_log(tmp_path: Path) -> None:
    server = start_server(
        tmp_path,
        env={
            "VOXPIPE_AUTH__API_KEYS": json.dumps([KEY_A, KEY_B]),
            "VOXPIPE_AUTH__TOKEN_SECRET": TOKEN_SECRET,
            "VOXPIPE_SERVER__LOG_LEVEL": "debug",
        },
    )
    try:
        wait_ready(server)

        async def calls() -> list[str]:
            async with httpx.AsyncClient(base_url=server.http, timeout=TIMEOUT_S) as http:
                return await run_calls(http, server.port)

        tokens = asyncio.run(calls())
    finally:
        server.stop()  # its last lines are written before it exits
    log = server.log_path.read_text(errors="replace")
    leaked = leaks(log, tokens)
    assert not leaked, "\n".join(leaked[:20])

    # The requests are in the log, their credentials replaced.
    for seen in (
        "/v1/voice?api_key=[redacted]",
        "/v1/voice?token=[redacted]",
        "/v1/voice?session_id=log-test-call&token=[redacted]",
        "/?token=[redacted]",
        "/v1/twilio?api_key=[redacted]",
        "Bearer [redacted]",
        "openai-insecure-api-key.[redacted]",
    ):
        assert seen in log, f"{seen!r} is not in the log"
    assert re.search(r'"WebSocket /v1/voice\?api_key=\[redacted\]" \[accepted\]', log)


async def worker_for(url: str) -> str:
    """The worker nginx hashes ``url``'s session to: the handshake's worker header."""
    async with websockets.connect(url, open_timeout=TIMEOUT_S) as ws:
        assert ws.response is not None
        return ws.response.headers["x-voxpipe-worker"]


async def cluster_calls(cluster: LocalCluster) -> list[str]:
    """Calls through nginx with a key and a token, then more while a worker is dead (nginx
    fails over, and would write an error line quoting each request).

    The sessions called after the kill are ones seen to hash to the killed worker, so that
    nginx fails over for certain, not for about half of them."""
    voice = cluster.ws
    async with httpx.AsyncClient(base_url=cluster.http, timeout=TIMEOUT_S) as http:
        tokens = [await mint(http, KEY_A) for _ in range(2)]
        await start_and_end(f"{voice}?session_id={uuid.uuid4().hex}&api_key={KEY_B}")
        await start_and_end(f"{voice}?session_id={uuid.uuid4().hex}&token={tokens[0]}")
        sessions = [uuid.uuid4().hex for _ in range(8)]
        routed = {s: await worker_for(f"{voice}?session_id={s}&api_key={KEY_A}") for s in sessions}
        victim = max(set(routed.values()), key=list(routed.values()).count)
        doomed_worker = next(
            w for w in map(cluster.worker, cluster.worker_ports) if w["worker"] == victim
        )
        os.kill(int(str(doomed_worker["pid"])), signal.SIGKILL)
        doomed = [s for s in sessions if routed[s] == victim]  # at least 4 of the 8
        for session in doomed[:3]:
            await start_and_end(f"{voice}?session_id={session}&api_key={KEY_A}")
        await start_and_end(f"{voice}?session_id={doomed[3]}&token={tokens[1]}")
    return tokens


def test_no_key_or_token_reaches_the_cluster_s_logs(tmp_path: Path) -> None:
    """``voxpipe cluster``: the supervisor, each worker, nginx's access and error logs."""
    cluster = LocalCluster(
        tmp_path,
        port=free_port_run(3),
        workers=2,
        redis_port=free_port_run(1),
        env={
            "VOXPIPE_AUTH__API_KEYS": json.dumps([KEY_A, KEY_B]),
            "VOXPIPE_AUTH__TOKEN_SECRET": TOKEN_SECRET,
            "VOXPIPE_SERVER__LOG_LEVEL": "info",
        },
    )
    try:
        cluster.start()
        cluster.wait_ready()
        tokens = asyncio.run(cluster_calls(cluster))
    finally:
        cluster.stop()
    logs = {
        path.relative_to(tmp_path).as_posix(): path.read_text(errors="replace")
        for path in [*tmp_path.glob("*.log"), *tmp_path.glob("nginx/*.log")]
    }
    assert {"workers.log", "nginx/access.log"} <= set(logs), sorted(logs)
    for name, log in logs.items():
        leaked = leaks(log, tokens)
        assert not leaked, f"{name}:\n" + "\n".join(leaked[:20])
    workers = logs["workers.log"]
    assert "/v1/voice?session_id=" in workers and "&api_key=[redacted]" in workers
    assert "&token=[redacted]" in workers
    access = logs["nginx/access.log"].splitlines()
    assert len(access) >= 9 and all("uri=/v1/voice" in line for line in access[-9:])
    assert any(re.search(r'upstream="[^"]+, ', line) for line in access), "no failover happened"
    assert 'request: "' not in logs.get("nginx/error.log", ""), "nginx quoted a request line"
