"""Dropped audio is told to the client at once, then at most once per interval, never lost."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from voxpipe.conversation.inbound import DropReports, InboundAudioBuffer


def test_the_first_drop_of_an_episode_is_told_at_once() -> None:
    reports = DropReports(interval_s=1.0, episode_gap_s=5.0)
    assert reports.due_at() is None and reports.take(0.0) is None
    assert reports.add(20.0, now=10.0) is True  # opens an episode: log it
    notice = reports.take(10.0)
    assert notice is not None and (notice.ms, notice.total_ms) == (20.0, 20.0)
    assert reports.due_at() is None


def test_a_flood_is_told_once_per_interval_and_summed() -> None:
    reports = DropReports(interval_s=1.0, episode_gap_s=5.0)
    reports.add(20.0, now=10.0)
    assert reports.take(10.0) is not None
    for i in range(1, 10):  # one drop every 100 ms
        assert reports.add(20.0, now=10.0 + i / 10) is False  # same episode: not logged again
        assert reports.take(10.0 + i / 10) is None  # within the interval: held
    assert reports.due_at() == 11.0
    notice = reports.take(11.0)
    assert notice is not None and (notice.ms, notice.total_ms) == (180.0, 200.0)
    assert reports.episodes == 1


def test_a_drop_after_a_quiet_gap_opens_a_new_episode_told_at_once() -> None:
    reports = DropReports(interval_s=1.0, episode_gap_s=5.0)
    reports.add(20.0, now=10.0)
    reports.take(10.0)
    assert reports.add(40.0, now=15.5) is True
    notice = reports.take(15.5)
    assert notice is not None and (notice.ms, notice.total_ms) == (40.0, 60.0)
    assert reports.episodes == 2


def test_flush_tells_what_is_pending_even_before_it_is_due() -> None:
    reports = DropReports(interval_s=1.0)
    reports.add(20.0, now=0.0)
    reports.take(0.0)
    reports.add(30.0, now=0.2)
    assert reports.take(0.3) is None
    notice = reports.flush(0.3)
    assert notice is not None and notice.ms == 30.0
    assert reports.flush(0.3) is None


@given(st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.1, 100.0)), max_size=60))
def test_every_dropped_millisecond_is_in_exactly_one_notice(
    drops: list[tuple[float, float]],
) -> None:
    reports = DropReports(interval_s=1.0, episode_gap_s=2.0)
    now, told = 0.0, 0.0
    for gap, ms in drops:
        now += gap
        reports.add(ms, now)
        if (notice := reports.take(now)) is not None:
            told += notice.ms
    if (notice := reports.flush(now)) is not None:
        told += notice.ms
    assert abs(told - sum(ms for _, ms in drops)) < 1e-6
    assert abs(reports.total_ms - told) < 1e-6


def test_the_jitter_buffer_drops_the_oldest_beyond_its_bound() -> None:
    buffer = InboundAudioBuffer(16000, max_ms=100)  # 3200 bytes
    frame = bytes(640)  # 20 ms
    dropped = sum(buffer.put(frame, now_ns=1) for _ in range(8))
    assert dropped == 3 * 640 and buffer.buffered_ms == 100.0
