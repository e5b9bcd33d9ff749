"""Build the embedded engines from the config and warm each one up."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from voxpipe.config import Config
from voxpipe.engines.base import (
    Engines,
    LlmEngine,
    SttEngine,
    TtsEngine,
    TurnModel,
    VadEngine,
)
from voxpipe.engines.model_files import (
    SMART_TURN,
    ensure_llm,
    ensure_wheel_member,
    llm_file,
    smart_turn_file,
    verify_file,
)

log = logging.getLogger("voxpipe.engines")


@dataclass(frozen=True)
class ModelInfo:
    stage: str
    engine: str
    path: Path
    threads: int


def llm_model_path(config: Config) -> Path:
    if config.llm.model_path is not None:
        return verify_file(config.llm.model_path)
    return ensure_llm(config.llm.cache_dir, config.llm.model)


def describe_models(config: Config, assemble: bool = False) -> list[ModelInfo]:
    """Which model each stage uses and where it lives (``voxpipe models``)."""
    from voxpipe.engines import piper_tts, silero_vad, whisper_stt

    if config.llm.engine == "openai":
        llm = ModelInfo("llm", "openai-compatible", Path(config.remote_llm.base_url), 0)
    else:
        path = (
            llm_model_path(config)
            if assemble
            else (config.llm.model_path or llm_file(config.llm.cache_dir, config.llm.model))
        )
        llm = ModelInfo("llm", "llama-cpp-python", path, config.llm.threads)
    cache = config.llm.cache_dir
    turn = ensure_wheel_member(cache, SMART_TURN) if assemble else smart_turn_file(cache)
    return [
        ModelInfo("vad", "silero-vad-v6 (onnxruntime)",
                  config.vad.model_path or silero_vad.default_model_path(), config.vad.threads),
        ModelInfo("stt", f"faster-whisper {config.stt.compute_type}",
                  config.stt.model_path or whisper_stt.default_model_path(), config.stt.threads),
        llm,
        ModelInfo("tts", "piper (onnxruntime)",
                  config.tts.model_path or piper_tts.default_model_path(), config.tts.threads),
        ModelInfo("turn", "smart-turn-v3.2 (onnxruntime)", turn, 1),
    ]  # fmt: skip


def load_stt(config: Config) -> SttEngine:
    """Whisper as ``stt`` configures it."""
    from voxpipe.engines.whisper_stt import WhisperStt

    return WhisperStt(
        config.stt.model_path,
        compute_type=config.stt.compute_type,
        threads=config.stt.threads,
        language=config.stt.language,
        beam_size=config.stt.beam_size,
        window=config.stt.window,
    )


def load_llm(config: Config, on_refusal: Callable[[str], None] | None = None) -> LlmEngine:
    """The embedded model, or the client of a remote one (``llm.engine``), which tells
    ``on_refusal`` of every request the remote server refused."""
    if config.llm.engine == "openai":
        from voxpipe.engines.openai_llm import OpenAiCompatibleLlm

        return OpenAiCompatibleLlm(config.remote_llm, config.llm, on_refusal)
    from voxpipe.engines.batch_plan import BatchPolicy
    from voxpipe.engines.llama_llm import LlamaLlm

    return LlamaLlm(
        llm_model_path(config),
        threads=config.llm.threads,
        n_ctx=config.llm.n_ctx,
        n_batch=config.llm.n_batch,
        max_tokens=config.llm.max_tokens,
        temperature=config.llm.temperature,
        top_p=config.llm.top_p,
        seed=config.llm.seed,
        state_cache_bytes=config.llm.state_cache_mb << 20,
        warmup_system_prompt=config.llm.system_prompt,
        tool_threshold=config.llm.tool_threshold,
        tool_temperature=config.llm.tool_temperature,
        max_tool_tokens=config.llm.max_tool_tokens,
        echo_run=config.llm.echo_run,
        tool_router=config.llm.tool_router,
        tool_router_floor=config.llm.tool_router_floor,
        max_sequences=config.llm.max_sequences,
        chat_template=config.llm.chat_template,
        tool_family=config.llm.tool_family,
        policy=BatchPolicy(
            step_tokens=config.llm.n_batch,
            prefill_chunk=config.llm.prefill_chunk,
            first_phrase_tokens=config.llm.first_phrase_tokens,
            first_phrase_width=config.llm.first_phrase_width,
            rest_hold_ns=config.llm.rest_hold_ms * 1_000_000,
            speech_lead_ns=config.llm.speech_lead_ms * 1_000_000,
            late_after_ns=config.llm.late_after_ms * 1_000_000,
            late_max_tokens=config.llm.late_max_tokens,
        ),
    )


def load_turn_model(config: Config) -> TurnModel | None:
    """Smart Turn, when turns may end by it (``turn.end_of_turn``, or a Realtime client's
    ``semantic_vad`` with ``turn.semantic_vad``); else no model at all."""
    if config.turn.end_of_turn != "smart_turn" and not config.turn.semantic_vad:
        return None
    from voxpipe.engines.smart_turn import SmartTurn

    return SmartTurn(ensure_wheel_member(config.llm.cache_dir, SMART_TURN), threads=1)


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
    from voxpipe.engines.piper_tts import PiperTts
    from voxpipe.engines.silero_vad import SileroVad

    limit_numpy_threads()
    t0 = time.monotonic()
    engines = Engines(
        vad=SileroVad(config.vad.model_path, threads=config.vad.threads),
        stt=load_stt(config),
        llm=load_llm(config, on_refusal),
        tts=PiperTts(config.tts.model_path, threads=config.tts.threads,
                     length_scale=config.tts.length_scale),
        turn=load_turn_model(config),
    )  # fmt: skip
    log.info("models loaded in %.1f s", time.monotonic() - t0)
    if warm:
        for engine in (engines.vad, engines.turn, engines.stt, engines.llm, engines.tts):
            if engine is not None:
                warm_one(engine)
    return engines


def warm_one(engine: VadEngine | SttEngine | LlmEngine | TtsEngine | TurnModel) -> None:
    """One warm-up inference, timed in the log. Run it on the thread that will serve the
    engine's calls (the server's runner): see ``server/app.py``."""
    t = time.monotonic()
    engine.warmup()
    log.info("warmed %s in %.2f s", engine.name, time.monotonic() - t)
