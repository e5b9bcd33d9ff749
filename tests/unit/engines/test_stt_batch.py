"""Transcripts waiting together go to the STT as one batch; the others' jobs are dropped."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence

import numpy as np

from voxpipe.engines.base import JobClock, Transcription
from voxpipe.engines.runner import EngineRunner
from voxpipe.engines.stt_batch import SttBatch


class BatchRecorder:
    def __init__(self) -> None:
        self.batches: list[int] = []
        self.release = threading.Event()

    def transcribe_batch(self, audios: Sequence[np.ndarray]) -> list[Transcription]:
        self.release.wait(5)
        self.batches.append(len(audios))
        return [Transcription(f"clip {int(a[0])}", "en", len(a) / 16000) for a in audios]


async def test_transcripts_waiting_together_share_one_batch() -> None:
    runner, engine, batch = EngineRunner("stt"), BatchRecorder(), SttBatch(max_batch=4)
    try:
        clocks = [JobClock() for _ in range(4)]
        first = asyncio.create_task(
            batch.transcribe(runner, engine, np.full(160, 0.0, np.float32), clocks[0])
        )
        await asyncio.sleep(0.05)  # the first runs alone (the engine holds it)
        rest = [
            asyncio.create_task(
                batch.transcribe(runner, engine, np.full(160, float(i), np.float32), clocks[i])
            )
            for i in (1, 2, 3)
        ]
        await asyncio.sleep(0.05)
        engine.release.set()
        results = await asyncio.gather(first, *rest)
    finally:
        runner.close()
    assert [r.text for r in results] == ["clip 0", "clip 1", "clip 2", "clip 3"]
    assert engine.batches == [1, 3]  # the three that waited went in one batch
    assert runner.queue_depth == 0  # the jobs whose work was done in the batch left the queue
    assert all(c.finished_ns >= c.started_ns > 0 for c in clocks)


async def test_a_caller_that_gave_up_is_left_out() -> None:
    runner, engine, batch = EngineRunner("stt"), BatchRecorder(), SttBatch()
    try:
        first = asyncio.create_task(
            batch.transcribe(runner, engine, np.zeros(160, np.float32), JobClock())
        )
        await asyncio.sleep(0.05)
        gone = asyncio.create_task(
            batch.transcribe(runner, engine, np.ones(160, np.float32), JobClock())
        )
        kept = asyncio.create_task(
            batch.transcribe(runner, engine, np.full(160, 2.0, np.float32), JobClock())
        )
        await asyncio.sleep(0.05)
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone  # its caller has left before the STT frees up
        engine.release.set()
        assert (await first).text == "clip 0"
        assert (await kept).text == "clip 2"
    finally:
        runner.close()
    assert engine.batches == [1, 1]
