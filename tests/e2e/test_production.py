"""Production behaviour with the real server: auth, admission, slow readers, hang-ups,
reconnects, idle and dead connections."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import websockets

from tests.support import RunningServer, history_of, librivox_clips, start_server, wait_ready
from voxpipe.audio.pcm import float_to_pcm16, read_wav
from voxpipe.clients.native_client import NativeClient
from voxpipe.conversation.events import ErrorCode

pytestmark = pytest.mark.e2e

KEY = "test-key-1"
TOKEN_SECRET = "test-token-secret-of-at-least-32-characters"
MAX_CALLS = 3
IDLE_S = 4
HEARTBEAT_S = 1.0
SEND_BUFFER_MS = 1000
BRIEF = "You are a voice assistant. Answer every message with one short sentence."
STORYTELLER = (
    "You are a storyteller on a phone call. Whatever the caller says, answer with a long story "
    "of at least six full sentences."
)


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server with auth on, a small capacity, short timeouts and a small send buffer."""
    server = start_server(
        tmp_path_factory.mktemp("prod"),
        env={
            "VOXPIPE_AUTH__API_KEYS": json.dumps([KEY, "second-key"]),
            "VOXPIPE_AUTH__TOKEN_SECRET": TOKEN_SECRET,
            "VOXPIPE_LIMITS__MAX_CALLS": str(MAX_CALLS),
            "VOXPIPE_LIMITS__SEND_BUFFER_MS": str(SEND_BUFFER_MS),
            "VOXPIPE_SERVER__IDLE_TIMEOUT_S": str(IDLE_S),
            "VOXPIPE_SERVER__HEARTBEAT_S": str(HEARTBEAT_S),
            "VOXPIPE_SERVER__RESUME_GRACE_S": "10",
        },
    )
    try:
        wait_ready(server)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def patient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Long heartbeats: a client that stops reading meets the send-buffer bound first."""
    server = start_server(
        tmp_path_factory.mktemp("patient"),
        env={
            "VOXPIPE_AUTH__API_KEYS": json.dumps([KEY]),
            "VOXPIPE_LIMITS__SEND_BUFFER_MS": str(SEND_BUFFER_MS),
            "VOXPIPE_SERVER__HEARTBEAT_S": "60",
            "VOXPIPE_SERVER__SOCKET_SEND_BUFFER_BYTES": "32768",
        },
    )
    try:
        wait_ready(server)
        yield server
    finally:
        server.stop()


def ws_url(server: RunningServer, **query: str) -> str:
    q = "&".join(f"{k}={v}" for k, v in ({"api_key": KEY} | query).items() if v)
    return f"{server.ws}?{q}" if q else server.ws


async def scrape(server: RunningServer) -> str:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(f"{server.http}/metrics")).text


def metric(text: str, sample: str) -> float:
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def wait_metric(
    server: RunningServer, sample: str, want: float, within_s: float = 15
) -> float:
    deadline = time.monotonic() + within_s
    while True:
        value = metric(await scrape(server), sample)
        if value == want or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.1)


CONNECTED = 'voxpipe_calls{state="connected"}'
DETACHED = 'voxpipe_calls{state="detached"}'


@pytest.fixture(autouse=True)
async def no_call_held(prod: RunningServer) -> None:
    """Every test starts on an empty ``prod``, whatever ran before it: a call whose
    connection vanished (the heartbeat test's, a reconnect's) holds a slot and shows in the
    gauges until its resume grace (10 s) ends."""
    assert await wait_metric(prod, CONNECTED, 0) == 0
    assert await wait_metric(prod, DETACHED, 0) == 0


async def refused(url: str, **connect: Any) -> tuple[dict[str, Any], int]:
    """Connect, expect one error event and a close; returns (event, close code)."""
    async with websockets.connect(url, open_timeout=10, **connect) as ws:
        event = json.loads(await asyncio.wait_for(ws.recv(), 10))
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        assert ws.close_code is not None
        return event, ws.close_code


async def started(url: str, **connect: Any) -> websockets.ClientConnection:
    ws = await websockets.connect(url, open_timeout=10, **connect)
    await ws.send(json.dumps({"type": "session.start"}))
    event = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert event["type"] == "session.started", event
    return ws


# -- authentication -------------------------------------------------------------------


async def test_missing_or_invalid_credentials_are_refused_at_connect(prod: RunningServer) -> None:
    for url, headers, protocols in [
        (prod.ws, None, None),  # nothing at all
        (f"{prod.ws}?api_key=wrong", None, None),
        (prod.ws, {"Authorization": "Bearer wrong"}, None),
        (prod.ws, {"Authorization": "Basic " + KEY}, None),  # not a bearer credential
        (f"{prod.ws}?token=vxt1.e30.forged", None, None),  # a token with a forged signature
    ]:
        event, code = await refused(url, additional_headers=headers, subprotocols=protocols)
        assert event["type"] == "error" and event["code"] == ErrorCode.UNAUTHORIZED, event
        assert code == 1008, (url, headers)


async def test_every_credential_form_is_accepted(prod: RunningServer) -> None:
    for url, headers, protocols in [
        (f"{prod.ws}?api_key={KEY}", None, None),
        (prod.ws, {"Authorization": f"Bearer {KEY}"}, None),
        (prod.ws, {"Authorization": "Bearer second-key"}, None),
        (prod.ws, None, [f"openai-insecure-api-key.{KEY}"]),
    ]:
        ws = await started(url, additional_headers=headers, subprotocols=protocols)
        await ws.close()


async def test_a_browser_token_is_minted_with_a_key_and_accepted(prod: RunningServer) -> None:
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.post(f"{prod.http}/v1/tokens")).status_code == 401
        bad = await http.post(f"{prod.http}/v1/tokens", headers={"Authorization": "Bearer x"})
        assert bad.status_code == 401
        minted = await http.post(
            f"{prod.http}/v1/tokens", headers={"Authorization": f"Bearer {KEY}"}
        )
    assert minted.status_code == 200
    token = minted.json()["token"]
    assert minted.json()["expires_in"] > 0
    ws = await started(f"{prod.ws}?token={token}")
    await ws.close()
    # A token cannot mint another token, and a tampered one is refused.
    async with httpx.AsyncClient(timeout=5) as http:
        again = await http.post(
            f"{prod.http}/v1/tokens", headers={"Authorization": f"Bearer {token}"}
        )
    assert again.status_code == 401
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    event, code = await refused(f"{prod.ws}?token={tampered}")
    assert (event["code"], code) == (ErrorCode.UNAUTHORIZED, 1008)


# -- admission --------------------------------------------------------------------------


async def test_a_call_beyond_capacity_is_refused_not_queued(prod: RunningServer) -> None:
    before = metric(await scrape(prod), 'voxpipe_refused_calls_total{reason="at_capacity"}')
    calls = [await started(ws_url(prod)) for _ in range(MAX_CALLS)]
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            assert (await http.get(f"{prod.http}/readyz")).json()["calls"] == MAX_CALLS
        event, code = await refused(ws_url(prod))
        assert event["code"] == ErrorCode.AT_CAPACITY, event
        assert str(MAX_CALLS) in event["message"]
        assert code == 1013
        text = await scrape(prod)
        assert metric(text, 'voxpipe_refused_calls_total{reason="at_capacity"}') == before + 1
        assert metric(text, CONNECTED) == MAX_CALLS
        # The admitted calls are unaffected: each still answers.
        for ws in calls:
            await ws.send(json.dumps({"type": "ping"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "pong"
    finally:
        await calls[0].close()
    assert await wait_metric(prod, CONNECTED, MAX_CALLS - 1) == MAX_CALLS - 1
    again = await started(ws_url(prod))  # a slot freed by a hang-up is taken at once
    for ws in [again, *calls[1:]]:
        await ws.close()
    assert await wait_metric(prod, CONNECTED, 0) == 0


# -- a client that stops reading ----------------------------------------------------------


async def test_a_client_that_stops_reading_is_closed_and_memory_stays_bounded(
    patient: RunningServer,
) -> None:
    """Every reply frame goes into a send buffer bounded by duration; when the client stops
    reading (its socket buffers full), the call is closed instead of the buffer growing."""
    prod = patient
    ask, rate = read_wav(librivox_clips()[1].path)
    async with NativeClient(ws_url(prod), input_rate=rate) as warm:  # the first turn's buffers
        await warm.connect(instructions=STORYTELLER, output_sample_rate=48000)
        await warm.speak(ask, rate)
    before = metric(await scrape(prod), "voxpipe_slow_consumers_total")
    sock = socket.create_connection(("127.0.0.1", prod.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little
    ws = await websockets.connect(
        ws_url(prod), sock=sock, max_queue=1, open_timeout=10, ping_interval=None
    )
    await ws.send(
        json.dumps(
            {
                "type": "session.start",
                "input_sample_rate": rate,
                "output_sample_rate": 48000,  # ~96 KB/s of reply audio
                "instructions": STORYTELLER,
                "turn": {"interrupt": False},
            }
        )
    )
    pcm = float_to_pcm16(np.concatenate([ask, np.zeros(rate, np.float32)]))
    frame = rate // 50 * 2
    rss: list[float] = []
    closed_at = None
    start = time.monotonic()
    with contextlib.suppress(websockets.ConnectionClosed):
        # Speak, then keep the line open with silence, never reading a message.
        for i in range(0, 90 * 50):
            chunk = pcm[i * frame : (i + 1) * frame] if i * frame < len(pcm) else bytes(frame)
            await ws.send(chunk)
            await asyncio.sleep(0.02)
            if i % 50 == 0:
                text = await scrape(prod)
                rss.append(metric(text, "voxpipe_resident_memory_bytes"))
                if metric(text, "voxpipe_slow_consumers_total") > before:
                    closed_at = time.monotonic() - start
                    break
    ws.transport.abort()
    text = await scrape(prod)
    assert metric(text, "voxpipe_slow_consumers_total") == before + 1, "not closed as slow"
    assert closed_at is not None
    # The send buffer holds at most SEND_BUFFER_MS of audio (96 KB here); what RSS does in
    # the meantime is the models' own working memory for a long reply, far below a leak's.
    assert max(rss) - min(rss) < 160 * 2**20, f"server memory grew by {max(rss) - min(rss):.0f} B"
    assert await wait_metric(prod, CONNECTED, 0) == 0
    assert await wait_metric(prod, DETACHED, 0) == 0, "a slow consumer's call is hung up"
    print(f"slow reader closed after {closed_at:.1f} s; RSS spread {np.ptp(rss) / 2**20:.1f} MiB")


# -- hang-up ---------------------------------------------------------------------------------


async def test_hang_up_mid_generation_stops_all_work(prod: RunningServer) -> None:
    text = await scrape(prod)
    threads_before = metric(text, "voxpipe_threads")
    cleanups = metric(text, "voxpipe_hangup_cleanup_seconds_count")
    ask = read_wav(librivox_clips()[1].path)
    client = NativeClient(ws_url(prod))
    await client.connect(instructions=STORYTELLER)
    client.say(*ask)
    turn = await client.wait_for(lambda: client.turns.get(1), 60)
    await client.wait_for(lambda: turn.first_audio_ns, 60)
    await asyncio.sleep(0.5)  # mid-story: the LLM and the TTS are both busy
    await client._stop_tasks()
    await client._ws.close()  # a hang-up: a clean close, no session.end
    text = await scrape(prod)
    deadline = time.monotonic() + 10
    # The session closes first (timed by the histogram), then the call gives back its slot.
    while metric(text, "voxpipe_hangup_cleanup_seconds_count") == cleanups or metric(
        text, CONNECTED
    ):
        assert time.monotonic() < deadline, "the session was never closed or its slot was kept"
        await asyncio.sleep(0.05)
        text = await scrape(prod)
    # Every task and engine job of the call stopped within 100 ms of the hang-up.
    assert metric(text, 'voxpipe_hangup_cleanup_seconds_bucket{le="0.1"}') == cleanups + 1
    for engine in ("stt", "llm", "tts"):
        assert metric(text, f'voxpipe_engine_queue_depth{{engine="{engine}"}}') == 0
    assert metric(text, DETACHED) == 0, "a hang-up is not a detach"
    assert metric(text, "voxpipe_threads") <= threads_before, "a thread leaked"


# -- reconnect -------------------------------------------------------------------------------


async def test_reconnect_mid_call_neither_duplicates_nor_loses_turns(prod: RunningServer) -> None:
    clips = librivox_clips()
    first, second, third = (read_wav(clips[i].path) for i in (1, 2, 3))
    client = NativeClient(ws_url(prod))
    try:
        await client.connect(instructions=BRIEF)
        one = await client.speak(*first)
        # Drop the connection while the caller is speaking turn 2: the audio the server did
        # not get is resent after the reconnect.
        utt = client.say(*second)
        await asyncio.sleep(utt.frames * 0.02 * 0.5)
        await client.drop()
        assert await wait_metric(prod, DETACHED, 1) == 1
        await asyncio.sleep(0.5)
        resumed = await client.reconnect()
        assert resumed["resumed"] is True and resumed["session_id"] == client.session_id
        two = await client.wait_for(lambda: client.completed_turn(2), 90)
        await client.wait_playback_done()
        # Drop again while the reply to turn 3 is playing: the frames and events sent while
        # the client was away come again, once.
        client.say(*third)
        three = await client.wait_for(lambda: client.turns.get(3), 90)
        await client.wait_for(lambda: three.first_audio_ns, 90)
        await client.drop()
        await asyncio.sleep(1.0)
        again = await client.reconnect()
        assert again["replayed"] > 0, again
        await client.wait_for(lambda: three.complete.is_set(), 90)
        history = await history_of(client)
    finally:
        await client.close()

    assert client.duplicate_frames == [] and client.duplicate_events == []
    assert [t.status for t in (one, two, three)] == ["completed"] * 3
    assert sorted(client.turns) == [1, 2, 3], "a turn was lost or split"
    for turn in (one, two, three):
        seqs = turn.seqs
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "reply frames lost"
        assert len(turn.audio) / 2 / client.output_rate * 1000 == pytest.approx(
            turn.done["audio_ms"], abs=25
        ), "the reply audio received differs from the audio sent"
    users = [m for m in history["messages"] if m["role"] == "user"]
    assert len(users) == 3, history
    words = set(two.transcript.lower().split())
    expected = set(clips[2].text.lower().split())
    assert len(words & expected) >= len(expected) // 2, (two.transcript, clips[2].text)


async def test_resume_of_an_unknown_session_is_refused(prod: RunningServer) -> None:
    async with websockets.connect(ws_url(prod, session_id="nope")) as ws:
        await ws.send(
            json.dumps(
                {"type": "session.start", "session_id": "nope", "resume": {"last_event_id": 3}}
            )
        )
        event = json.loads(await asyncio.wait_for(ws.recv(), 5))
        assert event["code"] == ErrorCode.SESSION_NOT_FOUND, event
        await ws.send(json.dumps({"type": "session.start"}))  # a fresh call still works
        assert json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] == "session.started"


# -- quiet, idle and dead connections -----------------------------------------------------------


async def test_an_idle_call_is_closed_after_the_idle_timeout(prod: RunningServer) -> None:
    ws = await started(ws_url(prod))
    silence = bytes(640)
    start = time.monotonic()
    with contextlib.suppress(websockets.ConnectionClosed):
        while time.monotonic() - start < IDLE_S * 3:
            await ws.send(silence)  # the line is open, but nobody speaks
            with contextlib.suppress(TimeoutError):
                message = await asyncio.wait_for(ws.recv(), 0.02)
                if isinstance(message, str) and json.loads(message)["type"] == "error":
                    assert json.loads(message)["code"] == ErrorCode.IDLE_TIMEOUT
    elapsed = time.monotonic() - start
    assert ws.close_code == 4000, ws.close_code
    assert IDLE_S <= elapsed < IDLE_S + 3


CLIENT_SCRIPT = """
import asyncio, json, sys, websockets
async def main():
    ws = await websockets.connect(sys.argv[1])
    await ws.send(json.dumps({"type": "session.start"}))
    print(json.loads(await ws.recv())["type"], flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


async def test_heartbeats_tell_a_quiet_call_from_a_dead_connection(
    prod: RunningServer, tmp_path: Path
) -> None:
    """Two clients send nothing: one is alive (its library answers pings), one is frozen
    (SIGSTOP: no pong). Only the frozen one is dropped, after about two heartbeats."""
    script = tmp_path / "client.py"
    script.write_text(CLIENT_SCRIPT)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(script), ws_url(prod), stdout=asyncio.subprocess.PIPE
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 20)
            assert line.decode().strip() == "session.started"
        assert await wait_metric(prod, CONNECTED, 2) == 2
        procs[1].send_signal(signal.SIGSTOP)  # the process and its socket go silent
        stopped = time.monotonic()
        assert await wait_metric(prod, CONNECTED, 1, within_s=10 * HEARTBEAT_S) == 1
        detected = time.monotonic() - stopped
        assert detected < IDLE_S, "the dead peer was found by the idle timeout, not heartbeats"
        text = await scrape(prod)
        assert metric(text, DETACHED) == 1, "a dead connection's call waits for a reconnect"
        # The quiet but alive caller is still connected after several heartbeats.
        assert metric(text, CONNECTED) == 1
    finally:
        for proc in procs:
            proc.kill()
            await proc.wait()
    print(f"dead connection detected after {detected:.1f} s (heartbeat {HEARTBEAT_S} s)")
