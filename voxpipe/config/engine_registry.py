"""The engines voxpipe can run, registered in one place.

Each stage (the VAD, the STT, the LLM, the TTS and the turn model) runs one engine, chosen by
its section's ``engine`` setting (``stt.engine``, ``turn_model.engine``...). This table is
the only place an engine is named: the config accepts exactly the names registered here for
each stage, ``voxpipe config --markdown`` lists them, and the loader
(``voxpipe/engines/loader.py``) builds the one chosen through the factory the entry names.

A new engine is one module in ``voxpipe/engines/`` holding the engine and its factory (an
object with ``build`` and ``describe``, the ``EngineFactory`` protocol of
``engines/factory.py``), plus one line here. The factory is named as ``module:attribute``
and imported only when it is used, so the config, the lowest layer, never imports an engine.

The rest of the server asks an entry what its engine can do (``keeps_prompt_cache``), never
which engine it is: a new engine with a capability declares it on its line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

Stage = Literal["vad", "stt", "llm", "tts", "turn"]

SECTIONS: dict[Stage, str] = {
    "vad": "vad",
    "stt": "stt",
    "llm": "llm",
    "tts": "tts",
    "turn": "turn_model",
}
"""The config section whose ``engine`` setting chooses each stage's engine."""


@dataclass(frozen=True)
class EngineEntry:
    """One engine a stage may run: ``name`` is the value of its section's ``engine``;
    ``factory`` is where its ``EngineFactory`` lives (``package.module:attribute``);
    ``summary`` says in a few words what it is, for the docs and ``voxpipe models``.

    ``keeps_prompt_cache``: an LLM that keeps the KV of the prompts it evaluated in this
    process, where a later request that starts with one reuses it; a prompt evaluated once at
    startup (the agent's instructions and tools) is then one every call starts from. A remote
    server's cache is its own, and a request to fill it at startup is not worth making."""

    stage: Stage
    name: str
    factory: str
    summary: str
    keeps_prompt_cache: bool = False

    def __post_init__(self) -> None:
        module, _, attribute = self.factory.partition(":")
        if not module or not attribute:
            raise ValueError(f"factory {self.factory!r} is not 'package.module:attribute'")


class UnknownEngine(ValueError):
    """A section names an engine no entry registers for its stage."""


class EngineRegistry:
    """Every registered engine, by stage and name; a stage's first entry is its default."""

    def __init__(self) -> None:
        self._entries: dict[tuple[Stage, str], EngineEntry] = {}

    def register(self, entry: EngineEntry) -> EngineEntry:
        """Add ``entry``; a name registered twice for one stage is a bug, not an override."""
        key = (entry.stage, entry.name)
        if key in self._entries:
            raise ValueError(f"a {entry.stage} engine called {entry.name!r} is registered already")
        self._entries[key] = entry
        return entry

    def unregister(self, stage: Stage, name: str) -> None:
        """Remove an entry (a test's engine, once the test is over)."""
        del self._entries[(stage, name)]

    def get(self, stage: Stage, name: str) -> EngineEntry:
        try:
            return self._entries[(stage, name)]
        except KeyError:
            known = ", ".join(self.names(stage)) or "none"
            raise UnknownEngine(
                f"no {stage} engine is called {name!r}; registered: {known}"
            ) from None

    def default(self, stage: Stage) -> str:
        """The engine a section runs when it names none: the stage's first entry."""
        return next(self.entries(stage)).name

    def names(self, stage: Stage) -> list[str]:
        return [entry.name for entry in self.entries(stage)]

    def entries(self, stage: Stage | None = None) -> Iterator[EngineEntry]:
        """The entries in registration order, of one stage or of all."""
        return (e for e in self._entries.values() if stage is None or e.stage == stage)


ENGINES = EngineRegistry()


def register(
    stage: Stage, name: str, factory: str, summary: str, *, keeps_prompt_cache: bool = False
) -> EngineEntry:
    """Register an engine: the one line a new engine adds (below, or in a test)."""
    return ENGINES.register(EngineEntry(stage, name, factory, summary, keeps_prompt_cache))


# One line per engine; the first of a stage is its default.
register("vad", "silero", "voxpipe.engines.silero_vad:FACTORY", "Silero VAD v6 (onnxruntime)")
register("stt", "whisper", "voxpipe.engines.whisper_stt:FACTORY", "faster-whisper (CTranslate2)")
register(
    "llm",
    "llama",
    "voxpipe.engines.llama_factory:FACTORY",
    "embedded GGUF (llama.cpp)",
    keeps_prompt_cache=True,
)
register("llm", "openai", "voxpipe.engines.openai_llm:FACTORY", "OpenAI-compatible endpoint")
register("tts", "piper", "voxpipe.engines.piper_tts:FACTORY", "Piper VITS voice (onnxruntime)")
register("turn", "smart_turn", "voxpipe.engines.smart_turn:FACTORY", "Smart Turn v3.2 (ONNX)")


def check_engine(stage: Stage, name: str) -> str:
    """``name`` if ``stage`` has an engine of that name, else :class:`UnknownEngine`
    (a ``ValueError``, which the config reports as a validation error)."""
    return ENGINES.get(stage, name).name
