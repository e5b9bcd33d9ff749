"""Turns that end close together, transcribed in one Whisper batch.

Every caller's final transcript queues its own job on the STT runner, as before; the job
that runs first takes every transcript then waiting (up to ``max_batch``) and runs them as
one encode and one greedy decode (:meth:`WhisperStt.transcribe_batch`), and drops the
others' queued jobs. One utterance alone costs what it always did; with two or four
waiting, the batch costs less than one after another (``python -m bench batch``).
A transcript whose caller gave up before its turn is left out.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from voxpipe.engines.base import JobClock, Transcription
from voxpipe.engines.runner import EngineRunner

DEFAULT_MAX_BATCH = 4


@runtime_checkable
class BatchingStt(Protocol):
    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[Transcription]: ...


@dataclass(eq=False)
class _Waiting:
    audio: np.ndarray
    clock: JobClock
    result: Future[Transcription] = field(default_factory=Future)
    job: Future[None] | None = None
    abandoned: bool = False


class SttBatch:
    def __init__(self, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        self.max_batch = max_batch
        self._waiting: list[_Waiting] = []
        self._lock = threading.Lock()

    async def transcribe(
        self, runner: EngineRunner, engine: BatchingStt, audio: np.ndarray, clock: JobClock
    ) -> Transcription:
        mine = _Waiting(audio, clock)
        with self._lock:
            self._waiting.append(mine)
        run = contextvars.copy_context().run  # the engine's log lines carry this caller's ids
        mine.job = runner.submit(lambda: run(self._run_batch, engine, mine), clock)
        try:
            return await asyncio.wrap_future(mine.result)
        except asyncio.CancelledError:
            mine.abandoned = True
            if mine.job.cancel() or not mine.job.running():
                raise
            await asyncio.gather(asyncio.wrap_future(mine.job), return_exceptions=True)
            raise

    def _run_batch(self, engine: BatchingStt, runner_of: _Waiting) -> None:
        """On the STT thread: everything waiting, as one batch."""
        with self._lock:
            batch = [w for w in self._waiting if not w.abandoned][: self.max_batch]
            taken = set(map(id, batch))
            self._waiting = [w for w in self._waiting if id(w) not in taken and not w.abandoned]
        if not batch:
            return
        for waiting in batch:
            if waiting is not runner_of and waiting.job is not None:
                waiting.job.cancel()  # queued behind us: its work is done here
        started = runner_of.clock.started_ns or time.monotonic_ns()
        try:
            results = engine.transcribe_batch([w.audio for w in batch])
        except BaseException as error:
            for waiting in batch:
                waiting.result.set_exception(error)
            raise
        finished = time.monotonic_ns()
        for waiting, result in zip(batch, results, strict=True):
            # Before the result: its caller reads its clock at once, before the runner's own
            # bookkeeping after this job would have set it.
            waiting.clock.started_ns, waiting.clock.finished_ns = started, finished
            waiting.result.set_result(result)
