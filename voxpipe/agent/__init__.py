"""What the voice agent is and what it can do: instructions, a greeting, tools.

An :class:`Agent` is declared by its author (``agent.py``; loaded from ``module:attr`` or
an agent file by ``loader.py``) and started once per server process
(:class:`RunningAgent`, ``runtime.py``), which opens what its tools need and gathers them
in a :class:`Toolbox`. Three kinds of tool share one shape (``tools.py``): Python
functions (``@tool``, ``python_tools.py``), HTTP webhooks (``http_tools.py``) and MCP
servers' tools (``mcp_tools.py``). ``docs/agents.md`` is the guide.

This layer knows nothing of calls, transports or the server: the conversation asks the
toolbox to run a :class:`ToolCall` for a :class:`CallContext` (who is calling, as the
server knows it) and gets a :class:`ToolResult` back.
"""

from voxpipe.agent.agent import Agent, default_agent
from voxpipe.agent.call_context import CallContext
from voxpipe.agent.hooks import AgentHooks, CallInfo
from voxpipe.agent.http_tools import HttpTool, HttpToolConfig
from voxpipe.agent.loader import AgentFile, AgentLoadError, load_agent, resolve_agent
from voxpipe.agent.mcp_tools import McpConnection, McpServerConfig, McpTool, McpUnavailable
from voxpipe.agent.python_tools import PythonTool, python_tool, tool
from voxpipe.agent.runtime import RunningAgent
from voxpipe.agent.toolbox import Toolbox
from voxpipe.agent.tools import (
    InvalidArguments,
    Tool,
    ToolCall,
    ToolDefinitionError,
    ToolEffect,
    ToolFailed,
    ToolOutput,
    ToolPolicy,
    ToolResult,
    ToolStatus,
    tool_spec,
)
from voxpipe.engines.base import ToolSpec

__all__ = [
    "Agent",
    "AgentFile",
    "AgentHooks",
    "AgentLoadError",
    "CallContext",
    "CallInfo",
    "HttpTool",
    "HttpToolConfig",
    "InvalidArguments",
    "McpConnection",
    "McpServerConfig",
    "McpTool",
    "McpUnavailable",
    "PythonTool",
    "RunningAgent",
    "Tool",
    "ToolCall",
    "ToolDefinitionError",
    "ToolEffect",
    "ToolFailed",
    "ToolOutput",
    "ToolPolicy",
    "ToolResult",
    "ToolSpec",
    "ToolStatus",
    "Toolbox",
    "default_agent",
    "load_agent",
    "python_tool",
    "resolve_agent",
    "tool",
    "tool_spec",
]
