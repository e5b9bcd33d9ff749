"""TurnDetector with ``end_of_turn: smart_turn``: the turn model's verdict is an input, and
the silence that ends the turn follows it, counted in samples like everything else."""

from __future__ import annotations

import numpy as np

from tests.unit.conversation.test_turn_detector import W, feed, window_ids
from voxpipe.config import TurnConfig
from voxpipe.conversation.turn_detector import TurnDetector, TurnEventKind, Verdict

# 3 windows of speech to start; asked after 2 silent windows (64 ms); a complete turn ends
# after 4 silent windows (128 ms), an unfinished one after 20 (640 ms).
SMART = TurnConfig(
    threshold=0.5,
    release_threshold=0.3,
    min_speech_ms=96,
    prefix_padding_ms=64,
    silence_ms=160,
    end_of_turn="smart_turn",
    smart_turn_complete_ms=128,
    smart_turn_max_silence_ms=640,
    max_turn_s=10,
)


def _speak_then_pause(detector: TurnDetector) -> int:
    """10 windows of speech (0..9), then 2 silent ones: the candidate comes at window 11."""
    events = feed(detector, [0.9] * 10 + [0.0, 0.0])
    kinds = [(i, e.kind) for i, e in events]
    assert kinds == [(2, TurnEventKind.SPEECH_STARTED), (11, TurnEventKind.END_CANDIDATE)]
    candidate = events[-1][1]
    assert window_ids(candidate.audio) == list(range(12)), "the turn so far, silence included"
    assert candidate.sample == 10 * W and candidate.start == 0
    return 12


def test_a_turn_judged_complete_ends_after_the_short_silence() -> None:
    detector = TurnDetector(SMART, W)
    nxt = _speak_then_pause(detector)
    detector.judged(Verdict.COMPLETE)
    events = feed(detector, [0.0] * 10, first=nxt)
    assert [(i, e.kind) for i, e in events] == [(13, TurnEventKind.SPEECH_STOPPED)]
    assert events[0][1].sample == 10 * W


def test_a_turn_judged_unfinished_waits_for_the_longest_silence() -> None:
    detector = TurnDetector(SMART, W)
    nxt = _speak_then_pause(detector)
    detector.judged(Verdict.UNFINISHED)
    events = feed(detector, [0.0] * 30, first=nxt)
    assert [(i, e.kind) for i, e in events] == [(29, TurnEventKind.SPEECH_STOPPED)]


def test_unjudged_silence_ends_only_at_the_longest_silence() -> None:
    events = feed(TurnDetector(SMART, W), [0.9] * 10 + [0.0] * 30)
    ends = [i for i, e in events if e.kind is TurnEventKind.SPEECH_STOPPED]
    assert ends == [29]


def test_speech_after_a_complete_verdict_forgets_it_and_asks_again() -> None:
    detector = TurnDetector(SMART, W)
    nxt = _speak_then_pause(detector)
    detector.judged(Verdict.COMPLETE)
    events = feed(detector, [0.9, 0.0, 0.0, 0.0, 0.0, 0.0], first=nxt)
    # the caller went on at window 12: no end at 13; asked again after 2 more silent windows
    assert [(i, e.kind) for i, e in events] == [(14, TurnEventKind.END_CANDIDATE)]
    detector.judged(Verdict.UNFINISHED)
    assert detector.in_speech
    assert feed(detector, [0.0] * 15, first=18)[-1][0] == 32  # the 20th silent window after 12


def test_a_verdict_after_the_turn_ended_is_ignored() -> None:
    detector = TurnDetector(SMART, W)
    feed(detector, [0.9] * 10 + [0.0] * 20)
    detector.judged(Verdict.COMPLETE)
    assert feed(detector, [0.9] * 3 + [0.0] * 4, first=30)[-1][1].kind is (
        TurnEventKind.END_CANDIDATE
    ), "the next turn starts unjudged"


def test_the_silence_setting_never_asks() -> None:
    plain = TurnConfig(**{**SMART.model_dump(), "end_of_turn": "silence"})
    events = feed(TurnDetector(plain, W), [0.9] * 10 + [0.0] * 6)
    assert [e.kind for _, e in events] == [
        TurnEventKind.SPEECH_STARTED,
        TurnEventKind.SPEECH_STOPPED,
    ]
    assert np.isclose(events[-1][1].sample / 16, 320)
