"""Caller audio faster than the VAD: the sender is held back (backpressure), and whatever is
dropped even so is told to the client (``audio_dropped``), counted and logged once."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from tests.unit.conversation.harness import FRAME, RATE, Call, silence
from tests.unit.fakes import FakeVad, FakeVadStream
from voxpipe.audio.pcm import float_to_pcm16
from voxpipe.config import TurnConfig
from voxpipe.conversation.events import AudioDropped, ErrorCode


class SlowVadStream(FakeVadStream):
    def __init__(self, window_samples: int, vad: SlowVad) -> None:
        super().__init__(window_samples)
        self.vad = vad

    def process(self, audio: np.ndarray) -> list[float]:
        self.vad.gate.wait(5)  # closed: the VAD is stalled (a starved thread)
        time.sleep(self.vad.delay_s)
        return super().process(audio)


class SlowVad(FakeVad):
    """The fake VAD, ``delay_s`` slower per job, and stalled while ``gate`` is clear."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.gate = threading.Event()
        self.gate.set()

    def new_stream(self) -> SlowVadStream:
        return SlowVadStream(self.window_samples, self)


def frames(seconds: float) -> list[bytes]:
    pcm = float_to_pcm16(silence(int(seconds * RATE) // 512))
    return [pcm[i : i + 2 * FRAME] for i in range(0, len(pcm), 2 * FRAME)]


def dropped_ms(call: Call) -> float:
    value = call.metrics.registry.get_sample_value(
        "voxpipe_audio_dropped_seconds_total",
        {"direction": "inbound", "policy": "drop_oldest", "transport": "unknown"},
    )
    return 0.0 if value is None else value * 1000


def notices(call: Call) -> list[AudioDropped]:
    return call.of(AudioDropped)


async def test_a_stalled_vad_drops_and_every_dropped_ms_is_told(
    make_call: Callable[..., Call], caplog: pytest.LogCaptureFixture
) -> None:
    vad = SlowVad()
    call = make_call(vad=vad)
    session = call.session
    vad.gate.clear()
    caplog.set_level(logging.WARNING, "voxpipe.session")
    for frame in frames(3.0):  # 3 s at once into a 2 s bound, the VAD stalled
        session.feed(frame)
        await asyncio.sleep(0)
    await call.until(lambda: notices(call), 1.0)  # the first is told at once
    first = notices(call)[0]
    assert first.type == "error" and first.code == ErrorCode.AUDIO_DROPPED == "audio_dropped"
    assert first.dropped_ms > 0 and "limits.inbound_buffer_ms" in first.message
    assert first.to_dict()["dropped_ms"] == first.dropped_ms
    vad.gate.set()
    await session.close()  # what was not told yet is told now
    told = notices(call)
    total = dropped_ms(call)
    assert 900 <= total <= 1100, total  # about 3 s - the 2 s bound
    assert abs(sum(n.dropped_ms for n in told) - total) < 0.1 * len(told)
    assert abs(told[-1].total_dropped_ms - total) < 0.1
    assert abs(session.counts["inbound_dropped_ms"] - total) <= len(told)
    warnings = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # one line per episode


async def test_backpressure_takes_a_fast_sender_at_the_vads_pace(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(vad=SlowVad(delay_s=0.004))  # 5x real time per 20 ms frame
    session = call.session
    started = time.monotonic()
    for frame in frames(4.0):  # as fast as the sender can
        session.feed(frame)
        await session.keep_up()  # what a WebSocket transport does per message
    held_s = time.monotonic() - started
    await session.push_audio(b"\x00\x00")
    assert dropped_ms(call) == 0 and not notices(call)
    assert held_s > 0.2, "the sender was held while the VAD caught up"


async def test_without_backpressure_the_same_sender_loses_audio_and_is_told(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(vad=SlowVad(delay_s=0.004))
    session = call.session
    for frame in frames(4.0):
        session.feed(frame)
        await session.keep_up(max_wait_s=0)  # limits.inbound_wait_ms: 0
    await call.until(lambda: notices(call), 1.0)
    await session.close()
    total = dropped_ms(call)
    assert total > 0
    assert abs(sum(n.dropped_ms for n in notices(call)) - total) < 0.1 * len(notices(call))


async def test_uncommitted_audio_past_max_turn_is_told_too(
    make_call: Callable[..., Call],
) -> None:
    call = make_call(turn_config=TurnConfig(max_turn_s=2.0))
    session = call.session
    session.commands.set_turn_taking(server_vad=False, auto_respond=False)  # the client commits
    for frame in frames(3.0):
        await session.push_audio(frame)
    await call.until(lambda: notices(call), 1.0)
    await session.close()
    told = notices(call)
    assert "turn.max_turn_s" in told[0].message
    assert 900 <= sum(n.dropped_ms for n in told) <= 1100
    assert abs(sum(n.dropped_ms for n in told) - dropped_ms(call)) < 0.1 * len(told)
