"""A test line's playback, on a clock the test sets: audio plays in real time, a mark is due
once the audio before it has played, a clear drops what has not."""

from __future__ import annotations

import time

from voxpipe.clients.line_playback import Playback


def two_marks(now: float, each_s: float) -> Playback:
    """Audio, a mark, audio, a mark: all arrived at ``now``."""
    playback = Playback()
    for seq in (1, 2):
        playback.audio(now, each_s)
        playback.mark(now, f"seq:{seq}")
    return playback


def test_a_mark_is_due_once_the_audio_before_it_has_played() -> None:
    now = time.monotonic()
    playback = two_marks(now, 0.5)
    assert playback.next_due(now + 0.4) is None
    assert playback.next_due(now + 0.6) == "seq:1"
    assert playback.next_due(now + 0.6) is None
    assert playback.next_due(now + 1.1) == "seq:2"
    assert playback.received_s == 1.0


def test_a_clear_drops_the_unplayed_audio_and_its_marks() -> None:
    now = time.monotonic()
    playback = two_marks(now, 10.0)
    assert playback.clear(time.monotonic()) == ["seq:1", "seq:2"]
    assert 19.0 < playback.cleared_s <= 20.0
    assert playback.buffered_s == 0.0
    assert playback.next_due(now + 30) is None


def test_audio_after_a_gap_plays_from_when_it_arrives() -> None:
    playback = Playback()
    now = time.monotonic()
    playback.audio(now - 5, 0.1)  # long played
    playback.audio(now, 0.2)
    playback.mark(now, "seq:3")
    assert playback.next_due(now + 0.1) is None
    assert playback.next_due(now + 0.25) == "seq:3"
