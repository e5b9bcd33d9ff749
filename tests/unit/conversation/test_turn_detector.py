"""TurnDetector: synthetic probabilities over numbered windows, so the turn audio is exact."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from voxpipe.config import TurnConfig
from voxpipe.conversation.turn_detector import (
    BLIP_WINDOWS,
    FADE_WINDOWS,
    TurnDetector,
    TurnEvent,
    TurnEventKind,
)

W = 512  # samples per window: 32 ms at 16 kHz

# 3 windows of speech to start, 2 windows of prefix padding, 5 windows of silence to stop,
# a turn of at most 50 windows; release threshold well apart from the opening threshold.
CFG = TurnConfig(
    threshold=0.5,
    release_threshold=0.3,
    min_speech_ms=96,
    prefix_padding_ms=64,
    silence_ms=160,
    max_turn_s=1.6,
)


def feed(
    detector: TurnDetector, probs: Sequence[float], first: int = 0
) -> list[tuple[int, TurnEvent]]:
    """Push window ``first + i`` (every sample equal to its number) with ``probs[i]``."""
    events = []
    for i, prob in enumerate(probs, start=first):
        event = detector.push(np.full(W, i, dtype=np.float32), prob)
        if event is not None:
            events.append((i, event))
    return events


def window_ids(audio: np.ndarray | None) -> list[int]:
    assert audio is not None and audio.dtype == np.float32 and audio.shape[0] % W == 0
    windows = audio.reshape(-1, W)
    assert (windows == windows[:, :1]).all(), "a window was split or mixed"
    return [int(w[0]) for w in windows]


def test_speech_starts_only_after_min_speech_windows() -> None:
    detector = TurnDetector(CFG, W)
    # Two windows of speech, a dip, two more: never three in a row.
    assert feed(detector, [0.0, 0.9, 0.9, 0.1, 0.9, 0.9, 0.0]) == []
    assert not detector.in_speech

    events = feed(detector, [0.9, 0.9, 0.9], first=7)
    assert [(i, e.kind, e.sample) for i, e in events] == [
        (9, TurnEventKind.SPEECH_STARTED, 7 * W)  # reported at the first speech window
    ]
    assert detector.in_speech and events[0][1].audio is None


def test_turn_audio_has_prefix_padding_and_a_short_tail() -> None:
    detector = TurnDetector(CFG, W)
    events = feed(detector, [0.0] * 5 + [0.9] * 6 + [0.0] * 5)
    assert [(i, e.kind) for i, e in events] == [
        (7, TurnEventKind.SPEECH_STARTED),
        (15, TurnEventKind.SPEECH_STOPPED),
    ]
    stopped = events[1][1]
    # Windows 3-4 are the padding, 5-10 the speech, 11-13 the tail kept after the last word.
    assert window_ids(stopped.audio) == list(range(3, 14))
    assert not detector.in_speech


def test_speech_stopped_sample_is_the_end_of_the_last_speech_window() -> None:
    detector = TurnDetector(CFG, W)
    events = feed(detector, [0.0] * 5 + [0.9] * 6 + [0.0] * 5)
    assert events[0][1].sample == 5 * W
    assert events[1][1].sample == 11 * W  # window 10 is the last speech: it ends at 11 * W


def test_a_pause_shorter_than_silence_ms_does_not_split_the_turn() -> None:
    detector = TurnDetector(CFG, W)
    probs = [0.0] * 5 + [0.9] * 6 + [0.0] * 4 + [0.9] * 3 + [0.0] * 5
    events = feed(detector, probs)
    assert [(i, e.kind) for i, e in events] == [
        (7, TurnEventKind.SPEECH_STARTED),
        (22, TurnEventKind.SPEECH_STOPPED),
    ]
    stopped = events[1][1]
    assert stopped.sample == 18 * W
    assert window_ids(stopped.audio) == list(range(3, 21))


def test_a_pause_of_silence_ms_ends_the_turn_and_the_next_one_starts_fresh() -> None:
    detector = TurnDetector(CFG, W)
    probs = [0.0] * 5 + [0.9] * 6 + [0.0] * 5 + [0.0] * 2 + [0.9] * 4 + [0.0] * 5
    events = feed(detector, probs)
    kinds = [e.kind for _, e in events]
    assert kinds == [
        TurnEventKind.SPEECH_STARTED,
        TurnEventKind.SPEECH_STOPPED,
        TurnEventKind.SPEECH_STARTED,
        TurnEventKind.SPEECH_STOPPED,
    ]
    second_start, second_stop = events[2][1], events[3][1]
    assert second_start.sample == 18 * W
    assert second_stop.sample == 22 * W
    # Padding for the second turn comes from after the first turn's end, never from inside it.
    assert window_ids(second_stop.audio) == list(range(16, 25))


def test_silence_timer_counts_silence_inside_a_turn() -> None:
    detector = TurnDetector(CFG, W)
    feed(detector, [0.9] * 3 + [0.0] * 2)
    assert detector.silence_ms() == 2 * 32.0
    assert detector.pending_audio_s == 5 * W / 16000
    feed(detector, [0.9], first=5)
    assert detector.silence_ms() == 0.0


def test_max_turn_s_cuts_a_long_turn_without_losing_audio() -> None:
    detector = TurnDetector(CFG, W)
    events = feed(detector, [0.9] * 60)
    assert [(i, e.kind) for i, e in events] == [
        (2, TurnEventKind.SPEECH_STARTED),
        (49, TurnEventKind.SPEECH_STOPPED),  # 50 windows = 1.6 s
        (52, TurnEventKind.SPEECH_STARTED),  # the caller is still talking
    ]
    assert events[1][1].sample == 50 * W
    assert window_ids(events[1][1].audio) == list(range(50))
    assert events[2][1].sample == 50 * W

    tail = feed(detector, [0.0] * 5, first=60)
    assert window_ids(tail[0][1].audio) == list(range(50, 63))


def test_release_threshold_hysteresis() -> None:
    detector = TurnDetector(CFG, W)
    # Between release (0.3) and threshold (0.5): not enough to open speech...
    assert feed(detector, [0.4] * 10) == []
    # ...but once open, it keeps the turn going however long it lasts.
    events = feed(detector, [0.9] * 3 + [0.4] * 20, first=10)
    assert [e.kind for _, e in events] == [TurnEventKind.SPEECH_STARTED]
    assert detector.in_speech and detector.silence_ms() == 0.0
    # Below release counts as silence; the end is the last window at or above threshold.
    events = feed(detector, [0.2] * 5, first=33)
    assert [(i, e.kind) for i, e in events] == [(37, TurnEventKind.SPEECH_STOPPED)]
    assert events[0][1].sample == 13 * W


def test_a_fading_word_does_not_restart_the_silence() -> None:
    """Silero's probability fades through the band after a word: the silence that ends the
    turn runs from the last window at the threshold, so the same silence_ms follows every
    word, however it faded. The faded windows stay in the turn's audio."""
    detector = TurnDetector(CFG, W)
    # Speech (windows 0-3), a fade of 4 windows in the band (4-7), then quiet from window 8.
    events = feed(detector, [0.9] * 4 + [0.4] * 4 + [0.1] * 10)
    kinds = [(i, e.kind) for i, e in events]
    # 5 windows of silence after the last speech (window 3) end the turn at window 8, the
    # first quiet window; with the fade restarting the silence it would have been window 12.
    assert kinds == [(2, TurnEventKind.SPEECH_STARTED), (8, TurnEventKind.SPEECH_STOPPED)]
    assert events[1][1].sample == 4 * W
    assert window_ids(events[1][1].audio)[-1] == 8  # the fade and the first quiet window


def test_the_turn_never_ends_on_a_window_in_the_band() -> None:
    detector = TurnDetector(CFG, W)
    # Past 5 windows since the last speech, but every window in the band (a fade of the
    # longest kind): the turn holds until a window is quiet.
    events = feed(detector, [0.9] * 3 + [0.4] * 8)
    assert [e.kind for _, e in events] == [TurnEventKind.SPEECH_STARTED]
    assert detector.in_speech
    events = feed(detector, [0.1], first=11)
    assert [(i, e.kind) for i, e in events] == [(11, TurnEventKind.SPEECH_STOPPED)]


def test_a_long_run_in_the_band_is_soft_speech() -> None:
    """More than FADE_WINDOWS in the band is no fade: it holds the turn, and the silence
    starts again after it, as for speech."""
    detector = TurnDetector(CFG, W)
    feed(detector, [0.9] * 3 + [0.4] * (FADE_WINDOWS + 1))
    assert detector.silence_ms() == 0.0
    start = 3 + FADE_WINDOWS + 1
    events = feed(detector, [0.1] * 5, first=start)
    assert [(i, e.kind) for i, e in events] == [(start + 4, TurnEventKind.SPEECH_STOPPED)]


def test_a_blip_after_the_fade_is_silence_and_a_sound_is_not() -> None:
    """After a quiet window, BLIP_WINDOWS in the band (a breath, a click) count as silence;
    one more is a sound: it holds the turn and the silence starts again, so a preempted
    reply on the turn so far is discarded."""
    detector = TurnDetector(CFG, W)
    feed(detector, [0.9] * 3 + [0.1] + [0.4] * BLIP_WINDOWS)
    assert detector.silence_ms() == (1 + BLIP_WINDOWS) * 32.0
    events = feed(detector, [0.1] * 2, first=4 + BLIP_WINDOWS)
    assert [e.kind for _, e in events] == [TurnEventKind.SPEECH_STOPPED]

    detector = TurnDetector(CFG, W)
    feed(detector, [0.9] * 3 + [0.1] + [0.4] * (BLIP_WINDOWS + 1))
    assert detector.in_speech and detector.silence_ms() == 0.0
    first = 4 + BLIP_WINDOWS + 1
    events = feed(detector, [0.1] * 5, first=first)
    assert [(i, e.kind) for i, e in events] == [(first + 4, TurnEventKind.SPEECH_STOPPED)]


def test_default_release_threshold_is_threshold_minus_0_15() -> None:
    cfg = CFG.model_copy(update={"release_threshold": None, "threshold": 0.6})
    detector = TurnDetector(cfg, W)
    feed(detector, [0.9] * 3)
    feed(detector, [0.5] * 10, first=3)  # 0.5 >= 0.45: still speech
    assert detector.in_speech and detector.silence_ms() == 0.0
    events = feed(detector, [0.4] * 5, first=13)  # 0.4 < 0.45: silence
    assert [e.kind for _, e in events] == [TurnEventKind.SPEECH_STOPPED]


def test_clock_counts_every_window() -> None:
    detector = TurnDetector(CFG, W)
    feed(detector, [0.0, 0.9, 0.9, 0.9, 0.0])
    assert detector.samples == 5 * W


def test_over_a_reply_a_weak_short_word_opens_speech() -> None:
    """A caller's first word over a phone line is often weak (Silero 0.3-0.5): over a reply
    it pauses the reply at ``barge_in_threshold`` after ``barge_in_min_speech_ms``; with no
    reply speaking the same windows are no speech."""
    weak = [0.0, 0.4, 0.45, 0.0]
    assert feed(TurnDetector(CFG, W), weak) == []
    detector = TurnDetector(CFG, W)
    detector.over_reply = True
    events = feed(detector, weak)
    assert [(i, e.kind, e.sample) for i, e in events] == [(2, TurnEventKind.SPEECH_STARTED, 1 * W)]


def test_over_a_reply_the_barge_in_bar_is_never_above_the_turns() -> None:
    cfg = CFG.model_copy(update={"barge_in_threshold": 0.8, "barge_in_min_speech_ms": 32})
    detector = TurnDetector(cfg, W)
    detector.over_reply = True
    events = feed(detector, [0.6, 0.0])
    assert [(i, e.kind) for i, e in events] == [(0, TurnEventKind.SPEECH_STARTED)]


def test_weak_speech_that_paused_a_reply_holds_the_pause() -> None:
    """Speech at 0.3-0.45 over a reply: once it opened at the barge-in bar, no window at that
    bar is silence, so the pause holds while it lasts; its voiced length counts only the
    windows at the turn's threshold, so weak speech alone never reaches min_interruption_ms
    (a backchannel is paused over, not stopped and resumed)."""
    detector = TurnDetector(CFG, W)
    detector.over_reply = True
    feed(detector, [0.4, 0.4] + [0.32, 0.45] * 5)
    assert detector.in_speech and detector.silence_ms() == 0.0
    assert detector.speech_ms() == 2 * 32  # from its first window to the opening window
    events = feed(detector, [0.1] * 5, first=12)
    assert [(i, e.kind) for i, e in events] == [(16, TurnEventKind.SPEECH_STOPPED)]
    # The next turn, with no reply speaking, opens at the turn's own bar again.
    detector.over_reply = False
    assert feed(detector, [0.45] * 10, first=17) == []
