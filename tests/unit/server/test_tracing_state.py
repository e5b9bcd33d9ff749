"""The server builds its tracing once, from the configuration, naming the LLM it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxpipe.config import Config
from voxpipe.observability.tracing import OtelTracing, Tracing
from voxpipe.server.state import ServerState, llm_model


def test_tracing_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert ServerState(Config.load()).tracing is Tracing.off()


def test_an_endpoint_turns_it_on_with_the_model_on_llm_spans() -> None:
    config = Config.load(tracing={"endpoint": "http://127.0.0.1:4318"})
    state = ServerState(config)
    try:
        assert isinstance(state.tracing, OtelTracing)
        assert state.tracing.model == llm_model(config)
        assert state.tracing.endpoint == "http://127.0.0.1:4318/v1/traces"
    finally:
        state.tracing.shutdown()


def test_the_model_is_the_embedded_file_or_the_remote_name() -> None:
    assert llm_model(Config.load()) == {
        "gen_ai.system": "llama.cpp",
        "gen_ai.request.model": "qwen2.5-coder-0.5b-instruct-q4.gguf",
    }
    pinned = Config.load(llm={"model": "qwen2.5-coder-1.5b"})
    assert llm_model(pinned)["gen_ai.request.model"] == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    own = Config.load(llm={"model_path": Path("/models/mine.gguf")})
    assert llm_model(own)["gen_ai.request.model"] == "mine.gguf"
    remote = Config.load(llm={"engine": "openai"}, remote_llm={"model": "qwen-7b"})
    assert llm_model(remote) == {"gen_ai.system": "openai", "gen_ai.request.model": "qwen-7b"}
