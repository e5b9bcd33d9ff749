"""A started agent: its toolbox, with the HTTP client and MCP sessions its tools use.

Started once per server process (its lifespan), shared by every call, closed at shutdown.
An MCP server that cannot be reached at start does not stop the agent: the error is
logged, kept in :attr:`RunningAgent.unavailable` (``voxpipe agent`` shows it) and the
agent runs without that server's tools. A tool defined badly (two tools with one name)
stops the start with :class:`~voxpipe.agent.tools.ToolDefinitionError`: that is a
mistake to fix, not an outage to ride out.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

import httpx

from voxpipe.agent.agent import Agent
from voxpipe.agent.http_tools import HttpTool
from voxpipe.agent.mcp_tools import McpConnection, McpUnavailable
from voxpipe.agent.toolbox import Toolbox
from voxpipe.agent.tools import Tool

log = logging.getLogger("voxpipe.agent")

HTTP_MAX_CONNECTIONS = 32


class RunningAgent:
    """Use :meth:`start` (or ``async with RunningAgent.start(agent)``) and :meth:`aclose`."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.toolbox = Toolbox()
        self.connections: list[McpConnection] = []
        self.unavailable: dict[str, str] = {}
        """MCP servers that could not be reached at start, and why."""
        self._http: httpx.AsyncClient | None = None

    @classmethod
    async def start(cls, agent: Agent) -> RunningAgent:
        running = cls(agent)
        try:
            await running._open()
        except BaseException:
            await running.aclose()
            raise
        return running

    async def _open(self) -> None:
        tools: list[Tool] = list(self.agent.python_tools)
        if self.agent.http_tools:
            self._http = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=HTTP_MAX_CONNECTIONS),
                follow_redirects=False,
            )
            tools += [HttpTool(config, self._http) for config in self.agent.http_tools]
        self.connections = [
            McpConnection(server, self.agent.base_dir) for server in self.agent.mcp_servers
        ]
        found = await asyncio.gather(
            *(connection.start() for connection in self.connections), return_exceptions=True
        )
        for connection, outcome in zip(self.connections, found, strict=True):
            if isinstance(outcome, McpUnavailable):
                log.error("%s; the agent runs without its tools", outcome)
                self.unavailable[connection.name] = str(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                log.info("MCP server %s: %d tools", connection.name, len(outcome))
                tools += outcome
        self.toolbox = Toolbox(tools, self.agent.hooks)

    async def aclose(self) -> None:
        """Close every MCP session (their stdio servers end) and the HTTP client."""
        await asyncio.gather(*(connection.aclose() for connection in self.connections))
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> RunningAgent:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
