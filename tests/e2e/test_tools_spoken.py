"""A spoken booking, end to end on the real models: the caller says "book a table for two at
seven tonight under the name Smith" (voiced by Piper), the embedded model calls the
restaurant agent's ``book_table`` (``restaurant_agent.py``) with those details, a row appears
in its database, and the agent speaks a confirmation; over the native protocol (which shows
``tool.started`` and ``tool.finished``) and over Twilio (no protocol change: the turn log
shows the call). If the STT loses the name, the agent asks for it instead of booking under
a name the model made up, and the caller gives it; asked to book with no name at all, the
agent asks for one, and the caller's one-word answer books it.

Each test prints its figures (``-s``): from the end of the caller's speech to the tool's
start, to the tool's phrase or the filler, and to the answer's first audio.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import (
    RunningServer,
    assert_spoken,
    start_server,
    stop_server,
    voiced,
    wait_ready,
)
from voxpipe.clients.native_client import NativeClient
from voxpipe.clients.twilio_client import TwilioLine

pytestmark = pytest.mark.e2e

AGENT = Path(__file__).with_name("restaurant_agent.py")
REQUEST = "Book a table for two people at seven tonight under the name Smith."


@pytest.fixture(scope="module")
def spoken() -> tuple[np.ndarray, int]:
    """The request in Piper's voice, with a little silence around it."""
    return voiced(REQUEST)


@pytest.fixture(scope="module")
def restaurant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    """A server of the restaurant agent, and its bookings database."""
    tmp = tmp_path_factory.mktemp("restaurant")
    db = tmp / "restaurant.sqlite3"
    env = {"VOXPIPE_AGENT": f"{AGENT}:agent", "RESTAURANT_DB": str(db)}
    server = start_server(tmp, env=env)
    try:
        wait_ready(server)
        yield server, db
    finally:
        stop_server(server)


def bookings(db: Path) -> list[tuple[str, int, str, str]]:
    """The rows booked so far; none before the first booking has created the table."""
    with sqlite3.connect(db) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'bookings'").fetchone():
            return []
        return conn.execute("SELECT name, party_size, date, time FROM bookings").fetchall()


def assert_booked_for_smith(arguments: dict[str, Any]) -> None:
    assert str(arguments.get("name", "")).strip().lower() == "smith", arguments
    assert arguments.get("party_size") == 2, arguments


def heard_name(transcript: str) -> str:
    """The word after "name" in what the STT heard, lower case, without punctuation."""
    words = re.findall(r"[a-z']+", transcript.lower())
    return words[words.index("name") + 1] if "name" in words[:-1] else ""


def figures(record: dict[str, Any]) -> dict[str, Any]:
    """What the caller waited through, in ms after the end of their speech."""
    stages = record["stages_ms"]
    tool = record["tools"][0]
    return {
        "tool_started_ms": tool["started_ms"],
        "tool_ms": tool["duration_ms"],
        "filler_ms": stages.get("filler_sent"),
        "tool_phrase_ms": stages.get("tool_phrase_sent"),
        "answer_audio_ms": stages.get("first_audio_sent"),
        "llm_requests": record["llm"].get("requests"),
        "transcript": record.get("transcript"),
        "reply": record.get("reply"),
    }


async def test_a_spoken_booking_calls_the_tool_and_is_confirmed(
    restaurant: tuple[RunningServer, Path], spoken: tuple[np.ndarray, int]
) -> None:
    server, db = restaurant
    async with NativeClient(server.ws) as client:
        await client.connect()
        turn = await client.speak(*spoken, timeout_s=90)

    kinds = [e["type"] for e in turn.events]
    assert "tool.started" in kinds and "tool.finished" in kinds, (turn.transcript, kinds)
    started = next(e for e in turn.events if e["type"] == "tool.started")
    finished = next(e for e in turn.events if e["type"] == "tool.finished")
    assert started["name"] == "book_table" and started["executor"] == "server"
    assert_booked_for_smith(started["arguments"])
    assert finished["call_id"] == started["call_id"] and finished["status"] == "ok"
    assert kinds.index("tool.finished") < kinds.index("response.done")
    # The booking is in the restaurant's database, once.
    rows = bookings(db)
    assert len(rows) == 1 and rows[0][0].lower() == "smith" and rows[0][1] == 2, rows
    # A confirmation was spoken after the tool, and it is the turn's reply.
    assert turn.status == "completed" and turn.reply.strip(), turn.done
    assert_spoken(turn.reply)  # the answer does not read the record out
    assert len(turn.audio) / 2 / client.output_rate > 0.5
    record = turn.metrics
    assert [t["name"] for t in record["tools"]] == ["book_table"]
    assert record["stages_ms"]["first_audio_sent"] > record["tools"][0]["started_ms"]
    print("\nnative:", json.dumps(figures(record)))


async def _turn_record(server: RunningServer, session_id: str, turn: int = 1) -> dict[str, Any]:
    """The turn log's record of the call's ``turn``-th turn, once it is written."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        lines = server.turn_log.read_text().splitlines() if server.turn_log.exists() else []
        turns = [t for t in map(json.loads, lines) if t.get("session_id") == session_id]
        if len(turns) >= turn:
            return turns[turn - 1]
        await asyncio.sleep(0.2)
    raise AssertionError(f"no record of turn {turn}")


async def _say_and_wait(
    line: TwilioLine, server: RunningServer, audio: tuple[np.ndarray, int], turn: int
) -> dict[str, Any]:
    """Say ``audio`` on the line; the turn's record, once its answer has played out."""
    said = line.say(*audio)
    await asyncio.wait_for(said.sent.wait(), 60)
    record = await _turn_record(server, line.stream_sid, turn)
    await line.wait_for(line.played_out, 30)
    return record


def assert_asks_for_the_name(record: dict[str, Any]) -> None:
    """The turn booked nothing and asked for the name it lacked."""
    assert not record["tools"], record
    assert "name" in record["reply"].lower(), record["reply"]


async def test_a_booking_over_twilio_runs_server_side(
    restaurant: tuple[RunningServer, Path], spoken: tuple[np.ndarray, int]
) -> None:
    server, db = restaurant
    before = len(bookings(db))
    async with TwilioLine(f"ws://127.0.0.1:{server.port}/v1/twilio") as line:
        await line.connect()
        record = await _say_and_wait(line, server, spoken, 1)
        # Over 8 kHz u-law Whisper tiny hears "Smith", "smit", and now and then nothing
        # after "the name": then the agent asks for the name rather than book under one of
        # its own, and the caller gives it.
        heard = heard_name(record["transcript"])
        if heard:
            assert heard.startswith("smit"), record["transcript"]  # Smith's, not an invention
        else:
            assert_asks_for_the_name(record)
            # Said alone, the name is heard ("Smith", at times "Smash"): at the end of a
            # sentence on this line it is lost again.
            record = await _say_and_wait(line, server, voiced("Smith."), 2)
            heard = "".join(re.findall(r"[a-z']+", record["transcript"].lower()))
        await line.hang_up()

    (tool,) = record["tools"]
    assert tool["name"] == "book_table" and tool["status"] == "ok", record
    rows = bookings(db)[before:]
    # The booking carries the name as the caller was heard.
    assert heard, record["transcript"]
    assert len(rows) == 1 and rows[0][0].lower() == heard and rows[0][1] == 2, (rows, record)
    assert record["status"] == "completed" and record["reply"].strip()
    assert_spoken(record["reply"])
    assert line.of("media"), "the confirmation was spoken"
    print("\ntwilio:", json.dumps(figures(record)))


async def test_a_booking_with_no_name_asks_for_one_rather_than_invent_it(
    restaurant: tuple[RunningServer, Path],
) -> None:
    """Asked to book with no name, the model fills one in from its instructions' example
    ("Garcia"): the call does not run, the agent asks, and the name the caller then gives is
    the booking's. The answer is one short word said seconds after the caller last spoke,
    which the VAD once missed in some alignments (`silero_vad.py`, `QUIET_RESET_WINDOWS`)."""
    server, db = restaurant
    before = len(bookings(db))
    async with TwilioLine(f"ws://127.0.0.1:{server.port}/v1/twilio") as line:
        await line.connect()
        first = await _say_and_wait(
            line, server, voiced("Book a table for two people at seven tonight."), 1
        )
        assert_asks_for_the_name(first)
        assert bookings(db)[before:] == []
        second = await _say_and_wait(line, server, voiced("Smith."), 2)
        await line.hang_up()

    (tool,) = second["tools"]
    assert tool["name"] == "book_table" and tool["status"] == "ok", second
    rows = bookings(db)[before:]
    heard = "".join(re.findall(r"[a-z']+", second["transcript"].lower()))
    assert len(rows) == 1 and rows[0][0].lower() == heard and rows[0][1] == 2, (rows, second)
    print("\nasked for the name:", json.dumps({"asked": first["reply"], **figures(second)}))
