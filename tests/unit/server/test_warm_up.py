"""Each engine warms up on the runner thread that will serve its calls.

llama.cpp and CTranslate2 run on OpenMP, which keeps one pool of workers per thread that
ever ran a parallel region. A warm-up on a loader thread left a second pool alive, and
libgomp then throttled the spinning of both (more workers than cores): llama.cpp ran about
35 % slower in the server than alone. The test pins where the warm-up runs.
"""

from __future__ import annotations

import threading
import time

from starlette.testclient import TestClient

from tests.unit.fakes import FakeLlm, FakeStt, FakeTts, FakeVad
from voxpipe.config import Config
from voxpipe.engines.base import Engines
from voxpipe.server.app import create_app


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
