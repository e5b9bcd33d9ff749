"""What an engine's module gives the loader: a factory that builds the engine from the config
and says which model it runs.

``config/engine_registry.py`` names each engine's factory as ``module:attribute``; this
module imports the one a section chooses (:func:`factory_for`) and checks it keeps the
:class:`EngineFactory` contract, so an engine is one module plus its registry line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from voxpipe.config import Config
from voxpipe.config.engine_registry import ENGINES, SECTIONS, Stage

EngineT_co = TypeVar("EngineT_co", covariant=True)


@dataclass(frozen=True)
class ModelInfo:
    """One stage's line in ``voxpipe models``: the engine, its model and its threads.
    ``remote``: the model runs elsewhere, and ``path`` is its address. An LLM also says what
    its trace spans name (OpenTelemetry's ``gen_ai.system`` and ``gen_ai.request.model``)."""

    stage: str
    engine: str
    path: Path
    threads: int
    remote: bool = False
    gen_ai_system: str = ""
    model_name: str = ""


@dataclass(frozen=True)
class BuildContext:
    """What a factory may need beyond the config: where a remote engine reports each request
    its server refused (the server's metrics count them)."""

    on_refusal: Callable[[str], None] | None = None


class EngineFactory(Protocol, Generic[EngineT_co]):
    """Builds one engine from the config, and describes it without loading it."""

    def build(self, config: Config, context: BuildContext) -> EngineT_co:
        """The engine, loaded and not yet warm."""
        ...

    def describe(self, config: Config, assemble: bool) -> ModelInfo:
        """Which model the engine would run and where it lives; with ``assemble``, fetch or
        assemble its files first (``voxpipe models --assemble``)."""
        ...


def factory_for(stage: Stage, config: Config) -> EngineFactory[Any]:
    """The factory of the engine ``config`` chooses for ``stage`` (its section's ``engine``)."""
    name = getattr(config, SECTIONS[stage]).engine
    entry = ENGINES.get(stage, name)
    module, _, attribute = entry.factory.partition(":")
    factory = getattr(importlib.import_module(module), attribute)
    if not all(callable(getattr(factory, method, None)) for method in ("build", "describe")):
        raise TypeError(f"{entry.factory} (the {stage} engine {name!r}) is no EngineFactory")
    return factory
