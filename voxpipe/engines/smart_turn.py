"""Smart Turn v3.2 (Daily, BSD-2): is the caller's utterance complete, from its sound alone?

A silence says only that the caller stopped; this model also hears how they stopped (the
falling pitch of a finished sentence, the held vowel of "for..."), so a complete turn can
end after a short silence and an unfinished one can wait. Everything this model needs to
know lives here: it hears the last 8 s of the turn at 16 kHz, shorter audio padded with
zeros in front (so the end of speech always sits at the end of the window), the waveform
normalised to zero mean and unit variance, then Whisper's 80-bin log-mel (25 ms Hann
window, 10 ms hop, 800 frames). That is pipecat's ``LocalSmartTurnAnalyzerV3``
preprocessing, computed here in numpy (no torch, no transformers).

The file comes out of the pipecat-ai wheel (:data:`~voxpipe.engines.model_files.SMART_TURN`).
Like every engine it is synchronous: it runs on the VAD's runner thread, one onnxruntime
thread, so it adds no thread to the server's budget.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
from numpy.lib.stride_tricks import sliding_window_view

from voxpipe.config import Config
from voxpipe.engines.factory import BuildContext, ModelInfo
from voxpipe.engines.model_files import (
    SMART_TURN,
    ModelFileError,
    ensure_wheel_member,
    smart_turn_file,
)

SAMPLE_RATE = 16000
WINDOW_S = 8
WINDOW_SAMPLES = WINDOW_S * SAMPLE_RATE  # 128000: what the model hears, the turn's end last
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 80
FRAMES = WINDOW_SAMPLES // HOP  # 800
_NORM_EPS = 1e-7  # transformers' do_normalize


def _mel_filters() -> np.ndarray:
    """Whisper's Slaney-normalised filter bank, (80, 201); faster-whisper builds the same."""
    from faster_whisper.feature_extractor import FeatureExtractor

    return np.asarray(FeatureExtractor.get_mel_filters(SAMPLE_RATE, N_FFT, N_MELS), np.float32)


_HANN = np.hanning(N_FFT + 1)[:-1].astype(np.float32)  # periodic, as torch.hann_window
_MELS = _mel_filters()


def fit_window(audio: np.ndarray) -> np.ndarray:
    """The last 8 s of ``audio``, zero-padded in front to exactly 8 s."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    if audio.shape[0] >= WINDOW_SAMPLES:
        return audio[-WINDOW_SAMPLES:]
    return np.pad(audio, (WINDOW_SAMPLES - audio.shape[0], 0))


def log_mel(audio: np.ndarray) -> np.ndarray:
    """The model's input for one turn: (80, 800) float32, Whisper's log-mel of the
    normalised 8 s window (centred STFT with reflect padding, the last frame dropped)."""
    x = fit_window(audio)
    x = (x - x.mean()) / np.sqrt(x.var() + _NORM_EPS)
    padded = np.pad(x, N_FFT // 2, mode="reflect")
    frames = sliding_window_view(padded, N_FFT)[::HOP][:FRAMES]
    power = np.abs(np.fft.rfft(frames * _HANN, axis=-1)) ** 2  # (800, 201)
    mel = np.log10(np.maximum(_MELS @ power.T.astype(np.float32), 1e-10))
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)


class SmartTurn:
    """The loaded model. ``threads`` is its onnxruntime budget (1: it shares the VAD's thread)."""

    name = "smart-turn-v3.2"

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        if not model_path.is_file():
            raise ModelFileError(
                f"Smart Turn model {model_path} is missing. Fix: `voxpipe models --assemble`."
            )
        self.model_path = model_path
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(model_path), sess_options=opts, providers=["CPUExecutionProvider"]
        )

    def probability_complete(self, audio: np.ndarray) -> float:
        """How sure the model is that the turn in ``audio`` (16 kHz float32, ending where the
        caller fell silent) is complete, 0..1."""
        features = log_mel(audio)[None, :, :]
        out = self._session.run(None, {"input_features": features})[0]
        return float(np.asarray(out).reshape(-1)[0])

    def warmup(self) -> None:
        self.probability_complete(np.zeros(SAMPLE_RATE, dtype=np.float32))


class SmartTurnFactory:
    """Builds Smart Turn (``turn_model.engine: smart_turn``), its file taken out of the
    pipecat-ai wheel into ``llm.cache_dir`` the first time."""

    def build(self, config: Config, context: BuildContext) -> SmartTurn:
        return SmartTurn(ensure_wheel_member(config.llm.cache_dir, SMART_TURN), threads=1)

    def describe(self, config: Config, assemble: bool) -> ModelInfo:
        cache = config.llm.cache_dir
        path = ensure_wheel_member(cache, SMART_TURN) if assemble else smart_turn_file(cache)
        return ModelInfo("turn", "smart-turn-v3.2 (onnxruntime)", path, 1)


FACTORY = SmartTurnFactory()
