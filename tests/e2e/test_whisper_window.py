"""Whisper in fitted windows, on the real tiny.en model and real speech.

The runaway guard (a 5 s window makes the 1.1 s cards clip "10 of clubs" loop),
the fitted window against the 30 s window on LibriVox sentences, the decode
budget on noise and silence, and a warm-up that visits every bucket.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from bench.stt import corpus_wer, normalize
from tests.support import ALSA, CARDS, librivox_clips
from voxpipe.audio.pcm import read_wav, resample
from voxpipe.engines.base import STT_SAMPLE_RATE
from voxpipe.engines.whisper_stt import WhisperStt
from voxpipe.engines.whisper_window import (
    WINDOW_BUCKETS_S,
    max_new_tokens,
    repeated_ngram,
    words_of,
)

pytestmark = pytest.mark.e2e


def wav16(path: Any) -> np.ndarray:
    audio, rate = read_wav(path)
    return resample(audio, rate, STT_SAMPLE_RATE)


@pytest.fixture(scope="module")
def stt() -> WhisperStt:
    engine = WhisperStt()
    engine.warmup()
    return engine


@pytest.fixture(scope="module")
def with_5s_bucket() -> WhisperStt:
    """A bucket the default set leaves out because short clips loop in it."""
    engine = WhisperStt(buckets=(5.0, *WINDOW_BUCKETS_S))
    engine.warmup()
    return engine


def assert_no_loop(text: str) -> None:
    gram = repeated_ngram(words_of(text))
    assert gram is None, f"{' '.join(gram or ())!r} repeated three times in {text!r}"


def test_a_short_clip_in_the_shortest_window_has_no_repetition_and_the_right_words(
    stt: WhisperStt,
) -> None:
    audio = wav16(CARDS / "001.wav")  # "ten of clubs", 1.1 s
    trace = stt.transcribe_traced(audio)
    assert [p.window_s for p in trace.passes] == [min(WINDOW_BUCKETS_S)]
    assert_no_loop(trace.transcription.text)
    assert normalize(trace.transcription.text) == ["ten", "of", "clubs"]


def test_a_loop_in_a_short_window_is_caught_and_redone_in_a_longer_one(
    with_5s_bucket: WhisperStt,
) -> None:
    audio = wav16(CARDS / "001.wav")
    start = time.perf_counter()
    trace = with_5s_bucket.transcribe_traced(audio)
    elapsed = time.perf_counter() - start
    first, *retries = trace.passes
    # In 5 s the decoder loops on "10 of clubs"; the budget stops it and the guard retries.
    assert first.window_s == 5.0 and first.runaway
    assert first.tokens <= max_new_tokens(audio.shape[0] / STT_SAMPLE_RATE) + 4
    assert retries and retries[-1].window_s == 10.0 and not retries[-1].runaway
    assert_no_loop(trace.transcription.text)
    assert normalize(trace.transcription.text) == ["ten", "of", "clubs"]
    assert elapsed < 5.0  # the capped loop plus one 10 s pass: a few hundred ms unloaded


def test_every_short_clip_of_the_corpus_is_loop_free_with_the_5s_bucket(
    with_5s_bucket: WhisperStt,
) -> None:
    clips = sorted(CARDS.glob("00*.wav")) + sorted(p for p in ALSA.glob("*.wav"))
    for path in clips:
        text = with_5s_bucket.transcribe(wav16(path)).text
        assert_no_loop(text)


def test_pairs_of_card_clips_are_loop_free(stt: WhisperStt) -> None:
    """Two cards 0.3 s apart: "10 of clubs, 5 5" looped in both the 10 s and 20 s windows
    before the guard climbed on to 30 s."""
    cards = [wav16(p) for p in sorted(CARDS.glob("00*.wav"))]
    pause = np.zeros(round(0.3 * STT_SAMPLE_RATE), dtype=np.float32)
    for i, first in enumerate(cards):
        for second in cards[i + 1 :]:
            assert_no_loop(stt.transcribe(np.concatenate([first, pause, second])).text)


def test_fitted_and_full_windows_agree_on_librivox(stt: WhisperStt) -> None:
    pairs: dict[str, list[tuple[str, str]]] = {"fitted": [], "full": []}
    differ = []
    for clip in librivox_clips():
        audio = wav16(clip.path)
        fitted = stt.transcribe_traced(audio)
        full = stt.transcribe_traced(audio, window="full")
        assert fitted.passes[0].window_s in WINDOW_BUCKETS_S
        assert full.passes[0].window_s is None
        pairs["fitted"].append((clip.text, fitted.transcription.text))
        pairs["full"].append((clip.text, full.transcription.text))
        if normalize(fitted.transcription.text) != normalize(full.transcription.text):
            differ.append((fitted.transcription.text, full.transcription.text))
    assert corpus_wer(pairs["fitted"]) <= corpus_wer(pairs["full"]) * 1.05, differ
    assert len(differ) <= 1, differ


@pytest.mark.parametrize("kind", ["silence", "white noise", "hum", "alsa Noise.wav"])
def test_the_decode_budget_holds_on_noise_and_silence(stt: WhisperStt, kind: str) -> None:
    rng = np.random.default_rng(7)
    t = np.arange(4 * STT_SAMPLE_RATE, dtype=np.float32) / STT_SAMPLE_RATE
    audio = {
        "silence": lambda: np.zeros(t.shape, dtype=np.float32),
        "white noise": lambda: (0.1 * rng.standard_normal(t.shape)).astype(np.float32),
        "hum": lambda: (0.2 * np.sin(2 * np.pi * 50 * t)).astype(np.float32),
        "alsa Noise.wav": lambda: wav16(ALSA / "Noise.wav"),
    }[kind]()
    budget = max_new_tokens(audio.shape[0] / STT_SAMPLE_RATE)
    start = time.perf_counter()
    trace = stt.transcribe_traced(audio)
    elapsed = time.perf_counter() - start
    assert all(p.tokens <= budget + 4 for p in trace.passes), trace.passes
    assert len(words_of(trace.transcription.text)) <= 3, trace.transcription.text
    assert_no_loop(trace.transcription.text)
    assert elapsed < 5.0, trace.passes


def test_audio_longer_than_the_last_bucket_goes_window_by_window(stt: WhisperStt) -> None:
    clips = librivox_clips()
    pause = np.zeros(STT_SAMPLE_RATE // 2, dtype=np.float32)
    parts: list[np.ndarray] = []
    while sum(p.shape[0] for p in parts) < 31 * STT_SAMPLE_RATE:
        for clip in clips:
            parts += [wav16(clip.path), pause]
    trace = stt.transcribe_traced(np.concatenate(parts))
    assert [p.window_s for p in trace.passes] == [None]
    words = normalize(trace.transcription.text)
    assert {"dashwood", "amiable", "selfish"} <= set(words)


@pytest.fixture
def decoded_windows(stt: WhisperStt) -> Iterator[list[float]]:
    """A spy on the real decode: the windows it is asked for."""
    seen: list[float] = []
    real: Callable[..., tuple[str, int]] = stt._decode

    def spy(features: np.ndarray, window_s: float, budget: int) -> tuple[str, int]:
        seen.append(window_s)
        return real(features, window_s, budget)

    stt._decode = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del stt._decode


def test_warmup_runs_the_call_path_in_every_bucket(
    stt: WhisperStt, decoded_windows: list[float]
) -> None:
    stt.warmup()
    assert set(WINDOW_BUCKETS_S) <= set(decoded_windows)
    decoded_windows.clear()
    stt.transcribe(wav16(CARDS / "003.wav"))
    assert decoded_windows == [10.0]
