"""The four engine interfaces: VAD, STT, LLM, TTS.

Engines are synchronous and CPU-bound; the session never calls them on the
event loop but through an :class:`~voxpipe.engines.runner.EngineRunner`, which
owns the thread budget. Streaming engines yield as they go and watch a
:class:`CancelToken` between steps, so a cancel stops the work itself, not just
the reading of its output.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

STT_SAMPLE_RATE = 16000


class CancelToken:
    """A thread-safe cancel flag that engines poll and can hook into."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._hooks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def on_cancel(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook`` on cancel (at once if already cancelled); returns an unregister."""
        with self._lock:
            if not self._event.is_set():
                self._hooks.append(hook)

                def unregister() -> None:
                    with self._lock:
                        if hook in self._hooks:
                            self._hooks.remove(hook)

                return unregister
        hook()
        return lambda: None


class VadStream(Protocol):
    """Per-call VAD state: feed 16 kHz float32 audio, get one probability per window."""

    def process(self, audio: np.ndarray) -> list[float]: ...


class VadEngine(Protocol):
    name: str
    sample_rate: int
    window_samples: int

    def new_stream(self) -> VadStream: ...

    def warmup(self) -> None: ...


@dataclass(frozen=True)
class Transcription:
    text: str
    language: str
    audio_s: float


class SttEngine(Protocol):
    name: str

    def transcribe(self, audio: np.ndarray) -> Transcription:
        """``audio``: mono float32 at 16 kHz."""
        ...

    def warmup(self) -> None: ...


Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str


@dataclass
class LlmUsage:
    """Filled in by the engine while it streams."""

    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens whose KV state was already in the context
    prefill_tokens: int = 0  # prompt tokens actually evaluated for this request
    completion_tokens: int = 0
    state_restored: bool = False
    finish_reason: str = ""
    extra: dict[str, float] = field(default_factory=dict)


class LlmEngine(Protocol):
    name: str

    def stream(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        usage: LlmUsage,
        trace_headers: Mapping[str, str] | None = None,
    ) -> Iterator[str]:
        """Yield text deltas of the assistant reply; stop early once ``cancel`` is set.
        ``trace_headers`` (W3C ``traceparent``) make a remote request part of the turn's
        trace; an engine in this process ignores them."""
        ...

    def prefill(
        self, session_id: str, messages: Sequence[ChatMessage], cancel: CancelToken
    ) -> LlmUsage:
        """Evaluate ``messages`` ahead of time so the next request only adds its own tokens."""
        ...

    def forget(self, session_id: str) -> None:
        """Drop whatever state is kept for ``session_id``."""
        ...

    def warmup(self) -> None: ...


class TtsEngine(Protocol):
    name: str
    sample_rate: int

    def synthesize(self, text: str, cancel: CancelToken) -> Iterator[np.ndarray]:
        """Yield mono int16 chunks at ``sample_rate``; stop once ``cancel`` is set."""
        ...

    def warmup(self) -> None: ...


@dataclass(frozen=True)
class Engines:
    """The four engines a server runs with."""

    vad: VadEngine
    stt: SttEngine
    llm: LlmEngine
    tts: TtsEngine


class EngineError(RuntimeError):
    """An engine failed in a way the caller should be told about."""
