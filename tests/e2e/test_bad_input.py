"""Every kind of bad input a client can send on ``/v1/voice``, against the real server.

Each bad input must get its exact typed ``error`` event (``docs/protocol.md``, "Error codes"),
leave the connection usable where the protocol says it stays open, and never take the server
down. After every test, ``/metrics`` has counted each error it received (a delta of the
shared server's counters, so each test stands alone and the module runs in any order).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.conftest import RESUME_GRACE_S
from tests.support import RunningServer, assert_server_up, metric_value, metrics_text
from voxpipe.config import Config
from voxpipe.conversation.events import ErrorCode

pytestmark = pytest.mark.e2e

# The limits the server runs under: it reads the same environment as this process.
CONFIG = Config.load()
MAX_MESSAGE_BYTES = CONFIG.server.max_message_bytes
HARD_LIMIT_BYTES = 4 * MAX_MESSAGE_BYTES  # uvicorn's ws_max_size (voxpipe/cli.py)
MAX_FRAME_MS = CONFIG.audio.max_frame_ms
MIN_RATE, MAX_RATE = CONFIG.audio.min_sample_rate, CONFIG.audio.max_sample_rate
START_TIMEOUT_S = CONFIG.server.start_timeout_s
REPLY_TIMEOUT_S = 10.0
CLOSE_NORMAL, CLOSE_POLICY, CLOSE_TOO_BIG = 1000, 1008, 1009

# Error codes the running test has received (reset for each test by `errors_are_counted`).
_received: Counter[str] = Counter()


@pytest.fixture(autouse=True)
async def errors_are_counted(server: RunningServer) -> AsyncIterator[None]:
    """Every error a test received, /metrics counted: the server's ``voxpipe_errors_total``
    grew by at least as many of each code during the test (other calls may add more)."""
    _received.clear()
    before = await metrics_text(server)
    yield
    after = await metrics_text(server)
    for code, count in _received.items():
        sample = f'voxpipe_errors_total{{code="{code}"}}'
        grown = (metric_value(after, sample) or 0) - (metric_value(before, sample) or 0)
        assert grown >= count, (code, grown, count)


# -- helpers ------------------------------------------------------------------


@asynccontextmanager
async def connect(server: RunningServer) -> AsyncIterator[ClientConnection]:
    async with websockets.connect(server.ws, max_size=None, open_timeout=30, close_timeout=5) as ws:
        yield ws


async def next_event(ws: ClientConnection, timeout_s: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
    """The next JSON event from the server (reply audio, if any, is skipped)."""
    async with asyncio.timeout(timeout_s):
        while True:
            message = await ws.recv()
            if isinstance(message, str):
                event = json.loads(message)
                assert isinstance(event, dict), message
                return event


async def expect_error(ws: ClientConnection, code: ErrorCode) -> dict[str, Any]:
    event = await next_event(ws)
    assert event.get("type") == "error", event
    assert event.get("code") == code.value, event
    assert isinstance(event.get("message"), str) and event["message"], event
    _received[code.value] += 1
    return event


async def expect_close(ws: ClientConnection, code: int) -> None:
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await asyncio.wait_for(ws.recv(), REPLY_TIMEOUT_S)
    assert closed.value.rcvd is not None, "closed without a close frame"
    assert closed.value.rcvd.code == code, closed.value


async def send_json(ws: ClientConnection, payload: object) -> None:
    await ws.send(json.dumps(payload))


async def start(ws: ClientConnection, **fields: Any) -> dict[str, Any]:
    """session.start, answered by session.started: the connection takes a call."""
    await send_json(ws, {"type": "session.start", **fields})
    event = await next_event(ws)
    assert event.get("type") == "session.started", event
    return event


async def update(ws: ClientConnection, **turn: Any) -> dict[str, Any]:
    """session.update, answered by session.updated: a started session still listens."""
    await send_json(ws, {"type": "session.update", "turn": turn})
    event = await next_event(ws)
    assert event.get("type") == "session.updated", event
    for key, value in turn.items():
        assert event["config"]["turn"][key] == value, event
    return event


def silence(rate: int, ms: int) -> bytes:
    return bytes(2 * (rate * ms // 1000))


def max_frame_bytes(rate: int) -> int:
    return rate * MAX_FRAME_MS // 1000 * 2


# -- text that is not an event ------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "not json",
        "",
        "   ",
        '{"type": "session.start",}',
        "{'type': 'session.start'}",
        "[1, 2",
    ],
)
async def test_malformed_json(server: RunningServer, text: str) -> None:
    async with connect(server) as ws:
        await ws.send(text)
        await expect_error(ws, ErrorCode.INVALID_JSON)
        await start(ws)
    await assert_server_up(server)


async def test_deeply_nested_json(server: RunningServer) -> None:
    async with connect(server) as ws:
        await ws.send("[" * 100_000)  # 100 kB, well under max_message_bytes
        await expect_error(ws, ErrorCode.INVALID_JSON)
        await start(ws)
    await assert_server_up(server)


async def test_integer_too_long_to_parse(server: RunningServer) -> None:
    async with connect(server) as ws:
        await ws.send('{"type": "session.start", "input_sample_rate": ' + "1" * 5000 + "}")
        await expect_error(ws, ErrorCode.INVALID_JSON)
        await start(ws)
    await assert_server_up(server)


@pytest.mark.parametrize(
    "payload",
    [
        [],
        ["session.start"],
        "session.start",
        42,
        None,
        True,
        {},
        {"kind": "session.start"},
        {"type": None},
        {"type": 5},
        {"type": ["session.start"]},
        {"type": {"name": "session.start"}},
    ],
    ids=repr,
)
async def test_json_that_is_not_an_event(server: RunningServer, payload: object) -> None:
    async with connect(server) as ws:
        await send_json(ws, payload)
        await expect_error(ws, ErrorCode.INVALID_EVENT)
        await start(ws)
    await assert_server_up(server)


@pytest.mark.parametrize(
    "kind",
    ["response.create", "", "SESSION.START", "session.start ", "x" * 10_000],
    ids=["response.create", "empty", "upper case", "trailing space", "10k chars"],
)
async def test_unknown_event_type(server: RunningServer, kind: str) -> None:
    async with connect(server) as ws:
        await send_json(ws, {"type": kind})
        error = await expect_error(ws, ErrorCode.UNKNOWN_EVENT)
        assert len(error["message"]) < 200, "the echoed type must be truncated"
        await start(ws)
        await send_json(ws, {"type": kind})  # the same answer inside a session
        await expect_error(ws, ErrorCode.UNKNOWN_EVENT)
        await update(ws, silence_ms=600)
    await assert_server_up(server)


# -- events in the wrong state ------------------------------------------------


@pytest.mark.parametrize("frame", [silence(16000, 20), b"\x00", b""], ids=["20ms", "odd", "empty"])
async def test_audio_before_session_start(server: RunningServer, frame: bytes) -> None:
    async with connect(server) as ws:
        await ws.send(frame)
        await expect_error(ws, ErrorCode.NOT_STARTED)
        await start(ws)
        await ws.send(silence(16000, 20))
        await update(ws, silence_ms=600)  # the frame was taken without an error
    await assert_server_up(server)


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "session.update", "turn": {"silence_ms": 600}},
        {"type": "session.update"},
        {"type": "session.update", "bogus": 1},
    ],
    ids=["valid", "empty", "invalid"],
)
async def test_session_update_before_session_start(
    server: RunningServer, payload: dict[str, Any]
) -> None:
    async with connect(server) as ws:
        await send_json(ws, payload)
        await expect_error(ws, ErrorCode.NOT_STARTED)
        await start(ws)
        await update(ws, silence_ms=600)
    await assert_server_up(server)


async def test_session_start_twice(server: RunningServer) -> None:
    async with connect(server) as ws:
        first = await start(ws, session_id="first-call", input_sample_rate=16000)
        await send_json(ws, {"type": "session.start", "session_id": "second-call"})
        await expect_error(ws, ErrorCode.ALREADY_STARTED)
        await send_json(ws, {"type": "session.start", "input_sample_rate": 0})  # even a bad one
        await expect_error(ws, ErrorCode.ALREADY_STARTED)
        assert first["session_id"] == "first-call"
        await ws.send(silence(16000, 20))  # the first session, at its rate, is still in force
        await update(ws, silence_ms=600)
    await assert_server_up(server)


# -- session.start fields -----------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        # unknown fields
        {"bogus": 1},
        {"input_rate": 16000},
        {"turn": {"bogus": 1}},
        {"turn": {"release_threshold": 0.3}},  # a server setting, not a per-call option
        # wrong types
        {"session_id": 5},
        {"instructions": ["be brief"]},
        {"turn": "fast"},
        {"turn": [500]},
        {"turn": {"interrupt": "maybe"}},
        {"turn": {"silence_ms": 500.5}},
        {"turn": {"threshold": "high"}},
        # out of range
        {"session_id": ""},
        {"session_id": "x" * 129},
        {"instructions": "x" * 8001},
        {"turn": {"threshold": 0}},
        {"turn": {"threshold": 1}},
        {"turn": {"threshold": -0.1}},
        {"turn": {"threshold": 1.5}},
        {"turn": {"silence_ms": 31}},
        {"turn": {"silence_ms": 5001}},
        {"turn": {"prefix_padding_ms": -1}},
        {"turn": {"prefix_padding_ms": 2001}},
        {"turn": {"min_speech_ms": 2001}},
        {"turn": {"min_interruption_ms": 3001}},
        {"turn": {"preempt_ms": -1}},
        {"turn": {"preempt_ms": 5001}},
        {"turn": {"preempt_ms": 10}},  # in TurnOptions' range, below TurnConfig's 32 ms floor
    ],
    ids=lambda fields: json.dumps(fields)[:60],
)
async def test_session_start_invalid_fields(server: RunningServer, fields: dict[str, Any]) -> None:
    async with connect(server) as ws:
        await send_json(ws, {"type": "session.start", **fields})
        await expect_error(ws, ErrorCode.INVALID_EVENT)
        await start(ws)
    await assert_server_up(server)


@pytest.mark.parametrize(
    "fields",
    [
        {"input_sample_rate": "16000"},
        {"input_sample_rate": True},
        {"output_sample_rate": "22050"},
        {"turn": {"silence_ms": "600"}},
        {"turn": {"interrupt": "yes"}},
        {"turn": {"interrupt": 1}},
    ],
    ids=lambda fields: json.dumps(fields),
)
async def test_session_start_wrong_types_are_not_coerced(
    server: RunningServer, fields: dict[str, Any]
) -> None:
    async with connect(server) as ws:
        await send_json(ws, {"type": "session.start", **fields})
        await expect_error(ws, ErrorCode.INVALID_EVENT)
        await start(ws)
    await assert_server_up(server)


@pytest.mark.parametrize(
    "rate, code",
    [
        (0, ErrorCode.UNSUPPORTED_SAMPLE_RATE),
        (MIN_RATE - 1, ErrorCode.UNSUPPORTED_SAMPLE_RATE),
        (MAX_RATE + 1, ErrorCode.UNSUPPORTED_SAMPLE_RATE),
        (10**9, ErrorCode.UNSUPPORTED_SAMPLE_RATE),
        (10**30, ErrorCode.UNSUPPORTED_SAMPLE_RATE),
        (-5, ErrorCode.UNSUPPORTED_SAMPLE_RATE),
        (16000.5, ErrorCode.INVALID_EVENT),
        ("16k", ErrorCode.INVALID_EVENT),
        ([16000], ErrorCode.INVALID_EVENT),
        ({"hz": 16000}, ErrorCode.INVALID_EVENT),
        (float("nan"), ErrorCode.INVALID_EVENT),  # Python's json reads NaN and Infinity
        (float("inf"), ErrorCode.INVALID_EVENT),
    ],
    ids=lambda value: value.value if isinstance(value, ErrorCode) else repr(value),
)
@pytest.mark.parametrize("field", ["input_sample_rate", "output_sample_rate"])
async def test_absurd_sample_rate(
    server: RunningServer, field: str, rate: object, code: ErrorCode
) -> None:
    async with connect(server) as ws:
        await send_json(ws, {"type": "session.start", field: rate})
        await expect_error(ws, code)
        await start(ws)
    await assert_server_up(server)


@pytest.mark.parametrize("rate", [MIN_RATE, MAX_RATE])
@pytest.mark.parametrize("field", ["input_sample_rate", "output_sample_rate"])
async def test_sample_rate_at_the_limits_is_accepted(
    server: RunningServer, field: str, rate: int
) -> None:
    async with connect(server) as ws:
        started = await start(ws, **{field: rate})
        assert started[field] == rate
        if field == "input_sample_rate":
            await ws.send(silence(rate, 20))
            await ws.send(bytes(max_frame_bytes(rate)))  # the longest frame allowed
        await update(ws, silence_ms=600)
    await assert_server_up(server)


async def test_session_update_invalid_turn_options(server: RunningServer) -> None:
    async with connect(server) as ws:
        await start(ws, turn={"silence_ms": 700})
        for turn in ({"silence_ms": 31}, {"threshold": 2}, {"bogus": 1}, "fast"):
            await send_json(ws, {"type": "session.update", "turn": turn})
            await expect_error(ws, ErrorCode.INVALID_EVENT)
        await send_json(ws, {"type": "session.update", "extra": True})
        await expect_error(ws, ErrorCode.INVALID_EVENT)
        updated = await update(ws, threshold=0.6)
        assert updated["config"]["turn"]["silence_ms"] == 700, "a refused update changed nothing"
    await assert_server_up(server)


# -- audio frames -------------------------------------------------------------


@pytest.mark.parametrize("rate", [MIN_RATE, 16000, MAX_RATE])
@pytest.mark.parametrize(
    "size",
    ["odd", "one byte", "empty", "too long"],
)
async def test_bad_audio_frame(server: RunningServer, rate: int, size: str) -> None:
    longest = max_frame_bytes(rate)
    frame = {
        "odd": bytes(641),
        "one byte": b"\x01",
        "empty": b"",
        "too long": bytes(longest + 2),
    }[size]
    async with connect(server) as ws:
        await start(ws, input_sample_rate=rate)
        await ws.send(frame)
        await expect_error(ws, ErrorCode.BAD_AUDIO_FRAME)
        await ws.send(b"\x00\x00")  # one sample is a valid frame
        await ws.send(bytes(longest))  # so is max_frame_ms exactly
        await update(ws, silence_ms=600)  # neither of them was refused
    await assert_server_up(server)


# -- message size -------------------------------------------------------------


def _padded_event(size: int, fill: str = "a") -> str:
    """A JSON event of exactly ``size`` UTF-8 bytes, padded with ``fill`` (and ASCII to fit)."""
    head, tail = '{"type": "padding.test", "pad": "', '"}'
    room = size - len(head) - len(tail)
    count, rest = divmod(room, len(fill.encode()))
    text = head + fill * count + "a" * rest + tail
    assert len(text.encode()) == size
    return text


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(bytes(MAX_MESSAGE_BYTES + 2), id="binary just over"),
        pytest.param(bytes(HARD_LIMIT_BYTES), id="binary at the hard limit"),
        pytest.param(_padded_event(MAX_MESSAGE_BYTES + 1), id="text just over"),
        pytest.param(_padded_event(HARD_LIMIT_BYTES), id="text at the hard limit"),
        # under the limit in characters, over it in bytes
        pytest.param(_padded_event(MAX_MESSAGE_BYTES + 2, "é"), id="text over in bytes"),
    ],
)
@pytest.mark.parametrize("started", [False, True], ids=["before start", "in session"])
async def test_oversized_message(
    server: RunningServer, message: str | bytes, started: bool
) -> None:
    async with connect(server) as ws:
        if started:
            await start(ws)
        await ws.send(message)
        await expect_error(ws, ErrorCode.MESSAGE_TOO_LARGE)
        if started:
            await update(ws, silence_ms=600)
        else:
            await start(ws)
    await assert_server_up(server)


async def test_message_of_exactly_max_bytes_is_handled(server: RunningServer) -> None:
    async with connect(server) as ws:
        await ws.send(bytes(MAX_MESSAGE_BYTES))
        await expect_error(ws, ErrorCode.NOT_STARTED)  # not message_too_large
        await ws.send(_padded_event(MAX_MESSAGE_BYTES))
        await expect_error(ws, ErrorCode.UNKNOWN_EVENT)  # parsed, not refused for its size
        await start(ws)
    await assert_server_up(server)


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(bytes(HARD_LIMIT_BYTES + 1), id="binary"),
        pytest.param("a" * (HARD_LIMIT_BYTES + 1), id="text"),
    ],
)
async def test_message_over_the_hard_limit_closes_1009(
    server: RunningServer, message: str | bytes
) -> None:
    async with connect(server) as bystander:
        await start(bystander)
        async with connect(server) as ws:
            await ws.send(message)
            await expect_close(ws, CLOSE_TOO_BIG)
        await update(bystander, silence_ms=600)  # other calls are unaffected
    async with connect(server) as ws:
        await start(ws)
    await assert_server_up(server)


# -- the start deadline -------------------------------------------------------


async def test_no_session_start_in_time(server: RunningServer) -> None:
    async with connect(server) as idle, connect(server) as caller:
        opened = time.monotonic()
        await start(caller)
        await idle.send("{")  # a refused message is not a start
        await expect_error(idle, ErrorCode.INVALID_JSON)
        await send_json(idle, {"type": "session.start", "input_sample_rate": 0})
        await expect_error(idle, ErrorCode.UNSUPPORTED_SAMPLE_RATE)
        event = await next_event(idle, timeout_s=START_TIMEOUT_S + 5)
        waited = time.monotonic() - opened
        assert event.get("type") == "error" and event.get("code") == ErrorCode.START_TIMEOUT, event
        _received[ErrorCode.START_TIMEOUT.value] += 1
        assert START_TIMEOUT_S - 1 <= waited <= START_TIMEOUT_S + 3, waited
        await expect_close(idle, CLOSE_POLICY)
        await update(caller, silence_ms=600)  # a started call has no such deadline
    await assert_server_up(server)


# -- after all of it ----------------------------------------------------------


async def test_valid_session_after_the_abuse(server: RunningServer) -> None:
    """A clean call with garbage in the middle, then no call is left held; run last, it
    shows the server whole after all of the module's abuse."""
    rate, frame_ms = 16000, 20
    async with connect(server) as ws:
        started = await start(ws, input_sample_rate=rate)
        assert started["input_sample_rate"] == rate
        for i in range(1000 // frame_ms):
            await ws.send(silence(rate, frame_ms))
            if i == 10:  # garbage mid-call does not end it
                await ws.send("{oops")
                await expect_error(ws, ErrorCode.INVALID_JSON)
            await asyncio.sleep(frame_ms / 1000)
        await send_json(ws, {"type": "session.end"})
        after_end: list[str | bytes] = []
        async with asyncio.timeout(REPLY_TIMEOUT_S):
            async for message in ws:  # ends on a clean close, raises on any other
                after_end.append(message)
        assert ws.close_code == CLOSE_NORMAL
        errors = [m for m in after_end if isinstance(m, str) and json.loads(m)["type"] == "error"]
        assert not errors, errors
    await assert_server_up(server)

    assert _received == {ErrorCode.INVALID_JSON.value: 1}, "its own error, counted on teardown"
    text = await metrics_text(server)
    deadline = time.monotonic() + 5
    # Connections the protocol layer failed (1009) look dropped: their sessions wait out the
    # resume grace (short on the test server), then close.
    deadline += RESUME_GRACE_S
    held = ('voxpipe_calls{state="connected"}', 'voxpipe_calls{state="detached"}')
    while any(metric_value(text, m) != 0 for m in held) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        text = await metrics_text(server)
    assert [metric_value(text, m) for m in held] == [0, 0], "a session leaked"
