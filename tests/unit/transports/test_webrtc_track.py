"""The reply track: 20 ms frames on a real-time clock, silence between replies, acks, flush."""

from __future__ import annotations

import fractions

import numpy as np

from voxpipe.conversation.events import AudioOut
from voxpipe.transports.webrtc_media import FRAME_BYTES, FRAME_SAMPLES, RATE, ReplyTrack


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def make_track(max_buffer_ms: int = 1000) -> tuple[ReplyTrack, FakeClock, list[int], list[float]]:
    clock, played, dropped = FakeClock(), [], []
    track = ReplyTrack(max_buffer_ms, played.append, dropped.append, clock, clock.sleep)
    return track, clock, played, dropped


def pcm(value: int, samples: int) -> bytes:
    return np.full(samples, value, dtype="<i2").tobytes()


async def test_frames_are_20ms_48khz_mono_with_continuous_pts() -> None:
    track, clock, _, _ = make_track()
    frames = [await track.recv() for _ in range(4)]
    assert [f.pts for f in frames] == [0, 960, 1920, 2880]
    for f in frames:
        assert f.samples == FRAME_SAMPLES and f.sample_rate == RATE
        assert f.time_base == fractions.Fraction(1, RATE)
        assert f.format.name == "s16" and f.layout.name == "mono"
        assert not f.to_ndarray().any(), "idle track must be silent"
    assert clock.slept == [0.02, 0.02, 0.02]


async def test_a_stalled_loop_restarts_the_clock_instead_of_bursting() -> None:
    track, clock, _, _ = make_track()
    await track.recv()
    clock.now += 1.0  # the loop stalled for a second
    late = await track.recv()
    after = [await track.recv() for _ in range(2)]
    assert clock.slept == [0.02, 0.02], "frames after a stall go out at 20 ms, not in a burst"
    assert [late.pts, *(f.pts for f in after)] == [960, 1920, 2880]


async def test_reply_frames_are_reframed_and_acked_when_fully_played() -> None:
    track, _, played, _ = make_track()
    track.push(AudioOut(1, 1, pcm(1000, 1440)))  # 30 ms
    track.push(AudioOut(2, 1, pcm(2000, 480)))  # 10 ms: the last, short frame of a reply
    first = await track.recv()
    assert first.to_ndarray().tobytes() == pcm(1000, 960)
    assert played == [], "frame 1 is only half played"
    second = await track.recv()
    assert second.to_ndarray().tobytes() == pcm(1000, 480) + pcm(2000, 480)
    assert played == [2], "the last frame finished in this one is the ack"
    assert not (await track.recv()).to_ndarray().any()


async def test_playback_clear_flushes_the_buffer() -> None:
    track, _, played, _ = make_track()
    for seq in range(1, 6):
        track.push(AudioOut(seq, 1, pcm(500, FRAME_SAMPLES)))
    await track.recv()
    assert track.buffered_ms == 80
    track.clear()
    assert track.buffered_ms == 0
    assert not (await track.recv()).to_ndarray().any()
    assert played == [1]


async def test_overflow_drops_the_oldest_audio() -> None:
    track, _, _, dropped = make_track(max_buffer_ms=100)
    for seq in range(1, 9):  # 160 ms into a 100 ms buffer
        track.push(AudioOut(seq, 1, pcm(seq, FRAME_SAMPLES)))
    assert track.buffered_ms == 100
    assert round(sum(dropped), 3) == 0.06
    first = await track.recv()
    assert first.to_ndarray().tobytes() == pcm(4, FRAME_SAMPLES), "frames 1-3 were dropped"
    assert len(pcm(0, FRAME_SAMPLES)) == FRAME_BYTES
