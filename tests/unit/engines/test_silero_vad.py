"""Silero VAD with the real model, on a phone line's digital silence: a short word said
seconds after the caller's last words opens speech in every alignment of the 32 ms windows
(a caller's "Smith." in answer to a question went unheard in some, and the call waited; "Yes."
to a readback, likewise)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.barge_in_vad import asked, opens_at, over_the_line
from tests.support import voiced
from voxpipe.audio import pcm
from voxpipe.config import TurnConfig
from voxpipe.engines.silero_vad import WINDOW, SileroVad

FRAME = 160  # 20 ms of 8 kHz μ-law, as Twilio sends it
SILENCE = bytes([0xFF]) * FRAME  # μ-law's zero


def _line(text: str) -> bytes:
    audio, rate = voiced(text)
    return pcm.ulaw_encode(pcm.float_to_pcm16(pcm.resample(audio, rate, 8000)))


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    return SileroVad()


@pytest.fixture(scope="module")
def first() -> bytes:
    return _line("Book a table for two people at seven tonight.")


def _probabilities(vad: SileroVad, line: bytes) -> np.ndarray:
    """The line as the server hears it: 20 ms frames, resampled as they come, then windows."""
    resampler, stream = pcm.StreamResampler(8000, 16000), vad.new_stream()
    pending, probs = np.zeros(0, np.float32), []
    for i in range(0, len(line), FRAME):
        pending = np.concatenate(
            [pending, resampler.process(pcm.pcm16_to_float(pcm.ulaw_decode(line[i : i + FRAME])))]
        )
        n = pending.shape[0] // WINDOW
        if n:
            probs += stream.process(pending[: n * WINDOW])
            pending = pending[n * WINDOW :]
    return np.array(probs)


def _longest_run(probs: np.ndarray, threshold: float = 0.5) -> int:
    run = best = 0
    for p in probs:
        run = run + 1 if p >= threshold else 0
        best = max(best, run)
    return best


@pytest.mark.parametrize("answer", ["Smith.", "Yes."])
@pytest.mark.parametrize("gap_s", [3.0, 5.5, 8.0])
def test_a_short_word_after_a_long_silence_is_speech_in_every_alignment(
    vad: SileroVad, first: bytes, answer: str, gap_s: float
) -> None:
    word = _line(answer)
    for lead in range(16):  # every phase of 20 ms frames on 32 ms windows, and then some
        line = SILENCE * (20 + lead) + first + SILENCE * int(gap_s * 50)
        start = round(len(line) * 2 / WINDOW)  # the word's first window (8 kHz -> 16 kHz)
        probs = _probabilities(vad, line + word + SILENCE * 50)
        # The turn's own rule opens speech at 0.5 for 3 windows (96 ms).
        assert _longest_run(probs[start - 2 :]) >= 3, (gap_s, lead, probs[start - 2 :].round(2))


@pytest.mark.parametrize("quiet_s", [3.0, 5.5])
def test_wait_over_a_reply_pauses_it_in_every_alignment(vad: SileroVad, quiet_s: float) -> None:
    """The caller asked, listened to the reply for seconds, and says "Wait, stop.": the
    barge-in bar hears "Wait", not only "stop", in every alignment of the windows (without
    the reset to a settled state after a quiet, the drifted state missed it in some)."""
    cfg = TurnConfig()
    windows = cfg.barge_in_min_speech_ms * 16 // WINDOW
    audio, rate = voiced("Wait, stop.")
    clip = over_the_line(pcm.resample(audio, rate, 16000))
    speech_at = int(np.argmax(np.abs(clip) > 0.02))
    late = []
    for phase in range(0, WINDOW, 32):
        stream = vad.new_stream()
        stream.process(asked(quiet_s))
        heard = np.concatenate([np.zeros(phase, np.float32), clip])
        probs = stream.process(heard[: heard.shape[0] // WINDOW * WINDOW])
        opened = opens_at(probs, cfg.barge_in_threshold, windows)
        late.append(None if opened is None else ((opened + 1) * WINDOW - phase - speech_at) / 16)
    on_wait = all(ms is not None and ms < 300 for ms in late)
    assert on_wait, late
