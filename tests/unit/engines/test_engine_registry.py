"""A new engine is one module plus one registration line: the config accepts it, the loader
builds it, ``voxpipe models`` and the configuration reference list it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from tests.unit.fakes import FakeStt
from voxpipe.config import Config, markdown_reference
from voxpipe.config.engine_registry import ENGINES, SECTIONS, register
from voxpipe.engines.base import ParallelLlm
from voxpipe.engines.factory import BuildContext, ModelInfo
from voxpipe.engines.loader import describe_models, load_llm, load_stt


class ScriptedSttFactory:
    """The test's engine module: an STT that says one line, built from the ``stt`` section."""

    def build(self, config: Config, context: BuildContext) -> FakeStt:
        return FakeStt(f"heard with {config.stt.threads} threads")

    def describe(self, config: Config, assemble: bool) -> ModelInfo:
        return ModelInfo("stt", "scripted", Path("/nowhere"), config.stt.threads)


SCRIPTED_STT = ScriptedSttFactory()


@pytest.fixture
def scripted_stt() -> Iterator[None]:
    register("stt", "scripted", f"{__name__}:SCRIPTED_STT", "a scripted STT for tests")
    yield
    ENGINES.unregister("stt", "scripted")


@pytest.mark.usefixtures("scripted_stt")
def test_a_registered_engine_is_accepted_built_described_and_documented() -> None:
    config = Config(stt={"engine": "scripted", "threads": 3})
    assert config.stt.engine == "scripted"
    stt = load_stt(config)
    assert isinstance(stt, FakeStt)
    assert stt.transcribe(np.zeros(1600, np.float32)).text == "heard with 3 threads"
    stages = {info.stage: info for info in describe_models(config)}
    assert stages["stt"] == ModelInfo("stt", "scripted", Path("/nowhere"), 3)
    assert "| `stt.engine` | `scripted` | a scripted STT for tests |" in markdown_reference()


def test_an_unregistered_engine_is_refused_with_the_registered_names() -> None:
    with pytest.raises(ValidationError, match="no stt engine is called 'scripted'; registered"):
        Config(stt={"engine": "scripted"})
    with pytest.raises(ValidationError, match="registered: llama, openai"):
        Config(llm={"engine": "vllm"})


def test_existing_config_files_keep_working() -> None:
    """No section had to name its engine before the registry; the defaults are those engines,
    and llm.engine keeps its two values."""
    config = Config()
    assert (config.vad.engine, config.stt.engine, config.tts.engine) == (
        "silero",
        "whisper",
        "piper",
    )
    assert (config.llm.engine, config.turn_model.engine) == ("llama", "smart_turn")
    assert Config(llm={"engine": "openai"}).llm.engine == "openai"


def test_every_stage_has_a_default_engine_that_is_its_first() -> None:
    config = Config()
    for stage, section in SECTIONS.items():
        assert getattr(config, section).engine == ENGINES.names(stage)[0]


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="registered already"):
        register("llm", "llama", "voxpipe.engines.llama_factory:FACTORY", "again")


def test_the_remote_llm_is_built_through_its_factory() -> None:
    refused: list[str] = []
    llm = load_llm(Config(llm={"engine": "openai"}), refused.append)
    try:
        assert llm.name.startswith("openai-compatible")
        # the runner gives it a thread per connection, as it gives the batch one per sequence
        assert isinstance(llm, ParallelLlm)
        assert llm.max_sequences == Config().remote_llm.max_connections
    finally:
        llm.close()  # type: ignore[attr-defined]
    info = {i.stage: i for i in describe_models(Config(llm={"engine": "openai"}))}["llm"]
    assert info.remote and info.engine == "openai-compatible"


PACKAGE = Path(__file__).resolve().parents[3] / "voxpipe"
END_OF_TURN_VALUE = {
    "config/turn.py",
    "transports/realtime_session.py",
}
"""Where ``smart_turn`` is ``turn.end_of_turn``'s value (a public setting), not the engine."""


def test_outside_the_engines_no_module_names_an_engine() -> None:
    """The rest of the package asks the registry or an engine what it can do (its entry's
    ``keeps_prompt_cache``, the protocols of ``engines/base.py``), never which engine it is:
    no module names a registered engine, or imports an engine's module."""
    names = {entry.name for entry in ENGINES.entries()}
    modules = {entry.factory.partition(":")[0] for entry in ENGINES.entries()}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith("engines/") or where == "config/engine_registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if isinstance(node, ast.Constant) and node.value in names:
                if not (node.value == "smart_turn" and where in END_OF_TURN_VALUE):
                    found.append(f"{where}:{node.lineno} {node.value!r}")
            elif isinstance(node, ast.ImportFrom) and node.module in modules:
                found.append(f"{where}:{node.lineno} imports {node.module}")
    assert found == []
