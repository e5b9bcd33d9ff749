"""Property-based fuzzing of ``/v1/voice`` against the real server.

Hypothesis throws malformed binary frames, random JSON, known events with fuzzed bodies and
invalid UTF-8 text frames at the native protocol, before and inside a session. An oracle
written from ``docs/protocol.md`` says how each message may be answered: a typed ``error``
with the documented code, the event that answers it, or silence (audio). After every message a
``ping`` must still get its ``pong`` (the connection stays usable) unless the protocol says the
server closes, with that close code. After every test, ``fuzzing_leaves_no_trace`` checks
that nothing crashed: the process is alive, ``/healthz`` answers, the log it wrote during the
test holds no unexpected traceback, ``/metrics`` counted every error received, and every call
is released. Each test stands alone, so the module runs in any order.

Runs are derandomized (no example database), so CI sees the same examples every time.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection

from tests.conftest import RESUME_GRACE_S
from tests.support import (
    RunningServer,
    assert_server_up,
    metric_value,
    tracebacks,
)
from voxpipe.config import Config
from voxpipe.conversation.events import ErrorCode, Event

pytestmark = pytest.mark.e2e

CONFIG = Config.load()  # the server reads the same environment
MAX_MESSAGE_BYTES = CONFIG.server.max_message_bytes
HARD_LIMIT_BYTES = 4 * MAX_MESSAGE_BYTES  # uvicorn's ws_max_size (voxpipe/cli.py)
MAX_FRAME_MS = CONFIG.audio.max_frame_ms
MIN_RATE, MAX_RATE = CONFIG.audio.min_sample_rate, CONFIG.audio.max_sample_rate
DEFAULT_RATE = CONFIG.audio.input_sample_rate
REPLY_TIMEOUT_S = 10.0
CLOSE_NORMAL, CLOSE_BAD_UTF8, CLOSE_TOO_BIG, CLOSE_TRY_LATER = 1000, 1007, 1009, 1013

KNOWN_CODES = frozenset(code.value for code in ErrorCode)
# Errors that answer one client message (at most one per message) ...
PROTOCOL_CODES = frozenset(
    code.value
    for code in (
        ErrorCode.INVALID_JSON,
        ErrorCode.INVALID_EVENT,
        ErrorCode.UNKNOWN_EVENT,
        ErrorCode.NOT_STARTED,
        ErrorCode.ALREADY_STARTED,
        ErrorCode.BAD_AUDIO_FRAME,
        ErrorCode.UNSUPPORTED_SAMPLE_RATE,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RESUME_FAILED,
        ErrorCode.SESSION_NOT_FOUND,
        ErrorCode.INVALID_UTF8,  # then the close 1007
    )
)
# ... and errors a running session may send at any time (random audio can be heard as
# speech and start a turn on two busy cores).
RUNTIME_CODES = frozenset(
    code.value
    for code in (ErrorCode.ENGINE_BUSY, ErrorCode.DEADLINE_EXCEEDED, ErrorCode.AUDIO_DROPPED)
)


def _event_types(cls: type[Event]) -> Iterator[str]:
    for sub in cls.__subclasses__():
        yield sub.type
        yield from _event_types(sub)


SERVER_EVENTS = frozenset(_event_types(Event))
# Events that only answer a client message; every other event comes from a running session.
ANSWERS = frozenset({"session.started", "session.updated", "history", "pong", "error"})
PING = json.dumps({"type": "ping"})
START = json.dumps({"type": "session.start"})
END = json.dumps({"type": "session.end"})

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

# What the running test saw (reset for each test by `fuzzing_leaves_no_trace`):
_received: Counter[str] = Counter()  # error codes received; /metrics must count at least these
_closes: Counter[int] = Counter()  # close codes the server ended fuzzed connections with
_connections = [0]


# -- the oracle ---------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One client message: text, audio, or bytes sent in a text frame (maybe not UTF-8)."""

    data: str | bytes
    as_text: bool = False

    def __repr__(self) -> str:
        kind = "text" if isinstance(self.data, str) or self.as_text else "binary"
        shown = repr(self.data[:120]) + ("…" if len(self.data) > 120 else "")
        return f"Message({kind}, {len(self.data)}, {shown})"


@dataclass(frozen=True)
class Expect:
    """How the protocol allows one message to be answered."""

    errors: frozenset[str] = frozenset()  # one error with one of these codes ...
    answers: frozenset[str] = frozenset()  # ... or one of these events ...
    silent: bool = False  # ... or nothing at all
    close: int | None = None  # instead: the server closes with this code


@dataclass
class State:
    started: bool = False
    rate: int = DEFAULT_RATE


def _only(code: ErrorCode) -> Expect:
    return Expect(errors=frozenset({code.value}))


def expect(message: Message, state: State) -> Expect:
    if isinstance(message.data, str):
        return _expect_text(message.data, state)
    if message.as_text:
        try:
            text = message.data.decode()
        except UnicodeDecodeError:
            return Expect(errors=frozenset({ErrorCode.INVALID_UTF8.value}), close=CLOSE_BAD_UTF8)
        return _expect_text(text, state)
    return _expect_audio(message.data, state)


def _expect_audio(data: bytes, state: State) -> Expect:
    if len(data) > HARD_LIMIT_BYTES:
        return Expect(close=CLOSE_TOO_BIG)
    if len(data) > MAX_MESSAGE_BYTES:
        return _only(ErrorCode.MESSAGE_TOO_LARGE)
    if not state.started:
        return _only(ErrorCode.NOT_STARTED)
    if not data or len(data) % 2 or len(data) > state.rate * MAX_FRAME_MS // 1000 * 2:
        return _only(ErrorCode.BAD_AUDIO_FRAME)
    return Expect(silent=True)


def _expect_text(text: str, state: State) -> Expect:
    size = len(text.encode())
    if size > HARD_LIMIT_BYTES:
        return Expect(close=CLOSE_TOO_BIG)
    if size > MAX_MESSAGE_BYTES:
        return _only(ErrorCode.MESSAGE_TOO_LARGE)
    try:
        payload = json.loads(text)  # the server's parser: same Python, same limits
    except (ValueError, RecursionError):
        return _only(ErrorCode.INVALID_JSON)
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        return _only(ErrorCode.INVALID_EVENT)
    kind = payload["type"]
    invalid = frozenset({ErrorCode.INVALID_EVENT.value})
    if kind == "ping":
        return Expect(answers=frozenset({"pong"}), errors=invalid)
    if kind == "session.end":
        return Expect(close=CLOSE_NORMAL)
    if kind == "session.start":
        if state.started:
            return _only(ErrorCode.ALREADY_STARTED)
        if payload == {"type": "session.start"}:
            return Expect(answers=frozenset({"session.started"}))
        refusals = {
            ErrorCode.INVALID_EVENT,
            ErrorCode.UNSUPPORTED_SAMPLE_RATE,
            ErrorCode.ALREADY_STARTED,  # a session_id that is live (a previous example's)
            ErrorCode.RESUME_FAILED,
            ErrorCode.SESSION_NOT_FOUND,  # resume of a session that is not there
        }
        return Expect(
            answers=frozenset({"session.started"}), errors=frozenset(c.value for c in refusals)
        )
    if kind in ("session.update", "history.get", "playback.ack") and not state.started:
        return _only(ErrorCode.NOT_STARTED)
    if kind == "session.update":
        return Expect(answers=frozenset({"session.updated"}), errors=invalid)
    if kind == "history.get":
        return Expect(answers=frozenset({"history"}), errors=invalid)
    if kind == "playback.ack":  # no reply has played: any seq is unknown, unless noise spoke
        return Expect(errors=invalid, silent=True)
    return _only(ErrorCode.UNKNOWN_EVENT)


# -- one connection at a time -------------------------------------------------


class Refused(Exception):
    """The server refused the connection at the door (at capacity): try again shortly."""


@dataclass
class Line:
    """A fuzzing run's connection, reopened after each close the protocol documents."""

    server: RunningServer
    ws: ClientConnection | None = None
    state: State = field(default_factory=State)
    exchanged: int = 0  # messages on the current connection

    async def open(self) -> ClientConnection:
        if self.ws is None:
            self.ws = await websockets.connect(
                self.server.ws, max_size=None, open_timeout=30, close_timeout=5
            )
            self.state, self.exchanged = State(), 0
            _connections[0] += 1
        return self.ws

    async def hang_up(self) -> None:
        if self.ws is not None:
            await self.ws.close()
            self.ws = None

    async def send(self, message: Message) -> None:
        for _ in range(50):  # a connection refused at the door is retried, up to ~10 s
            try:
                await self._exchange(message)
                return
            except Refused:
                self.ws = None
                await asyncio.sleep(0.2)
        pytest.fail("the server kept refusing connections (at capacity)")

    async def _exchange(self, message: Message) -> None:
        ws = await self.open()
        want = expect(message, self.state)
        first = self.exchanged == 0
        self.exchanged += 1
        events: list[dict[str, Any]] = []
        try:
            await ws.send(message.data, text=message.as_text or None)
            if want.close is None:
                await ws.send(PING)
            await self._read(ws, message, want, events)
        except websockets.ConnectionClosed as closed:
            self.ws = None
            code = closed.rcvd.code if closed.rcvd is not None else None
            refused = [e.get("code") for e in events] == [ErrorCode.AT_CAPACITY.value]
            if first and code == CLOSE_TRY_LATER and refused:
                raise Refused from None
            assert want.close is not None and code == want.close, (
                f"{message!r}: closed with {code}, expected {want}; events {events}"
            )
            self._check(message, want, events, pongs=0)
            _closes[code] += 1
            return
        assert want.close is None

    async def _read(
        self, ws: ClientConnection, message: Message, want: Expect, events: list[dict[str, Any]]
    ) -> None:
        """Read this message's answer and the probe's ``pong``; or, for a close, to the end."""
        pongs, wanted = 0, (2 if "pong" in want.answers else 1)
        async with asyncio.timeout(REPLY_TIMEOUT_S):
            while want.close is not None or pongs < wanted:
                raw = await ws.recv()
                if isinstance(raw, bytes):
                    continue  # reply audio, when noise was heard as speech
                event = json.loads(raw)
                assert isinstance(event, dict), raw
                events.append(event)
                if event.get("type") == "pong":
                    pongs += 1
                elif event.get("code") in PROTOCOL_CODES and pongs == 0:
                    wanted = 1  # a refused ping-like message is not answered with pong
                elif event.get("type") == "session.started":
                    self.state = State(True, event["input_sample_rate"])
        self._check(message, want, events, pongs)

    def _check(
        self, message: Message, want: Expect, events: list[dict[str, Any]], pongs: int
    ) -> None:
        where = f"{message!r} (started={self.state.started}) got {events}"
        for event in events:
            kind = event.get("type")
            assert kind in SERVER_EVENTS, where
            if kind == "error":
                code = event.get("code")
                assert code in KNOWN_CODES, where
                assert isinstance(event.get("message"), str) and event["message"], where
                _received[code] += 1
                assert code in PROTOCOL_CODES or (code in RUNTIME_CODES and self.state.started), (
                    where
                )
            elif kind not in ANSWERS:
                assert self.state.started, f"session events without a session: {where}"
        errors = [e for e in events if e.get("code") in PROTOCOL_CODES]
        assert len(errors) <= 1, f"more than one error for one message: {where}"
        answered = pongs == 2 or any(e.get("type") in want.answers - {"pong"} for e in events)
        stray = [
            e
            for e in events
            if e.get("type") in ANSWERS - {"error", "pong"} and e.get("type") not in want.answers
        ]
        assert not stray, f"answers to no question: {where}"
        if errors:
            assert errors[0]["code"] in want.errors, f"expected {want}: {where}"
            assert not answered, f"both refused and answered: {where}"
        elif want.close is None and not want.silent:
            assert answered, f"expected {want}: {where}"


async def _run(server: RunningServer, messages: list[Message], start_at: int) -> None:
    """Three connections: the messages with no ``session.start`` but theirs; the messages with a
    ``session.start`` among them (at ``start_at``); all of them inside a session, each followed
    by valid audio, then ``session.end``. A connection the server closes is opened again."""
    line = Line(server)
    try:
        for message in messages:
            await line.send(message)
        await line.hang_up()
        for message in [*messages[:start_at], Message(START), *messages[start_at:]]:
            await line.send(message)
        await line.hang_up()
        await line.send(Message(START))
        for message in messages:
            await line.send(message)
            await line.send(Message(bytes(2 * (line.state.rate // 50))))  # 20 ms of silence
        await line.send(Message(END))
    finally:
        await line.hang_up()
    assert server.alive(), server.log_path.read_text()[-4000:]


def fuzz(server: RunningServer, messages: list[Message], start_at: int) -> None:
    asyncio.run(_run(server, messages, min(start_at, len(messages))))


# -- strategies ---------------------------------------------------------------


def _repeat(size: int, pattern: bytes) -> bytes:
    return (pattern * (size // len(pattern) + 1))[:size]


def _frame_bytes(rate: int) -> int:
    return rate * MAX_FRAME_MS // 1000 * 2


EDGE_SIZES = sorted(
    {0, 1, 2, 3, 320, 639, 640, 641}
    | {_frame_bytes(r) + d for r in (MIN_RATE, DEFAULT_RATE, MAX_RATE) for d in (-1, 0, 1, 2)}
    | {MAX_MESSAGE_BYTES + d for d in (-1, 0, 1, 2)}
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([0, -1, 2**31, 2**32, 2**63, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),  # json.dumps writes NaN and Infinity
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
# Huge values, one per field at most, so a message stays under the 1 MiB hard limit mostly.
huge_strings = st.builds(
    lambda unit, count: unit * count, st.text(min_size=1, max_size=2), st.integers(1000, 30000)
)
huge_lists = st.builds(lambda value, count: [value] * count, scalars, st.integers(100, 20000))


def _nested(depth: int, open_: str, close: str, leaf: str = "1") -> str:
    return open_ * depth + leaf + close * depth


# Nesting well below or well above the parser's recursion limit (~1000 levels; a unit below
# nests up to 3), never near it: the server's stack is deeper than the oracle's.
depths = st.integers(1, 100) | st.integers(2000, 60000)
nested_values = st.builds(
    lambda depth, kind: _nested(depth, *kind),
    depths,
    st.sampled_from([("[", "]"), ('{"a":', "}"), ('[{"x":[', "]}]")]),
)


@dataclass(frozen=True)
class Field:
    """A field of a client event: values of the right type (mostly in range), and edge values
    (just out of range, the wrong type) to mix with anything JSON can say."""

    valid: st.SearchStrategy[Any]
    edges: st.SearchStrategy[Any] = field(default_factory=st.nothing)

    def wild(self) -> st.SearchStrategy[Any]:
        return st.one_of(self.valid, self.edges, json_values, huge_strings, huge_lists)


def _ms(lo: int, hi: int) -> Field:
    return Field(st.integers(lo, hi), st.sampled_from([lo - 1, hi + 1, -1, 2**63, 10.5, "500"]))


TURN_FIELDS = {
    "threshold": Field(st.floats(0.01, 0.99), st.sampled_from([0, 1, -0.1, 1.5, "high"])),
    "prefix_padding_ms": _ms(0, 2000),
    "silence_ms": _ms(32, 5000),
    "min_speech_ms": _ms(0, 2000),
    "interrupt": Field(st.booleans(), st.sampled_from([0, 1, "yes", None])),
    "min_interruption_ms": _ms(0, 3000),
    "preempt_ms": Field(st.just(0) | st.integers(32, 5000), st.sampled_from([-1, 10, 5001])),
}
# A type-correct rate is sometimes out of range: unsupported_sample_rate, after validation.
RATE = Field(
    st.sampled_from([MIN_RATE, DEFAULT_RATE, 22050, 44100, MAX_RATE])
    | st.integers(0, 2 * MAX_RATE),
    st.sampled_from([0, -1, 10**12, 2**40, 16000.5, "16000", True]),
)


@st.composite
def bodies(draw: st.DrawFn, fields: dict[str, Field]) -> dict[str, Any]:
    """Some of an event's fields: half the time with valid values only (so that some events
    pass validation and the checks behind it run), else with any values, huge ones and
    fields the event lacks."""
    names = draw(st.lists(st.sampled_from(sorted(fields)), unique=True)) if fields else []
    if draw(st.booleans()):
        return {name: draw(fields[name].valid) for name in names}
    body = {name: draw(fields[name].wild()) for name in names}
    extra = draw(st.dictionaries(st.text(max_size=12), json_values, max_size=2))
    if draw(st.booleans()) and fields is TURN_FIELDS:
        extra["release_threshold"] = 0.3  # a server setting, not a per-call option
    return {**extra, **body}


RESUME_FIELDS = {"last_event_id": _ms(0, 100), "last_audio_seq": _ms(0, 100)}
START_FIELDS = {
    "session_id": Field(st.text(min_size=1, max_size=10), st.sampled_from(["", "x" * 129, 5])),
    "input_sample_rate": RATE,
    "output_sample_rate": RATE,
    "instructions": Field(
        st.text(max_size=50) | st.sampled_from(["x" * 8000, "é" * 8000]),
        st.sampled_from(["x" * 8001, ["be brief"]]),
    ),
    "turn": Field(bodies(TURN_FIELDS), st.sampled_from(["fast", [500]])),
    "resume": Field(bodies(RESUME_FIELDS)),  # for a session that is not there: session_not_found
}
EVENT_FIELDS: dict[str, dict[str, Field]] = {
    "session.start": START_FIELDS,
    "session.update": {"turn": START_FIELDS["turn"]},
    "playback.ack": {"seq": _ms(1, 2**32 - 1)},
    "history.get": {},
    "ping": {},
    "session.end": {},
}
# session.end hangs up: fuzzed bodies of it are drawn less often, so more happens per call.
kinds = st.sampled_from([k for k in EVENT_FIELDS if k != "session.end"] * 4 + ["session.end"])


@st.composite
def known_events(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(kinds)
    return {**draw(bodies(EVENT_FIELDS[kind])), "type": kind}


def _dumps(payload: object, ascii_only: bool) -> str:
    return json.dumps(payload, ensure_ascii=ascii_only)


def as_text(payloads: st.SearchStrategy[Any]) -> st.SearchStrategy[Message]:
    return st.builds(lambda p, a: Message(_dumps(p, a)), payloads, st.booleans())


binary_frames = st.one_of(
    st.binary(max_size=64),
    st.builds(_repeat, st.integers(0, MAX_MESSAGE_BYTES), st.binary(min_size=1, max_size=32)),
    st.builds(_repeat, st.sampled_from(EDGE_SIZES), st.binary(min_size=1, max_size=8)),
    st.builds(lambda e: json.dumps(e).encode(), known_events()),  # an event in a binary frame
).map(Message)

# JSON with and without a string "type"; types that are near misses of real ones.
types = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["session.Start", "session.start ", "ping\x00", "Ping", "response.create"]),
    st.sampled_from([kind + "x" for kind in EVENT_FIELDS]),
    json_values,
)
random_json = st.one_of(
    as_text(json_values),
    as_text(st.dictionaries(st.text(max_size=8), json_values, max_size=5)),
    as_text(
        st.builds(
            lambda body, kind: {**body, "type": kind},
            st.dictionaries(st.text(max_size=8), json_values, max_size=4),
            types,
        )
    ),
)
# Starts that are valid events, at any integer rate: the rate check behind validation.
rate_starts = st.builds(
    lambda key, rate: {"type": "session.start", key: rate},
    st.sampled_from(["input_sample_rate", "output_sample_rate"]),
    RATE.valid | st.integers(),
)
known = as_text(known_events() | rate_starts)


def _cut(text: str, at: int, junk: str) -> str:
    at %= len(text) + 1
    return text[:at] + junk + text[at:]


valid_texts = st.sampled_from([PING, START, '{"type": "history.get"}', '{"type":"playback.ack"}'])
raw_texts = st.one_of(
    st.text(max_size=40),
    st.builds(_cut, valid_texts, st.integers(0, 40), st.text(max_size=3)),  # mangled events
    st.builds(lambda t, n: t[:n], valid_texts, st.integers(0, 30)),  # truncated events
    st.builds(lambda d: '{"type": "session.start", "turn": ' + d + "}", nested_values),
    nested_values,
    st.builds(lambda n: '{"type": "playback.ack", "seq": ' + "9" * n + "}", st.integers(1, 9000)),
    st.builds(  # huge but under the limit
        lambda n: '{"type": "ping", "pad": "' + "a" * n + '"}', st.integers(0, MAX_MESSAGE_BYTES)
    ),
    st.sampled_from(["\ufeff" + PING, " " + PING + " ", PING + PING, "null", "NaN", '"ping"']),
).map(Message)
# Text frames whose payload is not UTF-8 (websockets sends bytes as text when asked): an
# invalid_utf8 error, then close 1007; text frames whose bytes are UTF-8 are just text.
invalid_utf8 = st.one_of(
    st.builds(  # random bytes around a byte sequence that is never UTF-8
        lambda head, bad, tail: head + bad + tail,
        st.binary(max_size=16),
        st.sampled_from([b"\xff", b"\xfe", b"\xc0\xaf", b"\xf5\x80\x80\x80"]),
        st.binary(max_size=16),
    ),
    st.sampled_from([b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", PING.encode() + b"\xc3"]),
    st.builds(lambda e: json.dumps(e).encode(), known_events()),  # valid UTF-8 in bytes
).map(lambda b: Message(b, as_text=True))


def scenarios(messages: st.SearchStrategy[Message], most: int) -> st.SearchStrategy[Any]:
    return st.tuples(st.lists(messages, min_size=1, max_size=most), st.integers(0, most))


# -- the fuzzing --------------------------------------------------------------


HELD = ('voxpipe_calls{state="connected"}', 'voxpipe_calls{state="detached"}')


def _metrics(server: RunningServer) -> str:
    response = httpx.get(f"{server.http}/metrics", timeout=5)
    assert response.status_code == 200
    return response.text


@pytest.fixture(autouse=True)
def fuzzing_leaves_no_trace(server: RunningServer) -> Iterator[None]:
    """Around each test (all of its examples): the server is alive, /metrics grew by every
    error the test received, no call is held, and its log since the test began is clean."""
    _received.clear()
    _closes.clear()
    _connections[0] = 0
    log_start = server.log_path.stat().st_size
    before = _metrics(server)
    yield
    health = httpx.get(f"{server.http}/healthz", timeout=5)
    assert health.status_code == 200 and server.alive(), server.log_path.read_text()[-4000:]
    metrics = _metrics(server)
    if _connections[0]:
        assert _received, "the fuzzing received no error at all"
        print(f"\nfuzzing: {_connections[0]} connections; errors: {dict(_received)}")
        print(f"fuzzing: connections the server closed, by code: {dict(_closes)}")
    for code, count in _received.items():
        sample = f'voxpipe_errors_total{{code="{code}"}}'
        grown = (metric_value(metrics, sample) or 0) - (metric_value(before, sample) or 0)
        assert grown >= count, (code, grown, count)
    # A connection the WebSocket layer failed (1009) looks dropped: its session waits out the
    # resume grace (short on the test server), then closes.
    deadline = time.monotonic() + 5 + RESUME_GRACE_S
    while any(metric_value(metrics, m) != 0 for m in HELD) and time.monotonic() < deadline:
        time.sleep(0.1)
        metrics = _metrics(server)
    assert [metric_value(metrics, m) for m in HELD] == [0, 0], "a call leaked"
    # Read last, so what the sessions closing above logged is this test's too.
    with server.log_path.open("rb") as log:
        log.seek(log_start)
        text = log.read().decode(errors="replace")
    assert "Exception in ASGI application" not in text, text[-4000:]
    found = tracebacks(text)  # text frames that are not UTF-8 included: a warning each
    assert not found, "\n\n".join(found)[-6000:]


@settings(FUZZ, max_examples=30)
@given(scenarios(binary_frames, 6))
def test_fuzzed_binary_frames(server: RunningServer, scenario: tuple[list[Message], int]) -> None:
    fuzz(server, *scenario)


@settings(FUZZ, max_examples=30)
@given(scenarios(random_json, 6))
def test_fuzzed_json(server: RunningServer, scenario: tuple[list[Message], int]) -> None:
    fuzz(server, *scenario)


@settings(FUZZ, max_examples=45)
@given(scenarios(known, 6))
def test_fuzzed_known_events(server: RunningServer, scenario: tuple[list[Message], int]) -> None:
    fuzz(server, *scenario)


@settings(FUZZ, max_examples=25)
@given(scenarios(st.one_of(raw_texts, invalid_utf8), 6))
def test_fuzzed_text_frames(server: RunningServer, scenario: tuple[list[Message], int]) -> None:
    fuzz(server, *scenario)


@settings(FUZZ, max_examples=20)
@given(scenarios(st.one_of(binary_frames, random_json, known, raw_texts, invalid_utf8), 10))
def test_fuzzed_mixture(server: RunningServer, scenario: tuple[list[Message], int]) -> None:
    fuzz(server, *scenario)


async def test_the_server_survived_the_fuzzing(server: RunningServer) -> None:
    """A clean call; run after the fuzzing, the server is whole after all of it (the fixture
    checks its log, its counters and that no call is held)."""
    await assert_server_up(server)
    async with websockets.connect(server.ws, open_timeout=30) as ws:
        await ws.send(START)
        assert json.loads(await asyncio.wait_for(ws.recv(), REPLY_TIMEOUT_S))["type"] == (
            "session.started"
        )
