"""Each engine reached through its runner: the only way the rest of the server calls one.

An engine is synchronous and must run on its runner's thread (:mod:`voxpipe.engines.runner`:
one bounded, deadline-ordered queue per engine, queue wait measured apart from compute).
These wrappers pair the two once, so a caller writes ``await stt.transcribe(audio, clock)``
and cannot run a model on the event loop or on a thread of its own (which would bring a
second OpenMP pool into the process: docs/architecture.md, "The thread budget").
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

import numpy as np

from voxpipe.engines.base import (
    BatchingLlm,
    CancelToken,
    ChatMessage,
    Engines,
    JobClock,
    LlmEngine,
    LlmOutput,
    LlmRequest,
    LlmUsage,
    SttEngine,
    ToolSpec,
    Transcription,
    TtsEngine,
    TurnJudgingLlm,
    TurnModel,
    Urgency,
    VadEngine,
    VadStream,
    WarmingLlm,
)
from voxpipe.engines.runner import EngineRunner
from voxpipe.engines.stt_batch import BatchingStt, SttBatch

E = TypeVar("E")
T = TypeVar("T")


@dataclass(frozen=True)
class Runners:
    """One runner per engine: the server's whole thread budget."""

    vad: EngineRunner
    stt: EngineRunner
    llm: EngineRunner
    tts: EngineRunner

    def close(self) -> None:
        for runner in (self.vad, self.stt, self.llm, self.tts):
            runner.close()


@dataclass(frozen=True)
class Queued(Generic[E]):
    """An engine and the runner whose thread alone runs it."""

    engine: E
    runner: EngineRunner

    @property
    def idle(self) -> bool:
        """No job waiting or running: optional work may start without delaying any."""
        return self.runner.idle

    async def run(
        self, job: Callable[[E], T], clock: JobClock | None = None, deadline_ns: int | None = None
    ) -> T:
        """``job(engine)`` on the engine's thread: what has no method here (a warm-up)."""
        engine = self.engine
        return await self.runner.call(lambda: job(engine), clock, deadline_ns)


class QueuedTurnModel(Queued[TurnModel]):
    """The turn model on the VAD's runner: it judges end-of-speech candidates between VAD
    windows, so it needs no thread of its own (one onnxruntime thread, like the VAD)."""

    async def probability_complete(self, audio: np.ndarray, clock: JobClock | None = None) -> float:
        engine = self.engine
        return await self.runner.call(lambda: engine.probability_complete(audio), clock)


class QueuedVad(Queued[VadEngine]):
    @property
    def window_samples(self) -> int:
        return self.engine.window_samples

    def new_stream(self) -> VadStream:
        """A call's own VAD state, for :meth:`process` (making one runs no model)."""
        return self.engine.new_stream()

    async def process(
        self, stream: VadStream, windows: np.ndarray, clock: JobClock | None = None
    ) -> list[float]:
        """One speech probability per window of ``windows`` (16 kHz float32)."""
        return await self.runner.call(lambda: stream.process(windows), clock)


@dataclass(frozen=True)
class QueuedStt(Queued[SttEngine]):
    batch: SttBatch = field(default_factory=SttBatch, compare=False)

    async def transcribe(self, audio: np.ndarray, clock: JobClock | None = None) -> Transcription:
        """``audio``: mono float32 at 16 kHz. The job runs in the caller's context, so
        what the engine logs carries the caller's call and turn ids (not done for the VAD,
        whose jobs come with every frame and which logs nothing). An engine that takes a
        batch gets the transcripts waiting together (:mod:`voxpipe.engines.stt_batch`)."""
        engine, clock = self.engine, clock or JobClock()
        if isinstance(engine, BatchingStt):
            return await self.batch.transcribe(self.runner, engine, audio, clock)
        run = contextvars.copy_context().run
        return await self.runner.call(lambda: run(engine.transcribe, audio), clock)


class QueuedLlm(Queued[LlmEngine]):
    def stream(
        self,
        request: LlmRequest,
        clock: JobClock | None = None,
        gate: threading.Event | None = None,
    ) -> AsyncGenerator[LlmOutput, None]:
        """The reply's text deltas (and, with tools, its tool calls; without, ``str`` items
        only) as the LLM makes them. ``clock`` and ``gate`` are the queue's, not the
        request's: while ``gate`` is clear the thread holds before its next token
        (:meth:`EngineRunner.stream`).

        This is the one place that knows whether the engine batches. A batching engine
        (:class:`BatchingLlm`, the embedded model) gets the request's :class:`Urgency`, and
        its queue wait ends when the request joins a step, not when a runner thread takes
        it (those threads only wait on the batch). A remote server batches on its own: its
        requests simply run at once, one runner thread each, and carry no urgency.
        """
        engine, clock = self.engine, clock or JobClock()
        urgency = None
        if isinstance(engine, BatchingLlm):
            urgency = request.urgency or Urgency()
            if gate is not None and urgency.gate is None:
                urgency.gate = gate
        request = replace(request, urgency=urgency)

        def produce() -> Iterator[LlmOutput]:
            for item in engine.generate(request):
                if urgency is not None and urgency.joined_ns > clock.started_ns:
                    clock.started_ns = urgency.joined_ns
                yield item

        return self.runner.stream(produce, clock, gate=gate)

    async def prefill(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        clock: JobClock | None = None,
        *,
        tools: Sequence[ToolSpec] | None = None,
    ) -> LlmUsage:
        """:meth:`LlmEngine.prefill`: what it cost (nothing is generated)."""
        engine, usage = self.engine, LlmUsage()
        request = LlmRequest(session_id, messages, cancel, usage, tuple(tools or ()))
        await self.runner.call(lambda: engine.prefill(request), clock)
        return usage

    async def warm(
        self,
        session_id: str,
        messages: Sequence[ChatMessage],
        cancel: CancelToken,
        tools: Sequence[ToolSpec] | None = None,
    ) -> bool:
        """:meth:`WarmingLlm.warm`: the caller's words so far into the call's KV, in the
        background. Not for an engine that keeps no per-call state, nor while every runner
        thread is taken: warming is never worth a wait."""
        engine = self.engine
        if not isinstance(engine, WarmingLlm) or not self.runner.has_free_worker:
            return False
        return await self.runner.call(
            lambda: engine.warm(session_id, messages, cancel, tuple(tools or ()))
        )

    async def turn_ends(
        self, session_id: str, messages: Sequence[ChatMessage], clock: JobClock | None = None
    ) -> float | None:
        """:meth:`TurnJudgingLlm.turn_ends`, or None from an engine that cannot judge, or
        while every runner thread is taken (each holds a reply's stream): a judgement that
        would wait its turn is not worth the turn's end waiting for it."""
        engine = self.engine
        if not isinstance(engine, TurnJudgingLlm) or not self.runner.has_free_worker:
            return None
        cancel = CancelToken()
        return await self.runner.call(lambda: engine.turn_ends(session_id, messages, cancel), clock)

    def forget(self, session_id: str) -> None:
        """Drop the state kept for ``session_id`` (no model runs: not queued)."""
        self.engine.forget(session_id)


class QueuedTts(Queued[TtsEngine]):
    @property
    def sample_rate(self) -> int:
        return self.engine.sample_rate

    def synthesize(
        self,
        text: str,
        cancel: CancelToken,
        clock: JobClock | None = None,
        deadline_ns: int | None = None,
    ) -> AsyncGenerator[np.ndarray, None]:
        """Mono int16 chunks of ``text`` at :attr:`sample_rate`, as the TTS thread makes
        them; the job waits its turn by ``deadline_ns`` (default: now)."""
        engine = self.engine
        return self.runner.stream(
            lambda: engine.synthesize(text, cancel), clock, deadline_ns=deadline_ns
        )


@dataclass(frozen=True)
class QueuedEngines:
    """The four engines, each behind its runner."""

    vad: QueuedVad
    stt: QueuedStt
    llm: QueuedLlm
    tts: QueuedTts
    turn: QueuedTurnModel | None = None

    @classmethod
    def of(cls, engines: Engines, runners: Runners) -> QueuedEngines:
        return cls(
            QueuedVad(engines.vad, runners.vad),
            QueuedStt(engines.stt, runners.stt),
            QueuedLlm(engines.llm, runners.llm),
            QueuedTts(engines.tts, runners.tts),
            QueuedTurnModel(engines.turn, runners.vad) if engines.turn is not None else None,
        )

    def all(self) -> tuple[Queued[Any], ...]:
        """In the order the server warms them."""
        turn = (self.turn,) if self.turn is not None else ()
        return (self.vad, *turn, self.stt, self.llm, self.tts)
