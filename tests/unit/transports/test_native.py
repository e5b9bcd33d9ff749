"""``/v1/voice`` on fake engines, through the wire: ``session.start`` and its validation, every
bad message and its typed ``error`` (``docs/protocol.md``, "Error codes"), the events that
answer a client (``session.updated``, ``history``, ``pong``), a spoken turn's events and
sequenced frames, ``playback.ack``, ``session.end`` and the start deadline.

The e2e tests (tests/e2e/test_bad_input.py, test_protocol_fuzz.py) throw the same at the real
models; these say it in seconds. Each test has its own server, so they run in any order.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.transports.native_wire import (
    CONNECTED,
    DETACHED,
    FRAME_SAMPLES,
    RATE,
    serve,
    speech,
)

MAX_MESSAGE_BYTES = 4096  # the smallest the configuration allows: big messages stay cheap
LIMITS: dict[str, Any] = {"server": {"max_message_bytes": MAX_MESSAGE_BYTES}}


def padded(size: int, fill: str = "a") -> str:
    """A JSON event of exactly ``size`` UTF-8 bytes (of an unknown type)."""
    head, tail = '{"type": "padding.test", "pad": "', '"}'
    count, rest = divmod(size - len(head) - len(tail), len(fill.encode()))
    text = head + fill * count + "a" * rest + tail
    assert len(text.encode()) == size
    return text


async def test_session_start_answers_with_the_call_s_rates_turn_and_models() -> None:
    async with serve() as app, app.connect() as line:
        started = await line.start(
            session_id="my-call",
            input_sample_rate=8000,
            output_sample_rate=24000,
            instructions="Be brief.",
            turn={"silence_ms": 400, "preempt_ms": 0},
        )
        assert started["event_id"] == 1 and started["session_id"] == "my-call"
        assert (started["input_sample_rate"], started["output_sample_rate"]) == (8000, 24000)
        assert started["out_frame_ms"] == 20 and started["resumed"] is False
        assert started["config"]["turn"]["silence_ms"] == 400
        assert started["config"]["turn"]["preempt_ms"] is None, "0 turns preemption off"
        assert started["models"] == {
            "vad": "fake-vad",
            "stt": "fake-stt",
            "llm": "fake-llm",
            "tts": "fake-tts",
        }
    async with serve() as app, app.connect() as line:  # every field is optional
        started = await line.start()
        assert len(started["session_id"]) >= 32, "a server-chosen id is long and random"
        assert (started["input_sample_rate"], started["output_sample_rate"]) == (RATE, RATE)


# Each is refused with this code, and the connection then starts a call as if it had not been.
BAD_STARTS: list[tuple[dict[str, Any], str]] = [
    ({"bogus": 1}, "invalid_event"),
    ({"turn": {"bogus": 1}}, "invalid_event"),
    ({"turn": {"release_threshold": 0.3}}, "invalid_event"),  # a server setting
    ({"session_id": 5}, "invalid_event"),
    ({"session_id": ""}, "invalid_event"),
    ({"session_id": "x" * 129}, "invalid_event"),
    ({"instructions": "x" * 8001}, "invalid_event"),
    ({"instructions": ["be brief"]}, "invalid_event"),
    ({"input_sample_rate": "16000"}, "invalid_event"),  # not coerced
    ({"input_sample_rate": True}, "invalid_event"),
    ({"output_sample_rate": 16000.5}, "invalid_event"),
    ({"turn": "fast"}, "invalid_event"),
    ({"turn": {"interrupt": 1}}, "invalid_event"),
    ({"turn": {"threshold": 1}}, "invalid_event"),
    ({"turn": {"silence_ms": 31}}, "invalid_event"),
    ({"turn": {"preempt_ms": 10}}, "invalid_event"),  # below TurnConfig's floor
    ({"resume": {"last_event_id": 1}}, "invalid_event"),  # resume needs session_id
    ({"resume": {"last_event_id": -1}, "session_id": "x"}, "invalid_event"),
    ({"input_sample_rate": 0}, "unsupported_sample_rate"),
    ({"input_sample_rate": 7999}, "unsupported_sample_rate"),
    ({"output_sample_rate": 48001}, "unsupported_sample_rate"),
    ({"output_sample_rate": -5}, "unsupported_sample_rate"),
]


async def test_every_bad_session_start_gets_its_code_and_changes_nothing() -> None:
    async with serve() as app, app.connect() as line:
        before = {code: await app.errors(code) for _, code in BAD_STARTS}
        for fields, code in BAD_STARTS:
            await line.send({"type": "session.start", **fields})
            error = await line.error(code)
            assert "event_id" not in error, "before a session, errors belong to no stream"
        started = await line.start(input_sample_rate=8000, output_sample_rate=48000)
        assert (started["input_sample_rate"], started["output_sample_rate"]) == (8000, 48000)
        for code in set(before):
            want = sum(1 for _, c in BAD_STARTS if c == code)
            assert await app.errors(code) == before[code] + want, code


async def test_malformed_messages_get_typed_errors_and_the_connection_goes_on() -> None:
    async with serve(**LIMITS) as app, app.connect() as line:
        for text in ("{", "not json", "", "[" * 2000, '{"type": "ping",}'):
            await line.send(text)
            await line.error("invalid_json")
        not_events: list[object] = [[], "ping", 42, None, {}, {"kind": "ping"}, {"type": 5}]
        for payload in not_events:
            await line.send(json.dumps(payload))
            await line.error("invalid_event")
        await line.send({"type": "x" * 1000})
        assert len((await line.error("unknown_event"))["message"]) < 200, "the type is cut"
        for kind in ("session.update", "history.get", "playback.ack"):
            await line.send({"type": kind})
            await line.error("session_not_started")
        await line.send(bytes(2 * FRAME_SAMPLES))
        await line.error("session_not_started")
        await line.usable()

        await line.start()
        await line.send({"type": "response.create"})
        error = await line.error("unknown_event")
        assert error["event_id"] > 1, "in a session every event is numbered"
        await line.send("{oops")
        await line.error("invalid_json")
        for fields in ({"session_id": "another"}, {"input_sample_rate": 0}):  # even a bad one
            await line.send({"type": "session.start", **fields})
            await line.error("session_already_started")
        await line.usable()


async def test_bad_audio_frames_are_refused_and_good_ones_taken() -> None:
    longest = 8000 * 1000 // 1000 * 2  # max_frame_ms (1 s) at 8 kHz
    async with serve() as app, app.connect() as line:
        await line.start(input_sample_rate=8000)
        for frame in (b"", b"\x01", bytes(641), bytes(longest + 2)):
            await line.send(frame)
            await line.error("bad_audio_frame")
        for frame in (b"\x00\x00", bytes(longest)):  # one sample; max_frame_ms exactly
            await line.send(frame)
        await line.usable()  # neither was refused


@pytest.mark.parametrize("started", [False, True], ids=["before start", "in session"])
async def test_a_message_over_max_message_bytes_is_refused_for_its_size(started: bool) -> None:
    async with serve(**LIMITS) as app, app.connect() as line:
        if started:
            await line.start()
        for message in (
            bytes(MAX_MESSAGE_BYTES + 2),
            padded(MAX_MESSAGE_BYTES + 1),
            padded(MAX_MESSAGE_BYTES + 2, "é"),  # under the limit in characters, not bytes
        ):
            await line.send(message)
            await line.error("message_too_large")
        # Exactly the limit is read: an audio frame (128 ms at 16 kHz), and an event.
        await line.send(bytes(MAX_MESSAGE_BYTES))
        if not started:
            await line.error("session_not_started")
        await line.send(padded(MAX_MESSAGE_BYTES))
        await line.error("unknown_event")
        await line.usable()


async def test_session_update_history_and_ping_are_answered() -> None:
    async with serve() as app, app.connect() as line:
        await line.start(turn={"silence_ms": 700})
        await line.send({"type": "session.update", "turn": {"threshold": 0.6}})
        updated = await line.expect("session.updated")
        assert updated["config"]["turn"]["threshold"] == 0.6
        assert updated["config"]["turn"]["silence_ms"] == 700, "an update keeps the rest"
        for bad in (
            {"turn": {"silence_ms": 31}},
            {"turn": {"threshold": 2}},
            {"turn": {"bogus": 1}},
            {"turn": "fast"},
            {"extra": True},
        ):
            await line.send({"type": "session.update", **bad})
            await line.error("invalid_event")
        await line.send({"type": "session.update"})  # nothing to change
        unchanged = await line.expect("session.updated")
        assert unchanged["config"] == updated["config"], "a refused update changed nothing"

        await line.send({"type": "history.get"})
        history = await line.expect("history")
        assert (history["messages"], history["summary"], history["summarized_messages"]) == (
            [],
            "",
            0,
        )
        await line.usable()
        ids = [e["event_id"] for e in line.events]
        assert ids == list(range(1, len(ids) + 1)), "event ids count 1, 2, … with no gap"


async def test_a_turn_s_events_and_frames_and_playback_ack() -> None:
    async with serve(clause_samples=2 * RATE // 5) as app, app.connect() as line:  # 0.4 s
        await line.start()
        metrics = await line.speak()
        kinds = [e["type"] for e in line.events]
        order = [
            "vad.speech_started",
            "vad.speech_stopped",
            "transcript",
            "response.text.delta",
            "response.done",
            "turn.metrics",
        ]
        assert [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order), kinds
        done = next(e for e in line.events if e["type"] == "response.done")
        assert (done["turn_id"], done["status"], done["text"]) == (1, "completed", "Hello there.")
        assert metrics["turn_id"] == 1 and metrics["status"] == "completed"
        assert next(e for e in line.events if e["type"] == "transcript")["text"] == "hello there"
        # Reply audio: seq 1, 2, … of turn 1, whole 20 ms frames, as many as response.done says.
        frames = line.frames()
        assert [seq for seq, _, _ in frames] == list(range(1, len(frames) + 1))
        assert {turn for _, turn, _ in frames} == {1}
        assert {len(pcm) for _, _, pcm in frames} == {2 * FRAME_SAMPLES}
        assert (done["first_seq"], done["last_seq"]) == (1, len(frames)) and len(frames) == 20

        await line.send({"type": "playback.ack", "seq": 10})
        await line.usable()  # a frame it was sent: no error
        for bad in ({"seq": 0}, {"seq": "10"}, {"seq": 2**32}, {"seq": 5, "extra": 1}):
            await line.send({"type": "playback.ack", **bad})
            await line.error("invalid_event")
        await line.send({"type": "playback.ack", "seq": 999})
        assert "999" in (await line.error("invalid_event"))["message"]

        await line.send({"type": "history.get"})
        history = await line.expect("history")
        assert [m["role"] for m in history["messages"]] == ["user", "assistant"]


async def test_session_end_closes_1000_and_releases_the_call() -> None:
    async with serve() as app, app.connect() as line:
        await line.start()
        await app.until_metric(CONNECTED, 1)
        await line.send({"type": "session.end"})
        assert await line.closed() == (1000, "session.end")
        await app.until_metric(CONNECTED, 0)
        assert await app.metric(DETACHED) == 0, "a hang-up is not kept for a resume"


async def test_a_clean_close_by_the_client_is_a_hang_up() -> None:
    async with serve() as app:
        async with app.connect() as line:
            await line.start()
            await line.send(speech()[0])
        await app.until_metric(CONNECTED, 0)
        assert await app.metric(DETACHED) == 0


async def test_no_session_start_in_time_closes_1008() -> None:
    async with serve(server={"start_timeout_s": 0.5}) as app, app.connect() as idle:
        await idle.send("{")  # a refused message is not a start ...
        await idle.error("invalid_json")
        await idle.send({"type": "session.start", "input_sample_rate": 0})  # ... nor is this
        await idle.error("unsupported_sample_rate")
        await idle.error("start_timeout")
        code, reason = await idle.closed()
        assert code == 1008 and reason.startswith("start_timeout: "), reason
        assert await app.errors("start_timeout") == 1


async def test_every_error_sent_is_counted_in_metrics() -> None:
    async with serve() as app, app.connect() as line:
        codes = {"invalid_json": 0.0, "unknown_event": 0.0, "session_not_started": 0.0}
        before = {code: await app.errors(code) for code in codes}
        await line.send("{")
        await line.error("invalid_json")
        await line.send({"type": "nope"})
        await line.error("unknown_event")
        await line.send(b"\x00\x00")
        await line.error("session_not_started")
        for code in codes:
            assert await app.errors(code) == before[code] + 1, code
