"""The engines behind their runners: every call runs on the engine's own runner thread,
and its queue wait and compute are measured as the runner measures any job."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.engines.base import (
    CancelToken,
    ChatMessage,
    Engines,
    JobClock,
    LlmOutput,
    LlmRequest,
    LlmUsage,
    ToolCallDelta,
    ToolCallRequest,
    ToolSpec,
    Urgency,
)
from voxpipe.engines.queued import QueuedEngines, Runners
from voxpipe.engines.runner import EngineRunner


class Jobs:
    """A JobObserver that keeps the engine of each job."""

    def __init__(self) -> None:
        self.engines: list[str] = []

    def observe_job(self, engine: str, queue_s: float, compute_s: float) -> None:
        self.engines.append(engine)

    def set_queue_depth(self, engine: str, depth: int) -> None:
        pass


@pytest.fixture
async def queued() -> AsyncIterator[tuple[QueuedEngines, Jobs]]:
    jobs = Jobs()
    runners = Runners(*(EngineRunner(name, observer=jobs) for name in ("vad", "stt", "llm", "tts")))
    yield QueuedEngines.of(Engines(FakeVad(), FakeStt("hi"), FakeLlm(), FakeTts()), runners), jobs
    runners.close()


async def test_each_call_runs_on_its_engines_runner_and_is_measured(
    queued: tuple[QueuedEngines, Jobs],
) -> None:
    engines, jobs = queued
    clock = JobClock()
    assert (await engines.stt.transcribe(np.zeros(1600, np.float32), clock)).text == "hi"
    assert clock.started_ns and clock.finished_ns >= clock.started_ns

    stream = engines.vad.new_stream()
    probs = await engines.vad.process(stream, np.full(1024, 0.5, np.float32))
    assert probs == [1.0, 1.0]

    usage = LlmUsage()
    deltas = engines.llm.stream(LlmRequest("s", [ChatMessage("user", "hi")], CancelToken(), usage))
    async with contextlib.aclosing(deltas):
        assert [d async for d in deltas] == ["Hello", " there", "."]
    assert usage.completion_tokens == 3

    chunks = engines.tts.synthesize("Hello.", CancelToken(), clock := JobClock())
    async with contextlib.aclosing(chunks):
        assert sum(len(c) for c in [c async for c in chunks]) == 1600
    assert clock.first_item_ns >= clock.started_ns > 0

    warm = await engines.llm.prefill("s", [ChatMessage("user", "two words")], CancelToken())
    assert warm.prefill_tokens == 2
    assert jobs.engines == ["stt", "vad", "llm", "tts", "llm"]


async def test_run_takes_the_engine_to_its_thread(queued: tuple[QueuedEngines, Jobs]) -> None:
    engines, jobs = queued
    for engine in engines.all():
        name = await engine.run(lambda _: threading.current_thread().name)
        assert name == f"engine-{engine.runner.name}-0"
    assert jobs.engines == ["vad", "stt", "llm", "tts"]


async def test_idle_and_forget_do_not_queue(queued: tuple[QueuedEngines, Jobs]) -> None:
    engines, jobs = queued
    assert engines.stt.idle
    engines.llm.forget("s")
    assert isinstance(engines.llm.engine, FakeLlm) and engines.llm.engine.forgotten == ["s"]
    assert engines.tts.sample_rate == 16000 and engines.vad.window_samples == 512
    assert jobs.engines == []


async def test_tools_pass_through_to_the_engine_and_calls_come_back(
    queued: tuple[QueuedEngines, Jobs],
) -> None:
    engines, _ = queued
    call = ToolCallRequest("call_1", "opening_hours", {}, "{}")
    assert isinstance(engines.llm.engine, FakeLlm)
    engines.llm.engine.replies = [[ToolCallDelta("call_1", "opening_hours", "{}"), call]]
    tools = [ToolSpec("opening_hours", "When the restaurant is open.")]
    items = engines.llm.stream(LlmRequest("s", [ChatMessage("user", "open?")], CancelToken(),
                                          LlmUsage(), tuple(tools)))  # fmt: skip
    async with contextlib.aclosing(items):
        assert [i async for i in items][-1] == call
    plain = engines.llm.stream(LlmRequest("s", [ChatMessage("user", "hi")], CancelToken(),
                                          LlmUsage()))  # fmt: skip
    async with contextlib.aclosing(plain):
        assert [d async for d in plain] == []  # no tools offered: no call made
    assert engines.llm.engine.tools == [tools, []]


class BatchingFake(FakeLlm):
    """A batching LLM: it takes each request's Urgency and says when it joined a step."""

    max_sequences = 4

    def __init__(self) -> None:
        super().__init__()
        self.urgencies: list[Any] = []

    def observe_steps(self, observer: Any) -> None:
        pass

    def share_cores(self, others_busy: Any) -> None:
        pass

    def generate(self, request: LlmRequest) -> Iterator[LlmOutput]:
        urgency = request.urgency
        assert urgency is not None
        self.urgencies.append(urgency)
        time.sleep(0.05)  # waiting for the batch
        urgency.joined_ns = time.monotonic_ns()
        return super().generate(request)


async def test_a_batching_llm_gets_the_urgency_and_its_wait_ends_when_it_joins() -> None:
    llm = BatchingFake()
    runner = EngineRunner("llm", workers=llm.max_sequences)
    queued = QueuedEngines.of(Engines(FakeVad(), FakeStt("hi"), llm, FakeTts()),
                              Runners(EngineRunner("vad"), EngineRunner("stt"), runner,
                                      EngineRunner("tts")))  # fmt: skip
    gate, clock = threading.Event(), JobClock()
    gate.set()
    try:
        request = LlmRequest("s", [ChatMessage("user", "hi")], CancelToken(), LlmUsage(),
                             urgency=Urgency(held=True))  # fmt: skip
        deltas = queued.llm.stream(request, clock, gate)
        async with contextlib.aclosing(deltas):
            assert [d async for d in deltas] == ["Hello", " there", "."]
    finally:
        for r in (queued.vad.runner, queued.stt.runner, runner, queued.tts.runner):
            r.close()
    [urgency] = llm.urgencies
    assert urgency.held and urgency.gate is gate  # the reply's gate rides on its urgency
    assert clock.started_ns == urgency.joined_ns  # queue wait: until it joined a step
    assert clock.queue_s >= 0.05


async def test_a_plain_llm_gets_no_urgency(queued: tuple[QueuedEngines, Jobs]) -> None:
    engines, _ = queued
    deltas = engines.llm.stream(LlmRequest("s", [ChatMessage("user", "hi")], CancelToken(),
                                           LlmUsage(), urgency=Urgency()))  # fmt: skip
    async with contextlib.aclosing(deltas):
        assert [d async for d in deltas] == ["Hello", " there", "."]
