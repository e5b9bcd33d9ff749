"""What every session of a server shares: engines, their runners, metrics, the turn log."""

from __future__ import annotations

from dataclasses import dataclass

from voxpipe.config import Config
from voxpipe.engines.base import Engines
from voxpipe.engines.runner import EngineRunner
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.turn_log import TurnLog


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
class Services:
    config: Config
    engines: Engines
    runners: Runners
    metrics: Metrics
    turn_log: TurnLog
