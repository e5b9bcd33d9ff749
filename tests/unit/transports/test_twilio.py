"""The Twilio transport on fake engines: message parsing, bad input, marks, clear, stop."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import numpy as np
import pytest
from starlette.websockets import WebSocket

from tests.unit.transports.media_stream import LOUD_PCM, QUIET_PCM, StreamLine
from voxpipe.audio.pcm import ulaw_decode, ulaw_encode
from voxpipe.conversation.events import AudioOut, PlaybackClear
from voxpipe.transports.telephony.media_stream import TelephonyTransport
from voxpipe.transports.telephony.twilio import Twilio

SID = "MZ" + "a" * 32
CALL = "CA" + "b" * 32
ACCOUNT = "AC" + "c" * 32
LOUD = ulaw_encode(LOUD_PCM)  # 20 ms the fake VAD hears
QUIET = ulaw_encode(QUIET_PCM)


class Line(StreamLine):
    """One Twilio stream into the telephony base on fake engines."""

    def __init__(self, **config: dict[str, Any]) -> None:
        super().__init__(Twilio, **config)
        self.sequence = 0
        self.sid, self.call_sid, self.account = SID, CALL, ACCOUNT  # the provider's ids

    def send(self, event: str, body: dict[str, Any] | None = None, **fields: Any) -> None:
        self.sequence += 1
        message = {"event": event, "sequenceNumber": str(self.sequence), "streamSid": self.sid}
        self.ws.text({**message, **(body or {}), **fields})

    def start(self, **parameters: str) -> None:
        self.ws.text({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        self.send(
            "start",
            {
                "start": {
                    "streamSid": self.sid,
                    "accountSid": self.account,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "customParameters": parameters,
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                }
            },
        )

    def media(self, payload: bytes, chunk: int = 1, **media: Any) -> None:
        body = {
            "track": "inbound",
            "chunk": str(chunk),
            "timestamp": str(chunk * 20),
            "payload": base64.b64encode(payload).decode(),
            **media,
        }
        self.send("media", {"media": body})

    async def speak(self, loud_frames: int = 25, quiet_frames: int = 40) -> None:
        for i in range(loud_frames + quiet_frames):
            self.media(LOUD if i < loud_frames else QUIET, chunk=i + 1)
            await asyncio.sleep(0.002)


@pytest.fixture
async def line() -> AsyncIterator[Line]:
    made = Line()
    yield made
    await made.close()


def test_the_transport_is_plain_websocket_with_no_error_text() -> None:
    transport = TelephonyTransport(Twilio)
    assert (transport.name, transport.path) == ("twilio", "/v1/twilio")
    assert transport.subprotocol(cast(WebSocket, None)) is None
    assert transport.error_text(cast(Any, "unauthorized"), "invalid API key") is None


async def test_a_reply_is_mulaw_media_each_followed_by_its_mark(line: Line) -> None:
    line.start()
    await line.until(lambda: line.conn.session is not None)
    session = line.conn.session
    assert session is not None and session.id == SID
    assert session.input_sample_rate == session.output_sample_rate == 8000
    acked: list[int] = []
    real_ack = session.playback_ack
    session.playback_ack = lambda seq: acked.append(seq) or real_ack(seq)  # type: ignore[method-assign]

    await line.speak()
    await line.until(lambda: len(line.ws.of("media")) >= 25)
    sent = line.ws.sent
    first = next(i for i, m in enumerate(sent) if m["event"] == "media")
    pairs = sent[first : first + 50]
    assert [m["event"] for m in pairs] == ["media", "mark"] * 25, "a mark after every frame"
    for media, mark in zip(pairs[::2], pairs[1::2], strict=True):
        assert set(media) == {"event", "streamSid", "media"} and set(media["media"]) == {"payload"}
        assert media["streamSid"] == mark["streamSid"] == SID
        ulaw = base64.b64decode(media["media"]["payload"])
        assert len(ulaw) == 160, "20 ms of 8 kHz μ-law"
        assert set(mark) == {"event", "streamSid", "mark"}
    seqs = [int(m["mark"]["name"].removeprefix("seq:")) for m in pairs[1::2]]
    assert seqs == list(range(seqs[0], seqs[0] + 25))
    # The fake TTS speaks a 220 Hz tone: it survives the trip through 8 kHz μ-law.
    pcm = np.frombuffer(ulaw_decode(base64.b64decode(pairs[10]["media"]["payload"])), "<i2")
    assert np.abs(pcm).max() > 1000

    for seq in seqs[:10]:  # Twilio played ten frames
        line.send("mark", {"mark": {"name": f"seq:{seq}"}})
    await line.until(lambda: len(acked) == 10)
    assert acked == seqs[:10]
    assert line.conn.bad_messages == 0


async def test_barge_in_sends_clear_and_cleared_marks_are_not_acks(line: Line) -> None:
    line.start()
    await line.until(lambda: line.conn.session is not None)
    session = line.conn.session
    assert session is not None
    acked: list[int] = []
    session.playback_ack = acked.append  # type: ignore[method-assign, assignment]
    for seq in (1, 2, 3, 4):
        await line.conn.send_audio(AudioOut(seq, 1, bytes(320)))
    line.send("mark", {"mark": {"name": "seq:1"}})
    await line.until(lambda: acked == [1])
    await line.conn.send_event(PlaybackClear(1, 4))
    await line.until(lambda: line.ws.of("clear"))
    assert line.ws.of("clear") == [{"event": "clear", "streamSid": SID}]
    assert line.ws.sent[-1]["event"] == "clear", "clear goes after every frame sent before it"
    for seq in (2, 3, 4):  # Twilio echoes the marks the clear dropped
        line.send("mark", {"mark": {"name": f"seq:{seq}"}})
    line.send("mark", {"mark": {"name": "seq:99"}})  # never sent
    await line.until(lambda: line.conn.bad_messages == 1)
    assert acked == [1], "a mark dropped by clear was not heard"
    assert line.errors("invalid_event") == 1


async def test_bad_messages_are_counted_and_the_call_goes_on(line: Line) -> None:
    ws = line.ws
    ws.inbox.put_nowait({"type": "websocket.receive", "bytes": b"\x00\x01"})
    ws.text("{not json")
    ws.text("[1, 2]")
    ws.text(json.dumps({"event": "transcribe"}))
    line.media(LOUD)  # before start
    line.start()
    line.start()  # a second one
    line.media(b"")  # empty payload
    line.send("media", {"media": {"track": "inbound", "chunk": "2", "timestamp": "40",
                                  "payload": "@@not base64@@"}})  # fmt: skip
    line.send("media", {"media": {"track": "inbound", "chunk": 3, "timestamp": "60",
                                  "payload": base64.b64encode(LOUD).decode()}})  # fmt: skip
    line.media(LOUD * 51)  # over max_frame_ms (1 s)
    good = {"track": "inbound", "chunk": "4", "timestamp": "80", "payload": "/w=="}
    line.send("media", {"media": good}, streamSid="MZ" + "f" * 32)  # another stream's
    line.send("mark", {"mark": {"name": "hello"}})
    line.send("dtmf", {"dtmf": {"track": "inbound_track", "digit": "x"}})
    ws.text("x" * (line.config.server.max_message_bytes + 1))
    await line.until(lambda: line.conn.bad_messages == 14)
    codes = (
        "invalid_event",
        "invalid_json",
        "unknown_event",
        "session_not_started",
        "session_already_started",
        "bad_audio_frame",
        "message_too_large",
    )
    assert {code: line.errors(code) for code in codes} == {
        # binary, not an object, empty payload, chunk as a number, streamSid, mark, digit
        "invalid_event": 7,
        "invalid_json": 1,
        "unknown_event": 1,
        "session_not_started": 1,
        "session_already_started": 1,
        "bad_audio_frame": 2,  # not base64, over 1 s
        "message_too_large": 1,
    }
    assert not line.task.done(), "bad input never ends the call"
    assert ws.close_code is None


async def test_dtmf_is_counted(line: Line) -> None:
    line.start()
    await line.until(lambda: line.conn.session is not None)
    for digit in "12#":
        line.send("dtmf", {"dtmf": {"track": "inbound_track", "digit": digit}})
    await line.until(
        lambda: line.conn.session is not None and line.conn.session.counts["dtmf"] == 3
    )
    sample = line.metrics.registry.get_sample_value
    assert sample("voxpipe_dtmf_total", {"digit": "#"}) == 1
    assert sample("voxpipe_dtmf_total", {"digit": "1"}) == 1


async def test_stop_ends_the_call_and_closes_the_session(line: Line) -> None:
    line.start()
    await line.until(lambda: line.conn.session is not None)
    session = line.conn.session
    assert session is not None
    line.send("stop", {"stop": {"accountSid": ACCOUNT, "callSid": CALL}})
    await asyncio.wait_for(line.task, 5)
    assert session.outbox.closed and line.ws.close_code == 1000


async def test_custom_parameter_instructions_become_the_system_prompt(line: Line) -> None:
    line.start(instructions="You are a pirate.", caller="+15550100")
    await line.until(lambda: line.conn.session is not None)
    session = line.conn.session
    assert session is not None and session.history.system_prompt == "You are a pirate."


@pytest.mark.parametrize(
    ("parameters", "caller"),
    [
        ({"From": "+15550100"}, "+15550100"),
        ({"caller": "sip:alice@example.com"}, "sip:alice@example.com"),
        ({"From": "+1555\n0100"}, None),  # not a token: dropped, never reaches a tool
        ({}, None),
    ],
)
async def test_the_caller_s_number_reaches_the_tools_call_context(
    line: Line, parameters: dict[str, str], caller: str | None
) -> None:
    line.start(**parameters)
    await line.until(lambda: line.conn.session is not None)
    session = line.conn.session
    assert session is not None
    context = session.control.call_context()
    assert (context.caller, context.transport, context.session_id) == (caller, "twilio", SID)
    assert context.identity == (f"tel:{caller}" if caller else "anonymous")


@pytest.mark.parametrize(
    "change",
    [
        {"mediaFormat": {"encoding": "audio/l16", "sampleRate": 8000, "channels": 1}},
        {"mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 16000, "channels": 1}},
        {"streamSid": "not-a-sid"},  # not the stream's own
        {"callSid": ""},
        {"callSid": "x" * 129},
        {"accountSid": "AC with spaces"},
        {"accountSid": "AC\u0000"},
        {"tracks": []},
        {"tracks": ["outbound"]},
    ],
)
async def test_an_unusable_start_ends_the_call(change: dict[str, Any]) -> None:
    line = Line()
    try:
        info = {
            "streamSid": SID,
            "accountSid": ACCOUNT,
            "callSid": CALL,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            **change,
        }
        line.send("start", {"start": info})
        await asyncio.wait_for(line.task, 5)
        assert line.ws.close_code == 1008 and line.conn.session is None
        assert line.errors("invalid_event") == 1
        reason = line.ws.close_reason or ""
        assert reason.startswith("invalid_event: start") and len(reason.encode()) <= 123, reason
    finally:
        await line.close()


async def test_no_start_in_time_ends_the_call() -> None:
    line = Line(server={"start_timeout_s": 0.2})
    try:
        line.ws.text({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await asyncio.wait_for(line.task, 5)
        assert line.ws.close_code == 1008 and line.errors("start_timeout") == 1
        assert line.ws.close_reason == "start_timeout: no start message received in time"
    finally:
        await line.close()


@pytest.mark.parametrize(
    ("ids", "logged"),
    [
        ((SID, CALL, ACCOUNT), "Twilio SIDs"),
        (tuple(str(uuid.uuid4()) for _ in range(3)), "SignalWire-style ids (UUIDs)"),
        (("stream-7", "call/42", "acct:1"), "ids of another format"),
    ],
)
async def test_a_compatible_provider_s_ids_are_taken_and_their_format_logged(
    ids: tuple[str, str, str], logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SignalWire (and other Twilio-compatible providers) send their own id formats."""
    caplog.set_level(logging.INFO, logger="voxpipe.twilio")
    line = Line()
    line.sid, line.call_sid, line.account = ids
    try:
        line.start()
        await line.until(lambda: line.conn.session is not None)
        assert line.conn.session is not None and line.conn.session.id == ids[0]
        await line.speak()
        await line.until(lambda: len(line.ws.of("media")) >= 5)
        assert {m["streamSid"] for m in line.ws.of("media")} == {ids[0]}
        assert line.conn.bad_messages == 0 and line.ws.close_code is None
        started = [r.getMessage() for r in caplog.records if "started" in r.getMessage()]
        assert len(started) == 1 and logged in started[0], started
        line.send("stop", {"stop": {"accountSid": ids[2], "callSid": ids[1]}})
        await asyncio.wait_for(line.task, 5)
        assert line.ws.close_code == 1000 and line.conn.bad_messages == 0
    finally:
        await line.close()
