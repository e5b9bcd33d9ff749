"""Every telephony provider's wire translation on fake engines, driven by its line client:
the provider's start opens a session at its rate, a reply goes out in its media and mark
messages, a mark's echo is the session's playback ack, a barge-in sends its clear, keys reach
the session, and bad input is counted (a typed code) without ending the call. Twilio's finer
rules are in test_twilio.py; one call per provider through the real app at the end."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.support import metric_value
from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from tests.unit.transports.in_process import quiet_config, serving
from tests.unit.transports.media_stream import StreamLine
from voxpipe.clients.phone_line import MARK, MEDIA, PhoneLine
from voxpipe.clients.telephony_clients import ExotelLine, PlivoLine, TelnyxLine, VonageLine
from voxpipe.clients.twilio_client import TwilioLine
from voxpipe.config import Config
from voxpipe.conversation.events import AudioOut, PlaybackClear, PlaybackFlush
from voxpipe.engines.base import Engines
from voxpipe.transports.telephony import PROVIDERS
from voxpipe.transports.telephony.base import AudioFormat, Encoding, Provider
from voxpipe.transports.telephony.exotel import Exotel
from voxpipe.transports.telephony.plivo import Plivo
from voxpipe.transports.telephony.telnyx import Telnyx
from voxpipe.transports.telephony.twilio import Twilio
from voxpipe.transports.telephony.vonage import Vonage


@dataclass(frozen=True)
class Spec:
    provider: type[Provider]
    line: type[PhoneLine]
    rate: int
    clear: dict[str, Any]  # the clear message, "{sid}" standing for the stream id
    bad_start: dict[str, Any]  # a start in a format the provider's docs do not have


SPECS = [
    Spec(
        Twilio,
        TwilioLine,
        8000,
        {"event": "clear", "streamSid": "{sid}"},
        {"event": "start", "sequenceNumber": "1", "streamSid": "s", "start": {"streamSid": "s"}},
    ),
    Spec(
        Telnyx,
        TelnyxLine,
        8000,
        {"event": "clear"},
        {
            "event": "start",
            "sequence_number": "1",
            "stream_id": "s",
            "start": {
                "call_control_id": "c",
                "media_format": {"encoding": "OPUS", "sample_rate": 8000, "channels": 1},
            },
        },
    ),
    Spec(
        Plivo,
        PlivoLine,
        8000,
        {"event": "clearAudio", "streamId": "{sid}"},
        {
            "event": "start",
            "sequenceNumber": 1,
            "start": {
                "callId": "c",
                "streamId": "s",
                "tracks": ["inbound"],
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 16000},
            },
        },
    ),
    Spec(
        Vonage,
        VonageLine,
        16000,
        {"action": "clear"},
        {"event": "websocket:connected", "content-type": "audio/l16;rate=44100"},
    ),
    Spec(
        Exotel,
        ExotelLine,
        8000,
        {"event": "clear", "stream_sid": "{sid}"},
        {
            "event": "start",
            "sequence_number": "1",
            "stream_sid": "s",
            "start": {
                "stream_sid": "s",
                "call_sid": "c",
                "media_format": {"encoding": "audio/x-raw", "sample_rate": "11025"},
            },
        },
    ),
]
IDS = [spec.provider.name for spec in SPECS]


class Wire:
    """A provider's side of one stream into the telephony base, on fake engines."""

    def __init__(self, spec: Spec, **config: Any) -> None:
        self.spec = spec
        self.line = spec.line("ws://unused", {"From": "+15550100"})
        self.stream = StreamLine(spec.provider, **config)
        self.conn = self.stream.conn

    def send(self, message: dict[str, Any] | bytes | str) -> None:
        if isinstance(message, str):
            self.stream.ws.text(message)
            return
        wire = self.line.wire(message)
        if isinstance(wire, bytes):
            self.stream.ws.bytes(wire)
        else:
            self.stream.ws.text(wire)

    async def start(self) -> None:
        for message in self.line.opening():
            self.send(message)
        await self.stream.until(lambda: self.conn.session is not None)

    def audio(self, pcm16: bytes) -> None:
        self.send(self.line.media(self.line.encode(pcm16), 1, 20))

    @property
    def sid(self) -> str:
        return self.conn.stream_id

    def sent(self) -> list[Any]:
        """What the server sent: JSON messages decoded, binary frames as bytes."""
        return [*self.stream.ws.sent, *self.stream.ws.binary]


@pytest.fixture(params=SPECS, ids=IDS)
async def wire(request: pytest.FixtureRequest) -> AsyncIterator[Wire]:
    made = Wire(request.param)
    yield made
    await made.stream.close()


def test_every_provider_is_registered_once() -> None:
    assert {spec.provider for spec in SPECS} == set(PROVIDERS)
    assert len({p.name for p in PROVIDERS}) == len(PROVIDERS)


async def test_a_start_opens_a_session_at_the_provider_s_rate(wire: Wire) -> None:
    await wire.start()
    session = wire.conn.session
    assert session is not None and session.id == wire.sid == wire.line.stream_sid
    assert session.input_sample_rate == session.output_sample_rate == wire.spec.rate
    plivo = wire.spec.provider is Plivo  # its extraHeaders take letters and digits only
    assert session.control.call_context().caller == ("15550100" if plivo else "+15550100")
    assert session.control.call_context().transport == wire.spec.provider.name


async def test_reply_frames_and_marks_in_the_provider_s_messages(wire: Wire) -> None:
    await wire.start()
    session = wire.conn.session
    assert session is not None
    acked: list[int] = []
    session.playback_ack = acked.append  # type: ignore[method-assign, assignment]
    rate = wire.spec.rate
    tone = (np.sin(np.arange(rate // 50) * 0.3) * 8000).astype("<i2").tobytes()  # 20 ms
    for seq in (1, 2, 3):
        await wire.conn.send_audio(AudioOut(seq, 1, tone if seq < 3 else tone[: len(tone) // 2]))
    await wire.stream.until(lambda: len(wire.conn.sink._queue) == 0)
    got = [
        wire.line.read_binary(m) if isinstance(m, bytes) else wire.line.read(m) for m in wire.sent()
    ]
    media = [g for g in got if g.kind == MEDIA]
    marks = [g.mark for g in got if g.kind == MARK]
    assert marks == ["seq:1", "seq:2", "seq:3"]
    assert np.abs(np.frombuffer(media[0].pcm, "<i2")).max() > 4000, "the tone survives the codec"
    sizes = {len(m.pcm) for m in media}
    if wire.spec.provider.frame_ms:  # Vonage and Exotel take whole 20 ms frames only
        assert sizes == {rate // 50 * 2}, "the short last frame is padded with silence"
    wire.send(wire.line.echo("seq:2"))
    await wire.stream.until(lambda: acked == [2])
    assert wire.conn.bad_messages == 0


async def test_barge_in_sends_the_provider_s_clear_and_cleared_marks_are_not_acks(
    wire: Wire,
) -> None:
    await wire.start()
    session = wire.conn.session
    assert session is not None
    acked: list[int] = []
    session.playback_ack = acked.append  # type: ignore[method-assign, assignment]
    for seq in (1, 2, 3):
        await wire.conn.send_audio(AudioOut(seq, 1, bytes(wire.spec.rate // 50 * 2)))
    await wire.conn.send_event(PlaybackClear(1, 3))
    expected = json.loads(json.dumps(wire.spec.clear).replace("{sid}", wire.sid))
    await wire.stream.until(lambda: expected in wire.stream.ws.sent)
    if wire.line.echoes_cleared_marks:  # Twilio and Telnyx send back what the clear dropped
        for name in ("seq:1", "seq:2", "seq:3"):
            wire.send(wire.line.echo(name))
    wire.send(wire.line.echo("seq:99"))  # never sent: counted
    await wire.stream.until(lambda: wire.conn.bad_messages == 1)
    assert acked == [] and wire.stream.errors("invalid_event") == 1


async def test_a_flush_is_the_provider_s_clear_and_the_interruption_after_it_sends_none(
    wire: Wire,
) -> None:
    await wire.start()
    expected = json.loads(json.dumps(wire.spec.clear).replace("{sid}", wire.sid))

    def clears() -> int:
        return wire.stream.ws.sent.count(expected)

    for seq in (1, 2):
        await wire.conn.send_audio(AudioOut(seq, 1, bytes(wire.spec.rate // 50 * 2)))
    await wire.conn.send_event(PlaybackFlush(1))  # the pause: the caller stops hearing it
    await wire.stream.until(lambda: clears() == 1)
    await wire.conn.send_event(PlaybackClear(1, 2))  # the interruption: nothing sent since
    await wire.conn.send_audio(AudioOut(3, 1, bytes(wire.spec.rate // 50 * 2)))
    await wire.conn.send_event(PlaybackClear(1, 3))  # a frame went out since: cleared again
    await wire.stream.until(lambda: clears() == 2)
    await asyncio.sleep(0.05)
    assert clears() == 2


async def test_keys_reach_the_session(wire: Wire) -> None:
    await wire.start()
    for digit in "42#":
        wire.send(wire.line.key(digit))
    await wire.stream.until(
        lambda: wire.conn.session is not None and wire.conn.session.counts["dtmf"] == 3
    )
    sample = wire.stream.metrics.registry.get_sample_value
    assert sample("voxpipe_dtmf_total", {"digit": "#"}) == 1


async def test_bad_input_is_a_typed_count_and_never_ends_the_call(wire: Wire) -> None:
    wire.audio(bytes(320))  # before the start
    wire.send("{not json")
    wire.send(json.dumps({"event": "transcribe"}))
    wire.send("[1, 2]")
    await wire.start()
    wire.send(json.dumps({"event": "x" * (wire.stream.config.server.max_message_bytes + 1)}))
    too_long = bytes(wire.spec.rate * 2 * 2)  # 2 s of PCM16: over max_frame_ms (1 s)
    wire.audio(too_long)
    if wire.spec.provider is Vonage:
        wire.send(b"\x01\x02\x03")  # half a sample
        expected_audio = 2
    else:
        message = wire.line.media(b"\0\0", 2, 40)
        assert isinstance(message, dict)
        message["media"]["payload"] = "@@not base64@@"
        wire.send(message)
        other = wire.line.key("1")
        assert isinstance(other, dict)
        for key in ("streamSid", "stream_id", "streamId", "stream_sid"):
            if key in other:
                other[key] = "another-stream"
        wire.send(other)
        expected_audio = 2
    expected = {
        "session_not_started": 1,
        "invalid_json": 1,
        "unknown_event": 1,
        "message_too_large": 1,
        "bad_audio_frame": expected_audio,
    }
    total = sum(expected.values()) + 1 + (0 if wire.spec.provider is Vonage else 1)
    await wire.stream.until(lambda: wire.conn.bad_messages == total)
    assert {code: wire.stream.errors(code) for code in expected} == expected
    assert not wire.stream.task.done() and wire.stream.ws.close_code is None


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
async def test_an_unusable_start_ends_the_call_with_its_reason(spec: Spec) -> None:
    made = Wire(spec)
    try:
        made.send(json.dumps(spec.bad_start))
        await asyncio.wait_for(made.stream.task, 5)
        assert made.stream.ws.close_code == 1008 and made.conn.session is None
        assert made.stream.errors("invalid_event") == 1
        reason = made.stream.ws.close_reason or ""
        assert reason.startswith("invalid_event: ") and len(reason.encode()) <= 123, reason
    finally:
        await made.stream.close()


def test_l16_is_big_endian_on_rtp_and_little_endian_elsewhere() -> None:
    pcm = np.array([1, -2, 300], dtype="<i2").tobytes()
    rtp, wav = AudioFormat(Encoding.PCM16BE, 16000), AudioFormat(Encoding.PCM16LE, 16000)
    assert rtp.encode(pcm) == np.array([1, -2, 300], dtype=">i2").tobytes()
    assert rtp.decode(rtp.encode(pcm)) == pcm and wav.encode(pcm) == pcm
    alaw = AudioFormat(Encoding.ALAW, 8000)
    assert alaw.silence(4) == alaw.encode(bytes(8)) and alaw.bytes_for(20) == 160


# -- one call per provider through the real app, by its line client ---------------------


@contextlib.asynccontextmanager
async def serve() -> AsyncIterator[tuple[int, Any]]:
    def engines(config: Config) -> Engines:
        return Engines(FakeVad(), FakeStt(), FakeLlm(), FakeTts(samples_per_clause=3200))

    async with serving(quiet_config(), engines, 10.0) as (port, http):
        yield port, http


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
async def test_a_call_through_the_app_by_the_provider_s_line(spec: Spec) -> None:
    async with serve() as (port, http):
        async with spec.line(f"ws://127.0.0.1:{port}/v1/{spec.provider.name}") as line:
            await line.connect()
            loud = np.full(line.rate // 2, 0.5)  # 0.5 s the fake VAD hears
            said = line.say(loud, line.rate)
            await asyncio.wait_for(said.sent.wait(), 10)
            await line.wait_for(lambda: len(line.of(MEDIA)) >= 5, 10)
            await line.wait_for(line.played_out, 10)
            await line.press("7")
            await asyncio.sleep(0.2)
            close = await line.hang_up()
        assert close == 1000
        text = (await http.get("/metrics")).text
        assert metric_value(text, 'voxpipe_dtmf_total{digit="7"}') == 1
        assert (metric_value(text, 'voxpipe_errors_total{code="invalid_event"}') or 0) == 0
        async with asyncio.timeout(5):
            connected = 'voxpipe_calls{state="connected"}'
            while metric_value((await http.get("/metrics")).text, connected):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
