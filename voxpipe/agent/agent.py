"""An agent: what the assistant is told, what it says first, and what it can do.

Users define one (``voxpipe serve --agent module:attr``, or a YAML file: ``loader.py``);
without one the server runs :func:`default_agent`, the plain assistant of
``llm.system_prompt`` with no tools. An agent is a declaration: nothing connects or opens
until :class:`~voxpipe.agent.runtime.RunningAgent` starts it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voxpipe.agent.hooks import AgentHooks
from voxpipe.agent.http_tools import HttpToolConfig
from voxpipe.agent.mcp_tools import McpServerConfig
from voxpipe.agent.python_tools import python_tool
from voxpipe.agent.tools import Tool, ToolDefinitionError
from voxpipe.config import Config


@dataclass
class Agent:
    """``tools`` are Python tools (``@tool``; a plain function is taken as ``@tool`` with
    its defaults); ``http_tools`` and ``mcp_servers`` are declarations the running agent
    connects. ``base_dir`` is where a relative path in them starts (an agent file's
    folder)."""

    instructions: str
    greeting: str | None = None
    tools: Sequence[Tool | Callable[..., Any]] = ()
    http_tools: Sequence[HttpToolConfig] = ()
    mcp_servers: Sequence[McpServerConfig] = ()
    hooks: AgentHooks = field(default_factory=AgentHooks)
    name: str = "agent"
    base_dir: Path | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.instructions, str) or not self.instructions.strip():
            raise ToolDefinitionError(f"agent {self.name}: its instructions are empty")
        self.tools = [self._as_tool(t) for t in self.tools]
        self.http_tools = list(self.http_tools)
        self.mcp_servers = list(self.mcp_servers)
        for declared in self.http_tools:
            if not isinstance(declared, HttpToolConfig):
                raise ToolDefinitionError(f"agent {self.name}: {declared!r} is no HttpToolConfig")
        for server in self.mcp_servers:
            if not isinstance(server, McpServerConfig):
                raise ToolDefinitionError(f"agent {self.name}: {server!r} is no McpServerConfig")
        self._refuse_one_name_twice()

    def _refuse_one_name_twice(self) -> None:
        """Two declared tools with one name stop the agent here, before any model loads;
        an MCP server's tools are known only once it is reached (the toolbox checks them)."""
        seen: set[str] = set()
        for name in [t.name for t in self.python_tools] + [h.name for h in self.http_tools]:
            if name in seen:
                raise ToolDefinitionError(f"agent {self.name}: two tools are named {name}")
            seen.add(name)

    def _as_tool(self, value: Tool | Callable[..., Any]) -> Tool:
        if isinstance(value, Tool):
            return value
        if callable(value):
            return python_tool(value)
        raise ToolDefinitionError(f"agent {self.name}: {value!r} is neither a tool nor a function")

    @property
    def python_tools(self) -> list[Tool]:
        return [t for t in self.tools if isinstance(t, Tool)]


def default_agent(config: Config) -> Agent:
    """The plain voice assistant: the configured system prompt, no greeting, no tools."""
    return Agent(instructions=config.llm.system_prompt, name="default")
