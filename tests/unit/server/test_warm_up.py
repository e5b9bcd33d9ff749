"""Each engine warms up on the runner thread that will serve its calls.

llama.cpp and CTranslate2 run on OpenMP, which keeps one pool of workers per thread that
ever ran a parallel region. A warm-up on a loader thread left a second pool alive, and
libgomp then throttled the spinning of both (more workers than cores): llama.cpp ran about
35 % slower in the server than alone. The test pins where the warm-up runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.agent import Agent, RunningAgent, tool
from voxpipe.config import Config
from voxpipe.config.engine_registry import ENGINES, register
from voxpipe.engines.base import Engines
from voxpipe.engines.queued import QueuedLlm
from voxpipe.engines.runner import EngineRunner
from voxpipe.server.app import create_app
from voxpipe.server.startup import warm_agent


def test_every_engine_warms_up_on_its_own_runner_thread() -> None:
    warmed: dict[str, str] = {}

    def recording(engine: object, stage: str) -> object:
        def warmup() -> None:
            warmed[stage] = threading.current_thread().name

        engine.warmup = warmup  # type: ignore[attr-defined]
        return engine

    def factory(config: Config) -> Engines:
        return Engines(
            recording(FakeVad(), "vad"),  # type: ignore[arg-type]
            recording(FakeStt("hello"), "stt"),  # type: ignore[arg-type]
            recording(FakeLlm(), "llm"),  # type: ignore[arg-type]
            recording(FakeTts(), "tts"),  # type: ignore[arg-type]
        )

    config = Config.load(server={"turn_log_path": None}, store={"path": None})
    with TestClient(create_app(config, factory)) as client:
        deadline = time.monotonic() + 10
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, client.get("/readyz").json()
            time.sleep(0.02)
    assert warmed == {stage: f"engine-{stage}-0" for stage in ("vad", "stt", "llm", "tts")}


@tool
async def opening_hours() -> str:
    """When the restaurant is open."""
    return "noon to ten"


@pytest.fixture
def cached_llm() -> Iterator[None]:
    """An LLM engine under a new name that keeps its prompts' KV (its factory is not built)."""
    register(
        "llm", "cached", "voxpipe.engines.llama_factory:FACTORY", "test", keeps_prompt_cache=True
    )
    yield
    ENGINES.unregister("llm", "cached")


@pytest.mark.usefixtures("cached_llm")
@pytest.mark.parametrize(
    ("engine", "warmed"), [("llama", True), ("cached", True), ("openai", False)]
)
async def test_the_agent_s_prompt_is_warmed_where_the_engine_keeps_its_prompts(
    engine: str, warmed: bool
) -> None:
    """Whether the agent's prompt is warmed at startup is the engine's capability, declared
    on its registry line, not its name."""
    llm = FakeLlm()
    runner = EngineRunner("llm")
    agent = await RunningAgent.start(Agent(instructions="You book tables.", tools=[opening_hours]))
    try:
        await warm_agent(Config(llm={"engine": engine}), QueuedLlm(llm, runner), agent)
    finally:
        await agent.aclose()
        runner.close()
    assert [session for session, _ in llm.prefills] == (["__warmup_tools__"] if warmed else [])
    assert llm.forgotten == (["__warmup_tools__"] if warmed else [])
