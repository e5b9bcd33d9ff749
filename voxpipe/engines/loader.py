"""Build the engines the config chooses and warm each one up.

Which engine runs each stage is its section's ``engine``; the registry
(``config/engine_registry.py``) says which module builds it, so no engine is built here by name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import cast

from voxpipe.config import Config
from voxpipe.config.engine_registry import SECTIONS
from voxpipe.engines.base import (
    Engines,
    LlmEngine,
    SttEngine,
    TtsEngine,
    TurnModel,
    VadEngine,
)
from voxpipe.engines.factory import BuildContext, ModelInfo, factory_for
from voxpipe.engines.llama_factory import llm_model_path  # where the benchmarks find it

__all__ = [
    "ModelInfo",
    "describe_models",
    "limit_numpy_threads",
    "llm_model_path",
    "load_engines",
    "load_llm",
    "load_stt",
    "load_turn_model",
    "warm_one",
]

log = logging.getLogger("voxpipe.engines")


def describe_models(config: Config, assemble: bool = False) -> list[ModelInfo]:
    """Which model each stage's engine uses and where it lives (``voxpipe models``)."""
    return [factory_for(stage, config).describe(config, assemble) for stage in SECTIONS]


def load_stt(config: Config) -> SttEngine:
    """The STT engine ``stt.engine`` chooses."""
    return cast(SttEngine, factory_for("stt", config).build(config, BuildContext()))


def load_llm(config: Config, on_refusal: Callable[[str], None] | None = None) -> LlmEngine:
    """The LLM engine ``llm.engine`` chooses: the embedded model, or the client of a remote
    one, which tells ``on_refusal`` of every request the remote server refused."""
    context = BuildContext(on_refusal=on_refusal)
    return cast(LlmEngine, factory_for("llm", config).build(config, context))


def load_turn_model(config: Config) -> TurnModel | None:
    """The turn model ``turn_model.engine`` chooses, when turns may end by it
    (``turn.end_of_turn``, or a Realtime client's ``semantic_vad`` with
    ``turn.semantic_vad``); else no model at all."""
    if not config.turn.by_model and not config.turn.semantic_vad:
        return None
    return cast(TurnModel, factory_for("turn", config).build(config, BuildContext()))


def limit_numpy_threads() -> None:
    """One thread for numpy's own BLAS. Its matrix products here are small (Whisper's mel
    filter bank), and OpenBLAS's idle worker spins for about 0.1 s after each one: after
    every transcript it took one of the two cores from the LLM's prefill."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def load_engines(
    config: Config, warm: bool = True, on_refusal: Callable[[str], None] | None = None
) -> Engines:
    """Load all four models and, unless the caller warms them on their own threads, run one
    warm-up inference on each. ``on_refusal`` hears of a remote LLM's refusals."""
    limit_numpy_threads()
    t0 = time.monotonic()
    engines = Engines(
        vad=cast(VadEngine, factory_for("vad", config).build(config, BuildContext())),
        stt=load_stt(config),
        llm=load_llm(config, on_refusal),
        tts=cast(TtsEngine, factory_for("tts", config).build(config, BuildContext())),
        turn=load_turn_model(config),
    )
    log.info("models loaded in %.1f s", time.monotonic() - t0)
    if warm:
        for engine in (engines.vad, engines.turn, engines.stt, engines.llm, engines.tts):
            if engine is not None:
                warm_one(engine)
    return engines


def warm_one(engine: VadEngine | SttEngine | LlmEngine | TtsEngine | TurnModel) -> None:
    """One warm-up inference, timed in the log. Run it on the thread that will serve the
    engine's calls (the server's runner): see ``server/startup.py``."""
    t = time.monotonic()
    engine.warmup()
    log.info("warmed %s in %.2f s", engine.name, time.monotonic() - t)
