"""Silero VAD v6 (the ONNX file that ships inside faster-whisper) on onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime

from voxpipe.config import Config
from voxpipe.engines.factory import BuildContext, ModelInfo

WINDOW = 512  # 32 ms at 16 kHz, the window Silero v6 was trained on
CONTEXT = 64  # samples of the previous window the model sees in front of each window
# Silero's recurrent state drifts over a long quiet after speech: on a phone line's digital
# silence, a short word said 3-8 s after the last one scored under 0.5 in some alignments of
# the 32 ms windows ("Smith." after a question: max 0.47, no turn at all), where a settled
# state scores it 0.72 or more. After this many quiet windows in a row (1 s) the state is set
# back to the settled one: a zero state that has heard SETTLE_WINDOWS of silence. (A zero
# state itself hears "Wait, stop." over a reply no better than the drifted one: its first
# windows are jumpy.)
QUIET_RESET_WINDOWS = 32
QUIET_PROBABILITY = 0.1  # under this a window is quiet for the reset
SETTLE_WINDOWS = 16  # 512 ms of silence make the settled state


def default_model_path() -> Path:
    import faster_whisper

    return Path(faster_whisper.__file__).parent / "assets" / "silero_vad_v6.onnx"


class SileroVadStream:
    """Recurrent state of one call: LSTM state, the last 64 samples, a partial window, and
    the quiet windows in a row that set the LSTM state back to the settled one."""

    def __init__(
        self, session: onnxruntime.InferenceSession, settled: tuple[np.ndarray, np.ndarray]
    ) -> None:
        self._session = session
        self._settled = settled  # (h, c) a quiet resets to (_settled_state); read-only
        self._state_h = np.zeros((1, 1, 128), dtype=np.float32)
        self._state_c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)
        self._quiet = 0  # quiet windows in a row (QUIET_RESET_WINDOWS)

    def process(self, audio: np.ndarray) -> list[float]:
        buf = np.concatenate([self._pending, audio.astype(np.float32, copy=False)])
        n = buf.shape[0] // WINDOW
        self._pending = buf[n * WINDOW :]
        probs: list[float] = []
        for i in range(n):
            window = buf[i * WINDOW : (i + 1) * WINDOW]
            x = np.concatenate([self._context, window])[None, :]
            out, self._state_h, self._state_c = self._session.run(
                None, {"input": x, "h": self._state_h, "c": self._state_c}
            )
            self._context = window[-CONTEXT:]
            prob = float(np.asarray(out).reshape(-1)[0])
            probs.append(prob)
            self._quiet = self._quiet + 1 if prob < QUIET_PROBABILITY else 0
            if self._quiet >= QUIET_RESET_WINDOWS:
                self._state_h, self._state_c = self._settled
                self._quiet = 0
        return probs


def _settled_state(session: onnxruntime.InferenceSession) -> tuple[np.ndarray, np.ndarray]:
    """A zero state after SETTLE_WINDOWS of digital silence, read-only: every stream of the
    model shares it (onnxruntime never writes to an input)."""
    h = c = np.zeros((1, 1, 128), dtype=np.float32)
    silence = np.zeros((1, CONTEXT + WINDOW), dtype=np.float32)
    for _ in range(SETTLE_WINDOWS):
        _, h, c = session.run(None, {"input": silence, "h": h, "c": c})
    for state in (h, c):
        state.flags.writeable = False
    return h, c


class SileroVad:
    name = "silero-vad-v6"
    sample_rate = 16000
    window_samples = WINDOW

    def __init__(self, model_path: Path | None = None, threads: int = 1) -> None:
        self.model_path = model_path or default_model_path()
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(self.model_path), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        self._settled = _settled_state(self._session)

    def new_stream(self) -> SileroVadStream:
        return SileroVadStream(self._session, self._settled)

    def warmup(self) -> None:
        self.new_stream().process(np.zeros(WINDOW * 4, dtype=np.float32))


class SileroFactory:
    """Builds Silero from the ``vad`` section (``vad.engine: silero``)."""

    def build(self, config: Config, context: BuildContext) -> SileroVad:
        return SileroVad(config.vad.model_path, threads=config.vad.threads)

    def describe(self, config: Config, assemble: bool) -> ModelInfo:
        path = config.vad.model_path or default_model_path()
        return ModelInfo("vad", "silero-vad-v6 (onnxruntime)", path, config.vad.threads)


FACTORY = SileroFactory()
