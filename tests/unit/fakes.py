"""Small, deterministic engines that satisfy the Protocols in ``voxpipe.engines.base``.

They let the session's orchestration be tested without loading a model: the VAD hears
"speech" wherever the audio is loud, the STT and LLM return scripted text, and the TTS
speaks a fixed number of samples per clause.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np

from voxpipe.config import Config
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    Engines,
    LlmEngine,
    LlmOutput,
    LlmRequest,
    ToolSpec,
    Transcription,
)


class FakeVadStream:
    def __init__(self, window_samples: int) -> None:
        self.window = window_samples

    def process(self, audio: np.ndarray) -> list[float]:
        n = audio.shape[0] // self.window
        windows = audio[: n * self.window].reshape(n, self.window)
        return [1.0 if float(np.mean(np.abs(w))) > 0.1 else 0.0 for w in windows]


class FakeVad:
    """Speech probability 1.0 for a window whose mean |sample| is above 0.1, else 0.0."""

    name = "fake-vad"
    sample_rate = 16000
    window_samples = 512

    def new_stream(self) -> FakeVadStream:
        return FakeVadStream(self.window_samples)

    def warmup(self) -> None:
        pass


class FakeStt:
    """Returns scripted transcripts in order (the last one repeats); an Exception is raised.

    ``gate``, when given, is waited on before answering, so a test can hold a job on the
    engine's thread; ``running`` says whether a job is on the thread right now.
    """

    name = "fake-stt"

    def __init__(self, *script: str | Exception, gate: threading.Event | None = None) -> None:
        self.script = list(script) or ["hello there"]
        self.gate = gate
        self.calls: list[np.ndarray] = []
        self.running = False

    def transcribe(self, audio: np.ndarray) -> Transcription:
        self.running = True
        try:
            self.calls.append(audio)
            if self.gate is not None:
                self.gate.wait(5)
            item = self.script[min(len(self.calls), len(self.script)) - 1]
            if isinstance(item, Exception):
                raise item
            return Transcription(item, "en", audio.shape[0] / 16000)
        finally:
            self.running = False

    def warmup(self) -> None:
        pass


class FakeLlm(LlmEngine):
    """Streams scripted replies (one list of deltas per call; the last one repeats).

    Sleeps ``delay_s`` before each delta and stops as soon as ``cancel`` is set, as a real
    engine does between tokens. Requests for a ``...#summary`` session (the summarizer's)
    stream ``summary`` instead, after ``summary_delay_s`` per delta, and are recorded apart,
    so the replies' script does not depend on when a summary runs.
    """

    name = "fake-llm"

    def __init__(
        self,
        *replies: Sequence[LlmOutput],
        delay_s: float = 0.0,
        summary: Sequence[str] = ("The caller", " said hello."),
        summary_delay_s: float = 0.0,
    ) -> None:
        self.replies = list(replies) or [["Hello", " there", "."]]
        self.delay_s = delay_s
        self.summary = list(summary)
        self.summary_delay_s = summary_delay_s
        self.calls: list[list[ChatMessage]] = []  # reply requests
        self.tools: list[list[ToolSpec]] = []  # the tools offered, per request
        self.tool_choices: list[str] = []
        self.yielded: list[int] = []  # deltas yielded, per reply request
        self.summary_calls: list[list[ChatMessage]] = []
        self.summary_yielded: list[int] = []
        self.prefills: list[tuple[str, list[ChatMessage]]] = []
        self.prefill_tools: list[list[ToolSpec]] = []
        self.forgotten: list[str] = []
        self.trace_headers: list[dict[str, str]] = []  # what each request carried
        self.running = 0

    def generate(self, request: LlmRequest) -> Iterator[LlmOutput]:
        """A scripted reply may hold tool calls too (any :data:`LlmOutput` item): they are
        yielded only when tools are offered, as a real engine can call none otherwise."""
        session_id, messages, cancel, usage = (
            request.session_id, request.messages, request.cancel, request.usage,
        )  # fmt: skip
        tools, tool_choice = request.tools, request.tool_choice
        self.tools.append(list(tools))
        self.tool_choices.append(tool_choice)
        self.trace_headers.append(dict(request.trace_headers or {}))
        if session_id.endswith("#summary"):
            self.summary_calls.append(list(messages))
            script, delay_s, yielded = self.summary, self.summary_delay_s, self.summary_yielded
        else:
            self.calls.append(list(messages))
            script = self.replies[min(len(self.calls), len(self.replies)) - 1]
            delay_s, yielded = self.delay_s, self.yielded
        yielded.append(0)
        self.running += 1
        usage.prompt_tokens = _words(messages)
        usage.finish_reason = "stop"
        try:
            for delta in script:
                if not isinstance(delta, str) and (not tools or tool_choice == "none"):
                    continue
                if delay_s:
                    time.sleep(delay_s)
                if cancel.cancelled:
                    usage.finish_reason = "cancelled"
                    return
                usage.completion_tokens += 1
                yielded[-1] += 1
                yield delta
        finally:
            self.running -= 1

    def prefill(self, request: LlmRequest) -> None:
        self.prefills.append((request.session_id, list(request.messages)))
        self.prefill_tools.append(list(request.tools))
        tokens = 0 if request.cancel.cancelled else _words(request.messages)
        request.usage.prompt_tokens = request.usage.prefill_tokens = tokens

    def forget(self, session_id: str) -> None:
        self.forgotten.append(session_id)

    def warmup(self) -> None:
        pass


def _words(messages: Sequence[ChatMessage]) -> int:
    """The fake's token count: one per word."""
    return sum(len(m.content.split()) for m in messages)


class FakeTts:
    """Speaks ``samples_per_clause`` samples of a quiet tone per clause, in ``chunks`` pieces.

    Each piece takes ``delay_s`` to make; a cancel stops it mid-piece, as Piper's
    ``RunOptions.terminate`` does, and nothing more is yielded.
    """

    name = "fake-tts"

    def __init__(
        self,
        sample_rate: int = 16000,
        samples_per_clause: int = 1600,
        chunks: int = 4,
        delay_s: float = 0.0,
    ) -> None:
        self.sample_rate = sample_rate
        self.samples_per_clause = samples_per_clause
        self.chunks = chunks
        self.delay_s = delay_s
        self.clauses: list[str] = []
        self.running = 0

    def synthesize(self, text: str, cancel: CancelToken) -> Iterator[np.ndarray]:
        self.clauses.append(text)
        self.running += 1
        try:
            t = np.arange(self.samples_per_clause) / self.sample_rate
            tone = (3000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
            for piece in np.array_split(tone, self.chunks):
                deadline = time.monotonic() + self.delay_s
                while not cancel.cancelled and time.monotonic() < deadline:
                    time.sleep(0.002)
                if cancel.cancelled:
                    return
                yield piece
        finally:
            self.running -= 1

    def warmup(self) -> None:
        pass


def fake_engines(config: Config) -> Engines:
    """The app's engine factory (``create_app``) on the fakes with their defaults: the STT
    hears "hello there", the LLM answers "Hello there.", and no model loads."""
    return Engines(FakeVad(), FakeStt(), FakeLlm(), FakeTts())
