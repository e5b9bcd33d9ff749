"""PlaybackTracker: what the caller heard, from real-time pacing or from the client's acks."""

from __future__ import annotations

import time

from voxpipe.conversation.reply_audio import PlaybackTracker

RATE = 16000
FRAME = 320  # 20 ms
MS = 1_000_000  # ns


def tracker_with(
    clauses: list[tuple[str, int]], frames: int, first_seq: int = 1
) -> PlaybackTracker:
    """Clauses of (text, samples), then ``frames`` 20 ms frames sent, played back to back
    from t = 0, numbered from ``first_seq``."""
    tracker = PlaybackTracker(RATE)
    for text, samples in clauses:
        tracker.add_clause(text, samples)
    for i in range(frames):
        tracker.sent(first_seq + i, FRAME, i * 20 * MS)
    return tracker


def test_the_estimate_follows_real_time_pacing() -> None:
    tracker = tracker_with([("one two three four", 1600)], frames=5)
    assert tracker.heard_samples(0) == 0
    assert tracker.heard_samples(10 * MS) == 160  # half of the first frame
    assert tracker.heard_samples(50 * MS) == 800
    assert tracker.heard_samples(10_000 * MS) == 1600  # no more than was sent
    assert tracker.sent_samples == 1600 and tracker.last_seq == 5
    assert tracker.heard_text(50 * MS) == "one two"


def test_the_estimate_leaves_out_frames_not_yet_playing() -> None:
    tracker = PlaybackTracker(RATE)
    tracker.add_clause("a b c d", 1600)
    tracker.sent(1, FRAME, 0)
    tracker.sent(2, FRAME, 100 * MS)  # a gap: the reply was paused, the client ran dry
    assert tracker.heard_samples(60 * MS) == 320
    assert tracker.heard_samples(110 * MS) == 480


def test_an_ack_wins_over_the_estimate() -> None:
    tracker = tracker_with([("one two three four", 1600)], frames=5, first_seq=11)
    assert tracker.ack(12)
    assert tracker.heard_samples(80 * MS) == 640  # two frames, not the 80 ms of pacing
    assert tracker.heard_text(80 * MS) == "one"  # 640 of 1600 samples: 1.6 of four words
    assert tracker.ack(11)  # an older ack never moves playback back
    assert tracker.heard_samples(0) == 640
    tracker.ack_ms(60.0)
    assert tracker.heard_samples(0) == 960
    tracker.ack_ms(1000.0)
    assert tracker.heard_samples(0) == 1600  # bounded by what was sent


def test_text_is_cut_in_proportion_within_the_clause_playing() -> None:
    tracker = tracker_with([("Sure thing,", 1000), ("I can help you with that.", 3000)], 0)
    assert tracker.text_until(0) == ""
    assert tracker.text_until(500) == "Sure"  # half of a two-word clause
    assert tracker.text_until(999) == "Sure"
    assert tracker.text_until(1000) == "Sure thing,"
    assert tracker.text_until(1000 + 1500) == "Sure thing, I can help"  # half of six words
    assert tracker.text_until(1000 + 2999) == "Sure thing, I can help you with"
    assert tracker.text_until(4000) == "Sure thing, I can help you with that."
    assert tracker.text_until(10_000) == "Sure thing, I can help you with that."


def test_an_ack_of_a_frame_not_sent_by_this_reply_is_refused() -> None:
    tracker = tracker_with([("one two", 1600)], frames=5, first_seq=11)
    assert not tracker.ack(10)  # an earlier reply's
    assert not tracker.ack(16)  # not sent (yet)
    assert not tracker.ack(0)
    assert tracker.heard_samples(40 * MS) == 640  # still the estimate
    assert not PlaybackTracker(RATE).ack(1)


def test_the_first_ack_dates_the_start_of_playback() -> None:
    tracker = tracker_with([("one two three four", 1600)], frames=5)
    assert tracker.started_playing_ns() is None
    before = time.monotonic_ns()
    assert tracker.ack(3)  # three 20 ms frames played by now: the first began 60 ms ago
    after = time.monotonic_ns()
    started = tracker.started_playing_ns()
    assert started is not None and before - 60 * MS <= started <= after - 60 * MS
    assert tracker.ack(5) and tracker.started_playing_ns() == started  # the first ack says


def test_a_rewind_takes_back_the_frames_after_the_one_playing() -> None:
    tracker = PlaybackTracker(16000)
    tracker.add_clause("one two three four", 1600)
    for seq in range(1, 6):  # five 320-sample frames
        tracker.sent(seq, 320, 0)
    tracker.ack(2)  # frames 1 and 2 played
    # Heard into frame 3: frames 3 to 5 go again, the sent audio ends with frame 2.
    assert tracker.rewind(700, most=10) == 3
    assert tracker.sent_samples == 640 and tracker.last_seq == 2
    assert tracker.heard_samples(time.monotonic_ns()) == 640
    # At most what the sender still holds: two frames back, however little was heard.
    tracker.sent(6, 320, 0)
    assert tracker.rewind(0, most=2) == 2
    assert tracker.sent_samples == 320 and tracker.last_seq == 1
    assert tracker.heard_samples(time.monotonic_ns()) == 320  # the ack, cut to what is sent
