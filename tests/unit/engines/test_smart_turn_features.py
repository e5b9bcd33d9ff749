"""Smart Turn's input features against faster-whisper's Whisper feature extractor (the
reference: same filter bank, same log-mel), and the 8 s window's padding and cut."""

from __future__ import annotations

import numpy as np
import pytest
from faster_whisper.feature_extractor import FeatureExtractor

from voxpipe.engines import smart_turn


def _reference(audio: np.ndarray) -> np.ndarray:
    """transformers' WhisperFeatureExtractor(chunk_length=8, do_normalize=True), as pipecat
    calls it: normalise the padded window, then Whisper's log-mel (faster-whisper's)."""
    x = smart_turn.fit_window(audio)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    return FeatureExtractor(chunk_length=8)(x, padding=0)


@pytest.mark.parametrize("seconds", [0.5, 3.0, 8.0, 11.0])
def test_features_match_whisper_feature_extraction(seconds: float) -> None:
    rng = np.random.default_rng(7)
    t = np.arange(int(seconds * 16000)) / 16000
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    )
    ours = smart_turn.log_mel(audio)
    assert ours.shape == (80, 800) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, _reference(audio), atol=2e-4)


def test_short_audio_is_padded_in_front_so_the_end_of_speech_stays_last() -> None:
    audio = np.ones(16000, dtype=np.float32)
    window = smart_turn.fit_window(audio)
    assert window.shape == (128000,)
    assert not window[:112000].any() and window[112000:].all()


def test_long_audio_keeps_its_last_eight_seconds() -> None:
    audio = np.arange(10 * 16000, dtype=np.float32)
    window = smart_turn.fit_window(audio)
    assert window[0] == 2 * 16000 and window[-1] == audio[-1]


def test_features_differ_where_the_sound_is() -> None:
    """A tone at the end lights the last frames, not the first: the window is not flipped."""
    t = np.arange(16000) / 16000
    mel = smart_turn.log_mel(np.sin(2 * np.pi * 440 * t).astype(np.float32))
    assert mel[:, -50:].max() > mel[:, :50].max() + 0.5
