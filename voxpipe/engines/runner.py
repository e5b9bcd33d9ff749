"""Run engine work off the event loop, one worker thread per engine.

Why one thread per engine: each engine already uses its own intra-op threads
(the budget in the config), so a second concurrent job on the same engine
would only oversubscribe the two cores and make both jobs slower. Jobs wait
in a bounded queue ordered by deadline (earliest first): the first clause of
a turn, whose caller hears nothing yet, goes before a later clause of a call
whose client still has seconds of audio buffered. (An engine whose compute runs on
another machine, the remote LLM, gets ``workers`` threads instead: each only waits on
a stream, and the server batches them.) The wait is measured apart
from the compute, and a job that finds the queue full is rejected at once
(:class:`EngineBusy`) rather than joining an unbounded line.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar, cast

from voxpipe.engines.base import JobClock, JobObserver

T = TypeVar("T")


class EngineBusy(RuntimeError):
    """The engine's queue is full; the caller should degrade or refuse."""


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


class _Feed:
    """The engine thread's side of one :meth:`EngineRunner.stream`: it pulls the items and
    hands each to the reader's bounded queue, waits while the gate is clear, and stops at
    the next item once the reader has left (``stop``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[object],
        gate: threading.Event | None,
        max_hold_s: float,
    ) -> None:
        self.loop = loop
        self.queue = queue
        self.gate = gate
        self.max_hold_s = max_hold_s
        self.stop = threading.Event()  # set by the reader when it leaves

    def push(self, item: object) -> bool:
        """Hand ``item`` to the reader, waiting while its queue is full; False if the
        reader left meanwhile."""
        fut = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
        while True:
            try:
                fut.result(timeout=0.05)
                return True
            except TimeoutError:
                if self.stop.is_set():
                    fut.cancel()
                    return False

    def hold(self) -> None:
        """Wait while the gate is clear, in short slices that also watch ``stop``."""
        deadline = time.monotonic() + self.max_hold_s
        gate = self.gate
        while gate is not None and not gate.is_set() and not self.stop.is_set():
            if time.monotonic() >= deadline:
                return
            gate.wait(0.01)

    def pull(self, produce: Callable[[], Iterator[object]], clock: JobClock) -> object:
        """Iterate ``produce()`` into the queue until it ends or the reader leaves; what to
        hand over last: the end, or the failure the reader raises."""
        try:
            items = iter(produce())
            while True:
                self.hold()
                if self.stop.is_set():
                    break
                item = next(items, _DONE)
                if item is _DONE:
                    break
                if clock.first_item_ns == 0:
                    clock.first_item_ns = time.monotonic_ns()
                if self.stop.is_set() or not self.push(item):
                    break
        except BaseException as error:  # handed to the reader
            return _Failure(error)
        return _DONE


@dataclass(order=True)
class _Queued:
    deadline_ns: int
    order: int
    run: Callable[[], object] = field(compare=False)
    future: Future[object] = field(compare=False)


class EngineRunner:
    def __init__(
        self,
        name: str,
        max_queue: int = 16,
        observer: JobObserver | None = None,
        workers: int = 1,
    ) -> None:
        self.name = name
        self.max_queue = max_queue
        self._observer = observer
        self._pending = 0
        self._running = 0
        self._lock = threading.Lock()
        self._heap: list[_Queued] = []
        self._order = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        # More than one only for an engine whose work runs elsewhere (a remote LLM server).
        self._threads = [
            threading.Thread(target=self._work, name=f"engine-{name}-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self._heap and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                job = heapq.heappop(self._heap)
            if not job.future.set_running_or_notify_cancel():
                continue  # cancelled while queued; its done-callback left the queue
            try:
                job.future.set_result(job.run())
            except BaseException as error:
                job.future.set_exception(error)

    @property
    def queue_depth(self) -> int:
        return self._pending

    @property
    def idle(self) -> bool:
        """No job waiting and none running: optional work may start without delaying any."""
        return self._pending == 0 and self._running == 0

    @property
    def has_free_worker(self) -> bool:
        """A job submitted now would start at once (none queued, a thread free)."""
        with self._lock:
            return not self._heap and self._running < len(self._threads)

    @property
    def computing(self) -> bool:
        """A job is running now: its engine's threads hold cores."""
        return self._running > 0

    def _admit(self) -> None:
        with self._lock:
            if self._pending >= self.max_queue:
                raise EngineBusy(f"{self.name} queue is full ({self.max_queue} jobs waiting)")
            self._pending += 1
            depth = self._pending
        self._report_depth(depth)

    def _leave_queue(self) -> None:
        with self._lock:
            self._pending -= 1
            depth = self._pending
        self._report_depth(depth)

    def _report_depth(self, depth: int) -> None:
        if self._observer:
            self._observer.set_queue_depth(self.name, depth)

    def _start(self, clock: JobClock) -> None:
        clock.started_ns = time.monotonic_ns()
        with self._lock:
            self._running += 1
        self._leave_queue()

    def _finish(self, clock: JobClock) -> None:
        clock.finished_ns = time.monotonic_ns()
        with self._lock:
            self._running -= 1
        if self._observer:
            self._observer.observe_job(self.name, clock.queue_s, clock.compute_s)

    def _enqueue(
        self, job: Callable[[], T], clock: JobClock, deadline_ns: int | None = None
    ) -> Future[T]:
        """Admit ``job`` (or raise :class:`EngineBusy`) and queue it for the engine's thread,
        by ``deadline_ns`` (default: now, so equal jobs run in arrival order)."""
        if self._closed:
            raise EngineBusy(f"{self.name} runner is closed")
        self._admit()
        clock.queued_ns = time.monotonic_ns()
        future: Future[T] = Future()
        future.add_done_callback(lambda f: self._leave_queue() if f.cancelled() else None)
        queued = _Queued(
            deadline_ns if deadline_ns is not None else clock.queued_ns,
            next(self._order),
            job,
            cast("Future[object]", future),
        )
        with self._wake:
            heapq.heappush(self._heap, queued)
            self._wake.notify()
        return future

    @staticmethod
    async def _wait(future: Future[T]) -> T:
        """Await a job; if the caller gives up, a queued job is dropped and a started one
        is waited for, so no work outlives its caller."""
        wrapped = asyncio.wrap_future(future)
        try:
            return await asyncio.shield(wrapped)
        except asyncio.CancelledError:
            if not future.cancel():  # already running: let it finish before we go
                await asyncio.gather(wrapped, return_exceptions=True)
            raise

    def submit(
        self, fn: Callable[[], T], clock: JobClock | None = None, deadline_ns: int | None = None
    ) -> Future[T]:
        """Queue ``fn`` for the engine's thread; the future is its result. Cancelling it
        while queued drops the job (:meth:`call` awaits it for you)."""
        clock = clock or JobClock()

        def job() -> T:
            self._start(clock)
            try:
                return fn()
            finally:
                self._finish(clock)

        return self._enqueue(job, clock, deadline_ns)

    async def call(
        self, fn: Callable[[], T], clock: JobClock | None = None, deadline_ns: int | None = None
    ) -> T:
        """Run ``fn`` on the engine's thread and return its result."""
        return await self._wait(self.submit(fn, clock, deadline_ns))

    async def stream(
        self,
        produce: Callable[[], Iterator[T]],
        clock: JobClock | None = None,
        max_buffered: int = 64,
        gate: threading.Event | None = None,
        max_hold_s: float = 1.0,
        deadline_ns: int | None = None,
    ) -> AsyncGenerator[T, None]:
        """Iterate ``produce()`` on the engine's thread, yielding its items here.

        At most ``max_buffered`` items wait between the thread and the reader;
        past that the thread waits. When the reader stops early (break, cancel)
        the thread stops at its next item and this generator waits for it, so
        no work outlives the reader. While ``gate`` is clear the thread does not
        pull the next item (for up to ``max_hold_s`` each time): this is how a
        more urgent job on another engine gets the cores.
        """
        clock = clock or JobClock()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue(max_buffered)
        feed = _Feed(loop, queue, gate, max_hold_s)

        def job() -> None:
            self._start(clock)
            if feed.stop.is_set():  # the reader left while we were queued: do no work
                self._finish(clock)
                return
            try:
                outcome = feed.pull(produce, clock)
            finally:
                self._finish(clock)
            if not feed.stop.is_set():
                feed.push(outcome)

        # The job runs in the reader's context, so what the engine logs carries the reader's
        # call and turn ids (one copy per job, not per item).
        future = self._enqueue(partial(contextvars.copy_context().run, job), clock, deadline_ns)
        future.add_done_callback(
            lambda f: loop.call_soon_threadsafe(queue.put_nowait, _DONE) if f.cancelled() else None
        )
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    break
                if isinstance(item, _Failure):
                    raise item.error
                yield cast(T, item)
        finally:
            feed.stop.set()
            await asyncio.gather(self._wait(future), return_exceptions=True)

    def close(self) -> None:
        """Stop the thread after its current job; queued jobs are cancelled."""
        with self._wake:
            self._closed = True
            queued, self._heap = self._heap, []
            self._wake.notify_all()
        for job in queued:
            job.future.cancel()
