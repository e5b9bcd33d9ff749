"""``bench barge-in-vad``: the opening rule it applies is the detector's (windows in a row)."""

from __future__ import annotations

import numpy as np

from bench.barge_in_vad import WINDOW, _opens, opens_at, over_the_line, question_then_quiet
from bench.cli import build_parser


def test_speech_opens_after_enough_windows_in_a_row() -> None:
    probs = [0.1, 0.6, 0.6, 0.2, 0.6, 0.6, 0.6]
    assert opens_at(probs, 0.5, 3) == 6
    assert opens_at(probs, 0.5, 2) == 2
    assert opens_at(probs, 0.7, 1) is None


def test_each_run_of_speech_opens_once() -> None:
    assert _opens([0.6, 0.6, 0.6, 0.1, 0.6, 0.6, 0.1, 0.6], 0.5, 2) == 2


def test_the_line_keeps_the_length_and_the_level() -> None:
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)).astype(np.float32)
    heard = over_the_line(tone)
    assert abs(heard.shape[0] - tone.shape[0]) <= 2
    assert abs(float(np.abs(heard[1000:-1000]).max()) - 0.3) < 0.03


def test_is_a_command() -> None:
    args = build_parser().parse_args(["barge-in-vad"])
    assert args.func.__name__ == "cmd_barge_in_vad" and args.each == 30
    assert args.quiet == [3.0]
    assert build_parser().parse_args(["barge-in-vad", "--quiet", "3,5.5"]).quiet == [3.0, 5.5]


def test_a_call_that_asked_hears_the_question_then_whole_windows_of_quiet() -> None:
    heard = question_then_quiet(3.0)
    assert heard.shape[0] % WINDOW == 0
    assert np.abs(heard[: WINDOW * 20]).max() > 0.05  # the question
    assert np.abs(heard[-3 * 16000 + WINDOW :]).max() == 0.0  # then the line's silence
