"""EngineRunner: one thread per engine, a bounded queue, streams that stop with their reader."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from voxpipe.engines.base import JobClock
from voxpipe.engines.runner import EngineBusy, EngineRunner


class Recorder:
    """A JobObserver that keeps what it was told."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, float, float]] = []
        self.depths: list[tuple[str, int]] = []

    def observe_job(self, engine: str, queue_s: float, compute_s: float) -> None:
        self.jobs.append((engine, queue_s, compute_s))

    def set_queue_depth(self, engine: str, depth: int) -> None:
        self.depths.append((engine, depth))


@pytest.fixture
async def runner() -> AsyncIterator[EngineRunner]:
    r = EngineRunner("test", max_queue=2)
    yield r
    r.close()


async def wait_for(flag: threading.Event) -> None:
    assert await asyncio.to_thread(flag.wait, 2), "the job never started"


async def test_call_returns_the_result_from_the_engine_thread(runner: EngineRunner) -> None:
    assert await runner.call(lambda: threading.current_thread().name) != (
        threading.current_thread().name
    )
    assert await runner.call(lambda: 6 * 7) == 42


async def test_call_raises_the_job_error(runner: EngineRunner) -> None:
    def boom() -> None:
        raise ValueError("engine failed")

    with pytest.raises(ValueError, match="engine failed"):
        await runner.call(boom)
    assert runner.queue_depth == 0


async def test_queue_wait_is_measured_apart_from_compute(runner: EngineRunner) -> None:
    first_started, release = threading.Event(), threading.Event()

    def slow() -> str:
        first_started.set()
        release.wait(2)
        return "first"

    first_clock, second_clock = JobClock(), JobClock()
    first = asyncio.create_task(runner.call(slow, first_clock))
    await wait_for(first_started)
    second = asyncio.create_task(runner.call(lambda: "second", second_clock))
    await asyncio.sleep(0.15)  # the second job waits all this time behind the first
    assert runner.queue_depth == 1
    release.set()
    assert await asyncio.gather(first, second) == ["first", "second"]

    assert first_clock.queue_s < 0.05 and first_clock.compute_s >= 0.15
    assert second_clock.queue_s >= 0.15 and second_clock.compute_s < 0.05
    assert first_clock.started_ns <= first_clock.finished_ns <= second_clock.started_ns
    assert runner.queue_depth == 0


async def test_engine_busy_once_max_queue_jobs_are_waiting(runner: EngineRunner) -> None:
    started, release = threading.Event(), threading.Event()

    def block() -> None:
        started.set()
        release.wait(2)

    running = asyncio.create_task(runner.call(block))
    await wait_for(started)  # running jobs do not count; waiting ones do
    waiting = [asyncio.create_task(runner.call(lambda: None)) for _ in range(2)]
    await asyncio.sleep(0)
    assert runner.queue_depth == 2
    with pytest.raises(EngineBusy, match="test queue is full"):
        await runner.call(lambda: None)

    async def read_all() -> list[int]:
        return [x async for x in runner.stream(lambda: iter([1]))]

    with pytest.raises(EngineBusy):
        await read_all()
    release.set()
    await asyncio.gather(running, *waiting)
    assert runner.queue_depth == 0
    assert await runner.call(lambda: "again") == "again"


async def test_stream_yields_items_in_order(runner: EngineRunner) -> None:
    clock = JobClock()
    items = [x async for x in runner.stream(lambda: iter(range(200)), clock, max_buffered=4)]
    assert items == list(range(200))
    assert clock.queued_ns <= clock.started_ns <= clock.first_item_ns <= clock.finished_ns


async def test_stream_propagates_the_producer_error(runner: EngineRunner) -> None:
    def produce() -> Iterator[int]:
        yield 1
        yield 2
        raise RuntimeError("tts crashed")

    seen = []
    with pytest.raises(RuntimeError, match="tts crashed"):
        async for x in runner.stream(produce):
            seen.append(x)
    assert seen == [1, 2]
    assert await runner.call(lambda: "still works") == "still works"


class Counting:
    """An endless producer that counts what it made and notices being closed."""

    def __init__(self) -> None:
        self.produced = 0
        self.closed = threading.Event()

    def __call__(self) -> Iterator[int]:
        try:
            while True:
                self.produced += 1
                yield self.produced
        finally:
            self.closed.set()


async def test_breaking_out_of_a_stream_stops_the_producer(runner: EngineRunner) -> None:
    producer = Counting()
    seen = []
    stream = runner.stream(producer, max_buffered=2)
    async with contextlib.aclosing(stream):
        async for x in stream:
            seen.append(x)
            if len(seen) == 3:
                break
    # aclose returned only after the thread let go of the producer.
    assert producer.closed.is_set()
    assert seen == [1, 2, 3]
    # 3 read, at most 2 buffered, 1 blocked in the hand-over, 1 more before it noticed.
    produced = producer.produced
    assert produced <= 3 + 2 + 2
    await asyncio.sleep(0.1)
    assert producer.produced == produced

    clock = JobClock()
    assert await runner.call(lambda: "next", clock) == "next"
    assert clock.queue_s < 0.05  # nothing left running on the engine's thread
    assert runner.queue_depth == 0


async def test_cancelling_the_reader_stops_the_producer(runner: EngineRunner) -> None:
    producer = Counting()
    got_one = asyncio.Event()

    async def read() -> None:
        stream = runner.stream(producer, max_buffered=1)
        async with contextlib.aclosing(stream):
            async for _ in stream:
                got_one.set()
                await asyncio.sleep(10)

    task = asyncio.create_task(read())
    await asyncio.wait_for(got_one.wait(), 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert producer.closed.is_set()
    produced = producer.produced
    await asyncio.sleep(0.1)
    assert producer.produced == produced <= 4


async def test_cancelling_a_reader_waiting_for_an_item_stops_the_producer(
    runner: EngineRunner,
) -> None:
    started, closed = threading.Event(), threading.Event()

    def stuck() -> Iterator[int]:
        try:
            yield 1
            started.set()
            while True:  # a long step with no item, polling nothing
                time.sleep(0.01)
                yield 2
        finally:
            closed.set()

    async def read() -> list[int]:
        return [x async for x in runner.stream(stuck, max_buffered=1)]

    task = asyncio.create_task(read())
    await wait_for(started)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed.is_set()  # the generator waited for the thread before re-raising


async def test_a_producer_that_ignores_the_reader_is_stopped_at_its_next_item(
    runner: EngineRunner,
) -> None:
    def slow() -> Iterator[int]:
        for i in range(100):
            time.sleep(0.01)
            yield i

    stream = runner.stream(slow)
    async with contextlib.aclosing(stream):
        async for x in stream:
            if x == 2:
                break
    clock = JobClock()
    await runner.call(lambda: None, clock)
    assert clock.queue_s < 0.05


async def test_observer_receives_depths_and_timings() -> None:
    observer = Recorder()
    runner = EngineRunner("stt", observer=observer)
    try:
        await runner.call(lambda: time.sleep(0.02))
        assert [x async for x in runner.stream(lambda: iter("ab"))] == ["a", "b"]
    finally:
        runner.close()
    assert observer.depths == [("stt", 1), ("stt", 0), ("stt", 1), ("stt", 0)]
    assert [engine for engine, _, _ in observer.jobs] == ["stt", "stt"]
    (_, queue_s, compute_s), _ = observer.jobs
    assert 0 <= queue_s < 0.05 and compute_s >= 0.02


def test_job_clock_before_and_after() -> None:
    clock = JobClock()
    assert clock.queue_s == 0 and clock.compute_s == 0
    clock = JobClock(queued_ns=1_000, started_ns=3_000_001_000, finished_ns=4_000_001_000)
    assert clock.queue_s == 3.0 and clock.compute_s == 1.0


# -- known bugs ----------------------------------------------------------------


async def test_cancelling_a_queued_call_frees_its_place() -> None:
    runner = EngineRunner("stt", max_queue=1)
    try:
        started, release = threading.Event(), threading.Event()

        def block() -> None:
            started.set()
            release.wait(2)

        running = asyncio.create_task(runner.call(block))
        await wait_for(started)
        queued = asyncio.create_task(runner.call(lambda: "never"))
        await asyncio.sleep(0.01)
        queued.cancel()  # e.g. the caller hung up while waiting for the engine
        with pytest.raises(asyncio.CancelledError):
            await queued
        release.set()
        await running
        await asyncio.sleep(0.01)
        assert runner.queue_depth == 0
        assert await runner.call(lambda: "idle runner") == "idle runner"  # not EngineBusy
    finally:
        release.set()
        runner.close()


async def test_a_stream_whose_reader_left_while_queued_does_no_work(
    runner: EngineRunner,
) -> None:
    started, release = threading.Event(), threading.Event()

    def block() -> None:
        started.set()
        release.wait(2)

    running = asyncio.create_task(runner.call(block))
    await wait_for(started)
    producer = Counting()

    async def read() -> None:
        async for _ in runner.stream(producer):
            pass

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.01)
    reader.cancel()
    await asyncio.sleep(0.01)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await reader
    await running
    assert producer.produced == 0


async def test_waiting_jobs_run_earliest_deadline_first() -> None:
    runner = EngineRunner("tts", max_queue=8)
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def block() -> None:
        started.set()
        release.wait(2)

    try:
        running = asyncio.create_task(runner.call(block))
        await wait_for(started)
        now = time.monotonic_ns()
        # A later clause of a call with seconds of audio buffered, queued first ...
        later = asyncio.create_task(
            runner.call(lambda: order.append("later clause"), deadline_ns=now + 3_000_000_000)
        )
        plain = asyncio.create_task(runner.call(lambda: order.append("no deadline")))
        await asyncio.sleep(0.01)
        # ... then the first clause of another call, due now.
        first = asyncio.create_task(
            runner.call(lambda: order.append("first clause"), deadline_ns=now)
        )
        await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(running, later, plain, first)
        assert order == ["first clause", "no deadline", "later clause"]
    finally:
        runner.close()


async def test_a_cancelled_waiting_job_never_runs_and_leaves_the_queue() -> None:
    runner = EngineRunner("stt", max_queue=4)
    started, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def block() -> None:
        started.set()
        release.wait(2)

    try:
        running = asyncio.create_task(runner.call(block))
        await wait_for(started)
        waiting = asyncio.create_task(runner.call(lambda: ran.append(1)))
        await asyncio.sleep(0.01)
        assert runner.queue_depth == 1
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        assert runner.queue_depth == 0
        release.set()
        await running
        assert await runner.call(lambda: "next") == "next"
        assert ran == []
    finally:
        runner.close()


async def test_a_runner_with_two_workers_runs_two_jobs_at_once() -> None:
    """A remote engine's runner: each thread only waits on a server, so jobs overlap."""
    r = EngineRunner("remote", max_queue=4, workers=2)
    both = threading.Barrier(2, timeout=5)  # passes only when two jobs run together
    try:
        names = await asyncio.gather(
            *(r.call(lambda: (both.wait(), threading.current_thread().name)[1]) for _ in "ab")
        )
    finally:
        r.close()
    assert len(set(names)) == 2
