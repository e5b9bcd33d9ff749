"""Everything one server process holds: its configuration, metrics, auth, calls, and,
once the models are warm, the services every call shares.

The app's routes, a call's lifecycle and the WebRTC signalling all read it; it lives
apart from them so that each imports it and none imports another for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from voxpipe.agent import RunningAgent
from voxpipe.config import Config
from voxpipe.conversation.services import CallStore, Filler, Services
from voxpipe.engines.base import BatchingLlm, Engines, ParallelLlm
from voxpipe.engines.factory import factory_for
from voxpipe.engines.queued import Runners
from voxpipe.engines.runner import EngineRunner
from voxpipe.observability.metrics import Metrics
from voxpipe.observability.tracing import Attributes, tracing_for
from voxpipe.observability.turn_log import TurnLog
from voxpipe.server.auth import Authenticator
from voxpipe.server.calls import CallRegistry
from voxpipe.server.token_replay import replay_guard
from voxpipe.server.worker import worker_id


class ServerState:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.metrics = Metrics()
        self.services: Services | None = None
        self.agent: RunningAgent | None = None  # started with the models, closed at shutdown
        self.load_error: str | None = None
        self.on_ready: list[Callable[[], None]] = []
        self.auth = Authenticator(config.auth, replay_guard(config.store))
        self.calls = CallRegistry(config.limits.max_calls, self.metrics)
        self.worker = worker_id(config)
        self.tracing = tracing_for(config.tracing, self.worker, llm_model(config))

    @property
    def ready(self) -> bool:
        """Warm and admitting calls (not draining)."""
        return self.services is not None and not self.calls.draining

    def start_runners(self, engines: Engines) -> Runners:
        """One runner (thread) per engine. The LLM's gets a thread per request it serves at
        once: a batching engine's sequences, or a remote server's connections; those
        threads only wait on the batch or the stream."""
        llm = engines.llm
        if isinstance(llm, BatchingLlm):
            metrics = self.metrics
            llm.observe_steps(lambda step: metrics.observe_batch_step(step.decode, step.seconds))
        llm_workers = llm.max_sequences if isinstance(llm, ParallelLlm) else 1
        runners = Runners(
            *(
                EngineRunner(
                    name,
                    self.config.limits.engine_queue,
                    observer=self.metrics,
                    workers=llm_workers if name == "llm" else 1,
                )
                for name in ("vad", "stt", "llm", "tts")
            )
        )
        if isinstance(llm, BatchingLlm) and self.config.llm.share_cores:
            stt, tts = runners.stt, runners.tts
            stt_threads, tts_threads = self.config.stt.threads, self.config.tts.threads
            llm.share_cores(lambda: stt_threads * stt.computing + tts_threads * tts.computing)
        return runners

    def install(
        self,
        engines: Engines,
        runners: Runners,
        filler: Filler | None = None,
        store: CallStore | None = None,
        phrases: Mapping[str, Filler] | None = None,
    ) -> None:
        self.services = Services(
            config=self.config,
            engines=engines,
            runners=runners,
            metrics=self.metrics,
            turn_log=TurnLog(self.config.server.turn_log_path),
            filler=filler,
            store=store,
            tracing=self.tracing,
            agent=self.agent,
            phrases=phrases or {},
        )
        self.metrics.ready.set(1)
        for callback in self.on_ready:
            callback()


def llm_model(config: Config) -> Attributes:
    """What every llm span says of the model (OpenTelemetry's gen_ai conventions), as the
    configured engine describes it."""
    info = factory_for("llm", config).describe(config, assemble=False)
    return {"gen_ai.system": info.gen_ai_system, "gen_ai.request.model": info.model_name}
