"""Calls belong to whoever opened them, on the real server with two API keys: another key
can neither resume a live call, read it, nor take its id; an ended id starts a new record;
and a call whose server was SIGKILLed is marked crashed, keeps its turns, and can be taken
back by its owner."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from tests.support import RunningServer, history_of, librivox_clips, start_server, wait_ready
from voxpipe.audio.pcm import read_wav
from voxpipe.clients.native_client import NativeClient
from voxpipe.conversation.events import ErrorCode
from voxpipe.server.store import list_calls, show_call

pytestmark = pytest.mark.e2e

KEY_A = "tenant-a-key-0123456789"
KEY_B = "tenant-b-key-9876543210"
TOKEN_SECRET = "ownership-test-token-secret-0123456789"
BRIEF = "You are a voice assistant. Answer every message with one short sentence."
CALL_ID = "acme-support-call-0001"


def server_env(**extra: str) -> dict[str, str]:
    return {
        "VOXPIPE_AUTH__API_KEYS": json.dumps([KEY_A, KEY_B]),
        "VOXPIPE_AUTH__TOKEN_SECRET": TOKEN_SECRET,
        "VOXPIPE_SERVER__RESUME_GRACE_S": "20",
        "VOXPIPE_SERVER__LOG_LEVEL": "info",
        **extra,
    }


@pytest.fixture(scope="module")
def two_keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("owners"), env=server_env())
    try:
        wait_ready(server)
        yield server
    finally:
        server.stop()


def url(server: RunningServer, key: str, **query: str) -> str:
    q = "&".join(f"{k}={v}" for k, v in ({"api_key": key} | query).items())
    return f"{server.ws}?{q}"


async def first_answer(ws: Any, timeout_s: float = 10) -> dict[str, Any]:
    """The first JSON event on a raw connection (binary audio is skipped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        message = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
        if isinstance(message, str):
            event: dict[str, Any] = json.loads(message)
            return event


async def answer_to(ws: Any, event: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps(event))
    return await first_answer(ws)


def records(server: RunningServer, session_id: str, count: int) -> list[dict[str, Any]]:
    """The call records of ``session_id``, once ``count`` of them are written."""
    deadline = time.monotonic() + 10
    while True:
        found = [c for c in list_calls(server.store_path) if c["session_id"] == session_id]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def stored_turns(server: RunningServer, session_id: str, turns: list[int]) -> None:
    """Wait (10 s at most, once its record is written) until the store holds ``turns`` of
    ``session_id``'s call."""
    calls = [call["call_id"] for call in records(server, session_id, 1)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for call_id in calls:
            shown = show_call(server.store_path, call_id)
            if shown is not None and [t["turn_id"] for t in shown["turns"]] == turns:
                return
        time.sleep(0.1)


def ended_call(server: RunningServer, call_id: str) -> dict[str, Any]:
    """One call's record once its end is written (the store writes behind the call)."""
    deadline = time.monotonic() + 10
    while True:
        call = show_call(server.store_path, call_id)
        if call is not None and call["end_reason"] is not None:
            return call
        assert time.monotonic() < deadline, f"call {call_id} never ended: {call}"
        time.sleep(0.1)


async def test_another_key_cannot_resume_read_or_take_a_live_call(two_keys: RunningServer) -> None:
    clips = librivox_clips()
    owner = NativeClient(url(two_keys, KEY_A))
    try:
        await owner.connect(session_id=CALL_ID, instructions=BRIEF)
        one = await owner.speak(*read_wav(clips[1].path))
        assert one.transcript and one.reply

        # Caller B guesses the id and resumes from the very start, to be replayed everything.
        async with websockets.connect(url(two_keys, KEY_B, session_id=CALL_ID)) as ws:
            resume = {"last_event_id": 0, "last_audio_seq": 0}
            start = {"type": "session.start", "session_id": CALL_ID, "resume": resume}
            refused = await answer_to(ws, start)
            assert refused["type"] == "error" and refused["code"] == ErrorCode.SESSION_NOT_FOUND
            # Word for word what an id that never existed gets: nothing tells B it is live.
            ghost = await answer_to(ws, {**start, "session_id": "no-such-call-0001"})
            assert ghost["code"] == refused["code"]
            assert ghost["message"] == refused["message"].replace(CALL_ID, "no-such-call-0001")
            # Nothing of A's call reached B: no transcript, no reply text, no history.
            history = await answer_to(ws, {"type": "history.get"})
            assert history["code"] == ErrorCode.NOT_STARTED
            # Nor can B start its own call under A's id.
            taken = await answer_to(ws, {"type": "session.start", "session_id": CALL_ID})
            assert taken["code"] == ErrorCode.SESSION_ID_TAKEN, taken
            assert one.reply not in json.dumps([refused, ghost, history, taken])

        # A's call is untouched: still connected (no 4003), and it goes on.
        two = await owner.speak(*read_wav(clips[2].path))
        assert two.transcript and two.reply
        users = [m for m in (await history_of(owner))["messages"] if m["role"] == "user"]
        assert len(users) == 2, users
        assert not any(e.get("code") == ErrorCode.SESSION_REPLACED for e in owner.errors)

        # The owner itself can take its call over on a new connection.
        await owner.drop()
        resumed = await owner.reconnect(retry_s=5)
        assert resumed["resumed"] is True and resumed["session_id"] == CALL_ID
    finally:
        await owner.close()


async def test_an_ended_id_reused_by_another_key_starts_a_new_record(
    two_keys: RunningServer,
) -> None:
    clips = librivox_clips()
    session_id = "reused-call-id-0002"
    async with NativeClient(url(two_keys, KEY_A)) as a:
        await a.connect(session_id=session_id, instructions=BRIEF)
        first = await a.speak(*read_wav(clips[3].path))
    [a_record] = records(two_keys, session_id, 1)
    a_before = ended_call(two_keys, a_record["call_id"])
    assert a_before["end_reason"] == "hangup"

    # Ended: nobody can resume it, not even its owner ...
    async with websockets.connect(url(two_keys, KEY_A, session_id=session_id)) as ws:
        resume = {"last_event_id": 0, "last_audio_seq": 0}
        gone = await answer_to(
            ws, {"type": "session.start", "session_id": session_id, "resume": resume}
        )
        assert gone["code"] == ErrorCode.SESSION_NOT_FOUND
    # ... and its id is free: B's new call gets a record of its own.
    async with NativeClient(url(two_keys, KEY_B)) as b:
        started = await b.connect(session_id=session_id, instructions=BRIEF)
        assert started["resumed"] is False
        await b.speak(*read_wav(clips[4].path))
        users = [m for m in (await history_of(b))["messages"] if m["role"] == "user"]
        assert len(users) == 1, "B's call must not see A's turns"

    both = records(two_keys, session_id, 2)
    assert len(both) == 2 and len({c["call_id"] for c in both}) == 2
    assert len({c["owner"] for c in both}) == 2
    a_after = ended_call(two_keys, a_record["call_id"])
    # A's record is exactly as it was: B's turn 1 did not overwrite A's turn 1, nor its end.
    for key in ("messages", "turns", "ended_at", "end_reason", "counts", "owner"):
        assert a_after[key] == a_before[key], key
    assert first.transcript in [m["text"] for m in a_after["messages"]]


async def test_a_call_whose_server_was_killed_is_marked_crashed_and_taken_back(
    tmp_path: Path,
) -> None:
    """SIGKILL mid-call, restart on the same store: the call shows ``crashed`` with every
    completed turn, and its owner's reconnect takes it back."""
    clips = librivox_clips()
    env = server_env(VOXPIPE_SERVER__WORKER_ID="crash-test-worker")
    server = start_server(tmp_path, env=env)
    session_id = "crash-call-0003"
    client = NativeClient(url(server, KEY_A))
    try:
        wait_ready(server)
        await client.connect(session_id=session_id, instructions=BRIEF)
        turns = [await client.speak(*read_wav(clips[i].path)) for i in (1, 2)]
        assert all(t.transcript and t.reply for t in turns)
        # The store writes as the call goes, off the turn's path: the kill comes once both
        # turns are written, as a crash after them would find them.
        await asyncio.to_thread(stored_turns, server, session_id, [1, 2])
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
        await client._stop_tasks()
    finally:
        if server.alive():
            server.stop()

    # Before the restart the killed call still looks live: nothing could mark it.
    [live] = records(server, session_id, 1)
    assert live["end_reason"] is None

    again = start_server(tmp_path, env=env)
    try:
        wait_ready(again)
        [crashed] = records(again, session_id, 1)
        assert crashed["end_reason"] == "crashed" and crashed["ended_at"], crashed
        shown = show_call(again.store_path, crashed["call_id"])
        assert shown is not None
        users = [m["text"] for m in shown["messages"] if m["role"] == "user"]
        assert users == [t.transcript for t in turns]  # every completed turn is kept
        assert len([m for m in shown["messages"] if m["role"] == "assistant"]) == 2
        assert [t["turn_id"] for t in shown["turns"]] == [1, 2]
        cli = [sys.executable, "-m", "voxpipe.cli", "calls", "--db", str(again.store_path)]
        ran = await asyncio.to_thread(subprocess.run, cli, capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr
        listing = ran.stdout
        assert any(session_id in line and "crashed" in line for line in listing.splitlines())

        # Another key cannot take it back; its owner can, on the restarted server.
        async with websockets.connect(url(again, KEY_B, session_id=session_id)) as ws:
            resume = {"last_event_id": 0, "last_audio_seq": 0}
            refused = await answer_to(
                ws, {"type": "session.start", "session_id": session_id, "resume": resume}
            )
            assert refused["code"] == ErrorCode.SESSION_NOT_FOUND
        client.url = url(again, KEY_A)
        resumed = await client.reconnect(retry_s=5)
        assert resumed["resumed"] is True and resumed["restored"] is True
        [back] = records(again, session_id, 1)
        deadline = time.monotonic() + 10
        while back["end_reason"] is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            [back] = records(again, session_id, 1)
        assert back["end_reason"] is None and back["call_id"] == crashed["call_id"]
        three = await client.speak(*read_wav(clips[3].path))
        assert three.turn_id == 3 and three.reply
    finally:
        await client.close()
        again.stop()
