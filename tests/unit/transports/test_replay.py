"""The native outbound stream (``transports/replay.py``): numbering, what a reconnecting
client missed, whether all of it is still there, and the ring's bounds."""

from __future__ import annotations

import asyncio
import json

from voxpipe.conversation.events import AudioOut, Pong
from voxpipe.transports.base import SendBuffer
from voxpipe.transports.native_protocol import ResumeFrom
from voxpipe.transports.replay import AUDIO_HEADER, REPLAY_MAX_EVENTS, Outbound

RATE = 16000
FRAME_MS = 20
FRAME = bytes(RATE * FRAME_MS // 1000 * 2)  # 20 ms of PCM16


def frame(seq: int, turn_id: int = 1) -> AudioOut:
    return AudioOut(seq, turn_id, FRAME)


def at(event_id: int = 0, audio_seq: int = 0) -> ResumeFrom:
    return ResumeFrom(last_event_id=event_id, last_audio_seq=audio_seq)


def test_events_are_numbered_and_frames_carry_their_header() -> None:
    out = Outbound(RATE, replay_ms=1000)
    first, second = out.event(Pong()), out.event(Pong())
    assert json.loads(first.message) == {"type": "pong", "event_id": 1}
    assert (second.event_id, out.last_event_id) == (2, 2)
    out.audio(frame(7, turn_id=3))
    assert out.last_audio_seq == 7
    missed, _ = out.missed(at(2, 6))
    assert len(missed) == 1 and isinstance(missed[0].message, bytes)
    assert AUDIO_HEADER.unpack_from(missed[0].message) == (7, 3)
    assert missed[0].message[AUDIO_HEADER.size :] == FRAME


def test_a_client_gets_what_it_missed_in_order() -> None:
    out = Outbound(RATE, replay_ms=1000)
    out.event(Pong())  # 1
    out.audio(frame(1))
    out.event(Pong())  # 2
    out.audio(frame(2))
    out.audio(frame(3))
    missed, complete = out.missed(at(1, 1))
    assert complete
    assert [(s.event_id, s.audio_seq) for s in missed] == [(2, 0), (0, 2), (0, 3)]
    assert out.missed(at(2, 3)) == ([], True), "a client that has it all misses nothing"


def test_the_ring_is_bounded_by_audio_time_and_says_what_is_gone() -> None:
    out = Outbound(RATE, replay_ms=5 * FRAME_MS)
    for seq in range(1, 11):
        out.audio(frame(seq))
    missed, complete = out.missed(at(0, 0))
    assert [s.audio_seq for s in missed] == [6, 7, 8, 9, 10], "the newest 100 ms"
    assert not complete and out.forgotten_audio_seq == 5
    assert out.missed(at(0, 5))[1], "a client past the forgotten frames misses nothing gone"


def test_the_ring_is_bounded_by_count() -> None:
    out = Outbound(RATE, replay_ms=1000)
    for _ in range(REPLAY_MAX_EVENTS + 3):
        out.event(Pong())
    missed, complete = out.missed(at(0))
    assert len(missed) == REPLAY_MAX_EVENTS and missed[0].event_id == 4
    assert not complete and out.forgotten_event_id == 3
    assert out.missed(at(3))[1]


def test_a_restored_stream_numbers_on_from_the_client_and_replays_nothing_before() -> None:
    out = Outbound.continuing(RATE, 1000, at(12, 40))
    assert (out.last_event_id, out.last_audio_seq) == (12, 40)
    assert out.missed(at(12, 40)) == ([], True)
    assert not out.missed(at(11, 40))[1], "nothing before the client's position can be resent"
    assert out.event(Pong()).event_id == 13


async def test_each_message_goes_to_the_sink_of_the_moment() -> None:
    sent: list[str | bytes] = []

    async def write(message: str | bytes) -> None:
        sent.append(message)

    out = Outbound(RATE, replay_ms=1000)
    out.event(Pong())  # no connection: kept for a replay only
    sink = SendBuffer(write, 1000.0, lambda: None)
    out.sink = sink
    out.event(Pong())
    out.audio(frame(1))
    assert sink.audio_ms == FRAME_MS, "reply audio counts against the live send bound"
    writer = asyncio.create_task(sink.run())
    await sink.flush(1.0)
    writer.cancel()
    assert sent[0] == json.dumps({"type": "pong", "event_id": 2}, separators=(",", ":"))
    assert len(sent) == 2 and isinstance(sent[1], bytes)
    assert AUDIO_HEADER.unpack_from(sent[1]) == (1, 1)
