"""The embedded LLM's factory (``llm.engine: llama``): which GGUF file runs, and the
:class:`~voxpipe.engines.llama_llm.LlamaLlm` built from the ``llm`` section.

Apart from the engine so that ``voxpipe models`` and the benchmarks can find the model file
without importing llama-cpp-python.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from voxpipe.config import Config
from voxpipe.engines.factory import BuildContext, ModelInfo
from voxpipe.engines.model_files import ensure_llm, llm_file, verify_file

if TYPE_CHECKING:
    from voxpipe.engines.llama_llm import LlamaLlm


def llm_model_path(config: Config) -> Path:
    """The verified GGUF file ``llm.model_path`` names, else the pinned ``llm.model``,
    assembled from its chunk packages the first time."""
    if config.llm.model_path is not None:
        return verify_file(config.llm.model_path)
    return ensure_llm(config.llm.cache_dir, config.llm.model)


class LlamaFactory:
    """Builds the embedded model from the ``llm`` section."""

    def build(self, config: Config, context: BuildContext) -> LlamaLlm:
        from voxpipe.engines.batch_plan import BatchPolicy
        from voxpipe.engines.llama_llm import LlamaLlm

        llm = config.llm
        return LlamaLlm(
            llm_model_path(config),
            threads=llm.threads,
            n_ctx=llm.n_ctx,
            n_batch=llm.n_batch,
            max_tokens=llm.max_tokens,
            temperature=llm.temperature,
            top_p=llm.top_p,
            seed=llm.seed,
            state_cache_bytes=llm.state_cache_mb << 20,
            warmup_system_prompt=llm.system_prompt,
            tool_threshold=llm.tool_threshold,
            tool_temperature=llm.tool_temperature,
            max_tool_tokens=llm.max_tool_tokens,
            echo_run=llm.echo_run,
            tool_router=llm.tool_router,
            tool_router_floor=llm.tool_router_floor,
            lookup_router=llm.lookup_router,
            lookup_threshold=llm.lookup_threshold,
            max_sequences=llm.max_sequences,
            chat_template=llm.chat_template,
            tool_family=llm.tool_family,
            policy=BatchPolicy(
                step_tokens=llm.n_batch,
                prefill_chunk=llm.prefill_chunk,
                first_phrase_tokens=llm.first_phrase_tokens,
                first_phrase_width=llm.first_phrase_width,
                rest_hold_ns=llm.rest_hold_ms * 1_000_000,
                speech_lead_ns=llm.speech_lead_ms * 1_000_000,
                late_after_ns=llm.late_after_ms * 1_000_000,
                late_max_tokens=llm.late_max_tokens,
                warm_chunk=llm.warm_chunk,
            ),
        )

    def describe(self, config: Config, assemble: bool) -> ModelInfo:
        if assemble:
            path = llm_model_path(config)
        else:
            path = config.llm.model_path or llm_file(config.llm.cache_dir, config.llm.model)
        threads = config.llm.threads
        return ModelInfo("llm", "llama-cpp-python", path, threads, False, "llama.cpp", path.name)


FACTORY = LlamaFactory()
