"""Silero VAD with the real model, on a phone line's digital silence: a short word said
seconds after the caller's last words opens speech in every alignment of the 32 ms windows
(a caller's "Smith." in answer to a question went unheard in some, and the call waited)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import voiced
from voxpipe.audio import pcm
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
def said() -> tuple[bytes, bytes]:
    return _line("Book a table for two people at seven tonight."), _line("Smith.")


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


@pytest.mark.parametrize("gap_s", [3.0, 5.5, 8.0])
def test_a_short_word_after_a_long_silence_is_speech_in_every_alignment(
    vad: SileroVad, said: tuple[bytes, bytes], gap_s: float
) -> None:
    first, word = said
    for lead in range(16):  # every phase of 20 ms frames on 32 ms windows, and then some
        line = SILENCE * (20 + lead) + first + SILENCE * int(gap_s * 50)
        start = round(len(line) * 2 / WINDOW)  # the word's first window (8 kHz -> 16 kHz)
        probs = _probabilities(vad, line + word + SILENCE * 50)
        # The turn's own rule opens speech at 0.5 for 3 windows (96 ms).
        assert _longest_run(probs[start - 2 :]) >= 3, (gap_s, lead, probs[start - 2 :].round(2))
