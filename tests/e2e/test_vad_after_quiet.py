"""Silero VAD with the real model, on a phone line's digital silence: a short word said
seconds after the caller's last words opens speech in every alignment of the 32 ms windows
(a caller's "Smith." in answer to a question went unheard in some, and the call waited; "Yes."
to a readback, likewise), wherever it falls in the second after which a quiet resets the
state (``silero_vad.py``, ``QUIET_RESET_WINDOWS``)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.barge_in_vad import opens_at, over_the_line, question_then_quiet
from tests.support import voiced
from voxpipe.audio import pcm
from voxpipe.config import TurnConfig
from voxpipe.engines.silero_vad import WINDOW, SileroVad

pytestmark = pytest.mark.e2e

FRAME = 160  # 20 ms of 8 kHz μ-law, as Twilio sends it
SILENCE = bytes([0xFF]) * FRAME  # μ-law's zero
TURN = TurnConfig()
TURN_WINDOWS = TURN.min_speech_ms * 16 // WINDOW  # the turn's own rule: so many windows...


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


def _longest_run(probs: np.ndarray) -> int:
    run = best = 0
    for p in probs:
        run = run + 1 if p >= TURN.threshold else 0  # ...in a row at the turn's threshold
        best = max(best, run)
    return best


@pytest.mark.parametrize("answer", ["Smith.", "Yes."])
@pytest.mark.parametrize("gap_s", [3.0, 5.5, 8.0])
def test_a_short_word_after_a_long_silence_is_speech_in_every_alignment(
    vad: SileroVad, first: bytes, answer: str, gap_s: float
) -> None:
    word = _line(answer)
    for lead in range(16):  # 2 ms steps: every phase of the words on the 32 ms windows
        line = SILENCE * 20 + SILENCE[: 16 * lead] + first + SILENCE * int(gap_s * 50)
        start = len(line) * 2 // WINDOW  # the word's first window (8 kHz -> 16 kHz)
        probs = _probabilities(vad, line + word + SILENCE * 50)
        assert _longest_run(probs[start - 2 :]) >= TURN_WINDOWS, (gap_s, lead, probs[start - 2 :])


def test_a_short_word_is_speech_wherever_it_falls_in_the_reset_cycle(vad: SileroVad) -> None:
    """A quiet resets the state every second; the word may come at any window of that
    second, so at any of 32 states from the settled one on (it is not a fresh one's)."""
    audio, rate = voiced("Yes.")
    word = over_the_line(pcm.resample(audio, rate, 16000))
    for extra in range(32):
        stream = vad.new_stream()
        stream.process(question_then_quiet(1.0 + extra * WINDOW / 16000))
        heard = np.concatenate([word, np.zeros(WINDOW * 10, np.float32)])
        probs = np.array(stream.process(heard[: heard.shape[0] // WINDOW * WINDOW]))
        assert _longest_run(probs) >= TURN_WINDOWS, (extra, probs.round(2))


@pytest.mark.parametrize("quiet_s", [3.0, 5.5])
def test_wait_over_a_reply_pauses_it_in_every_alignment(vad: SileroVad, quiet_s: float) -> None:
    """The caller asked, listened to the reply for seconds, and says "Wait, stop.": the
    barge-in bar hears "Wait", not only "stop", in every alignment of the windows (without
    the reset to a settled state after a quiet, the drifted state missed it in some)."""
    cfg = TURN
    windows = cfg.barge_in_min_speech_ms * 16 // WINDOW
    audio, rate = voiced("Wait, stop.")
    clip = over_the_line(pcm.resample(audio, rate, 16000))
    speech_at = int(np.argmax(np.abs(clip) > 0.02))
    late = []
    for phase in range(0, WINDOW, 32):
        stream = vad.new_stream()
        stream.process(question_then_quiet(quiet_s))
        heard = np.concatenate([np.zeros(phase, np.float32), clip])
        probs = stream.process(heard[: heard.shape[0] // WINDOW * WINDOW])
        opened = opens_at(probs, cfg.barge_in_threshold, windows)
        late.append(None if opened is None else ((opened + 1) * WINDOW - phase - speech_at) / 16)
    on_wait = all(ms is not None and ms < 300 for ms in late)
    assert on_wait, late
