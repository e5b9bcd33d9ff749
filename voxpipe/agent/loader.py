"""Where an agent comes from: ``module:attr``, ``path/file.py:attr``, or an agent file.

``attr`` is an :class:`~voxpipe.agent.agent.Agent` or a function of no arguments that
returns one. An agent file (``.yaml``, ``.yml`` or ``.json``) is for people who write no
Python: instructions, a greeting, HTTP tools, MCP servers and the built-in call tools
(``call_control: [end_call]``), validated strictly (an
unknown key is an error, so a misspelt ``timout_s`` is not silently ignored). Every
problem is an :class:`AgentLoadError` that names the reference and the field.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from voxpipe.agent.agent import Agent, default_agent
from voxpipe.agent.call_control import CALL_CONTROL, transfer_call_to
from voxpipe.agent.http_tools import HttpToolConfig
from voxpipe.agent.mcp_tools import McpServerConfig
from voxpipe.agent.tools import ToolDefinitionError
from voxpipe.config import Config

AGENT_FILE_SUFFIXES = (".yaml", ".yml", ".json")


class AgentLoadError(Exception):
    """An agent reference that does not give an agent; the message says where and why."""


class AgentFile(BaseModel):
    """The contents of an agent file."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: str | None = Field(None, description="Names the agent in logs (default: the file's).")
    instructions: str = Field(min_length=1, description="The system prompt.")
    greeting: str | None = Field(None, description="Said when a call begins.")
    http_tools: list[HttpToolConfig] = Field(default_factory=list)
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    transfer_to: str | None = Field(
        None,
        description="A number or SIP URI: the agent offers transfer_call, which puts a caller "
        "who asks for a person through to it.",
    )
    call_control: list[Literal["end_call"]] = Field(
        default_factory=list,
        description="Built-in call tools the agent offers (agent/call_control.py): end_call.",
    )


def resolve_agent(config: Config) -> Agent:
    """The configured agent (``agent``), else the default assistant."""
    return default_agent(config) if config.agent is None else load_agent(config.agent)


def load_agent(ref: str) -> Agent:
    """The agent ``ref`` names (module docstring); :class:`AgentLoadError` if none."""
    if ref.lower().endswith(AGENT_FILE_SUFFIXES):
        return load_agent_file(Path(ref))
    module_name, colon, attr = ref.rpartition(":")
    if not colon or not module_name or not attr:
        raise AgentLoadError(
            f"agent {ref!r}: expected module:attr, path/file.py:attr or a .yaml/.json file"
        )
    try:
        module = _import(module_name)
    except Exception as exc:  # the agent's own module failed: say so, with its error
        raise AgentLoadError(f"agent {ref!r}: importing {module_name}: {_describe(exc)}") from exc
    if not hasattr(module, attr):
        raise AgentLoadError(f"agent {ref!r}: {module_name} has no {attr!r}")
    target = getattr(module, attr)
    if not isinstance(target, Agent) and callable(target):
        try:
            target = target()
        except ToolDefinitionError as exc:
            raise AgentLoadError(f"agent {ref!r}: {exc}") from exc
        except Exception as exc:
            raise AgentLoadError(f"agent {ref!r}: {attr}() raised {_describe(exc)}") from exc
    if not isinstance(target, Agent):
        raise AgentLoadError(
            f"agent {ref!r}: {attr} is a {type(target).__name__}, "
            "not an Agent or a function that returns one"
        )
    return target


def load_agent_file(path: Path) -> Agent:
    try:
        text = path.read_text()
    except OSError as exc:
        raise AgentLoadError(f"agent file {path}: {exc.strerror or exc}") from exc
    data = _parse(path, text)
    try:
        spec = AgentFile.model_validate(data)
    except ValidationError as exc:
        raise AgentLoadError(f"agent file {path}: " + "; ".join(_problems(exc))) from None
    try:
        return Agent(
            instructions=spec.instructions,
            greeting=spec.greeting,
            http_tools=spec.http_tools,
            mcp_servers=spec.mcp_servers,
            tools=[CALL_CONTROL[name] for name in dict.fromkeys(spec.call_control)]
            + ([transfer_call_to(spec.transfer_to)] if spec.transfer_to else []),
            name=spec.name or path.stem,
            base_dir=path.resolve().parent,
        )
    except ToolDefinitionError as exc:
        raise AgentLoadError(f"agent file {path}: {exc}") from exc


def _parse(path: Path, text: str) -> Any:
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise AgentLoadError(f"agent file {path}: not JSON: {exc}") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AgentLoadError(f"agent file {path}: not YAML: {exc}") from None


def _import(module_name: str) -> Any:
    """A module by dotted name, or a ``.py`` file by path (imported under its stem)."""
    if not module_name.endswith(".py"):
        return importlib.import_module(module_name)
    path = Path(module_name).resolve()
    if not path.is_file():
        raise ImportError(f"no file {module_name}")
    if str(path.parent) not in sys.path:  # its sibling modules import as from a script
        sys.path.insert(0, str(path.parent))
    name = f"voxpipe_agent_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {module_name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pydantic look their module up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _describe(exc: BaseException) -> str:
    """One line: a pydantic error (an ``HttpToolConfig`` built in the agent's module) is
    otherwise a paragraph."""
    if isinstance(exc, ValidationError):
        return f"{exc.title}: " + "; ".join(_problems(exc))
    return f"{type(exc).__name__}: {exc}"


def _problems(error: ValidationError) -> list[str]:
    return [
        f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
        for e in error.errors(include_url=False)
    ]
