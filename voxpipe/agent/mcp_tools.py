"""MCP servers' tools, through the official ``mcp`` SDK, over stdio or streamable HTTP.

Each declared server (:class:`McpServerConfig`) gets one :class:`McpConnection`, opened
when the agent starts: it connects, lists the server's tools (each becomes an
:class:`McpTool` with the server's own input schema) and stays open until the agent
stops. The SDK's client lives in anyio task groups and cancel scopes, which must be left
by the task that entered them, so every connection is held by one task of its own: it
enters the client, reports the tools, waits for the stop and leaves. The server's
lifespan can therefore start the agent from its loading task and stop it from the
shutdown, and nothing is left running after :meth:`McpConnection.aclose`.

What a tool may do comes from its MCP annotations: ``readOnlyHint`` makes it read-only
(and so safe to repeat), ``idempotentHint`` idempotent; a tool without them is mutating
and not idempotent, the safe reading of a tool one knows nothing about.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, JsonValue, field_validator, model_validator

from voxpipe.agent import schema
from voxpipe.agent.call_context import CallContext
from voxpipe.agent.http_tools import ToolPolicyConfig, expand_env, http_url
from voxpipe.agent.tools import (
    Tool,
    ToolDefinitionError,
    ToolEffect,
    ToolFailed,
    ToolOutput,
    ToolPolicy,
    tool_spec,
)

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult
    from mcp_types import Tool as McpToolInfo

log = logging.getLogger("voxpipe.agent")

MAX_TOOL_PAGES = 50  # a server whose tools/list never ends cannot hang the start
STOP_TIMEOUT_S = 6.0  # the SDK gives a stdio server 2 s after stdin closes, then 2 s after SIGTERM


class McpUnavailable(Exception):
    """An MCP server that could not be reached, or stopped answering."""


class McpServerConfig(ToolPolicyConfig):
    """One MCP server: a command to run (stdio) or a URL (streamable HTTP). The timeout,
    phrases and ``says`` apply to each of its tools, ``confirm`` to each that changes
    something (no ``readOnlyHint``); effect and idempotency come from the server's own tool
    annotations."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Names it in logs.")
    command: str | None = Field(None, description="stdio: the program that runs the server.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: more environment.")
    cwd: str | None = Field(None, description="stdio: its directory (default: the agent's).")
    url: str | None = Field(None, description="Streamable HTTP: the endpoint, like .../mcp.")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP: ${ENV} expanded.")
    tool_prefix: str = Field("", description="Put before each tool's name, to keep names apart.")
    connect_timeout_s: float = Field(15.0, gt=0, description="To connect and list its tools.")

    @field_validator("headers", "env")
    @classmethod
    def _expand(cls, values: dict[str, str]) -> dict[str, str]:
        return {name: expand_env(value) for name, value in values.items()}

    @field_validator("url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        return None if url is None else http_url(url)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP), not both")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


class McpConnection:
    """One open session with one MCP server (module docstring)."""

    def __init__(self, config: McpServerConfig, base_dir: Path | None = None) -> None:
        self.config = config
        self._base_dir = base_dir
        self._client: Client | None = None
        self._tools: list[McpTool] = []
        self._stop = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def start(self) -> list[McpTool]:
        """Connect and list the tools; :class:`McpUnavailable` if it cannot, in time."""
        if self._holder is not None:
            raise RuntimeError(f"MCP server {self.name} is started already")
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._holder = asyncio.create_task(self._hold(ready), name=f"mcp-{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.connect_timeout_s)
        except TimeoutError:
            await self.aclose()
            raise McpUnavailable(
                f"MCP server {self.name}: no answer within {self.config.connect_timeout_s:g} s"
            ) from None
        except Exception as exc:
            await self.aclose()
            raise McpUnavailable(f"MCP server {self.name}: {_describe(exc)}") from exc
        except asyncio.CancelledError:
            await self.aclose()
            raise
        return list(self._tools)

    async def aclose(self) -> None:
        """Leave the session (a stdio server's process ends with it); waits, then cancels."""
        holder, self._holder = self._holder, None
        if holder is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(holder), STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning("MCP server %s: no clean shutdown in %.0f s", self.name, STOP_TIMEOUT_S)
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder
        except Exception:
            pass  # already reported by the holder

    async def call(
        self, tool: str, arguments: dict[str, Any], context: CallContext
    ) -> CallToolResult:
        client = self._client
        if client is None:
            raise ToolFailed(f"MCP server {self.name} is not connected")
        return await client.call_tool(tool, arguments, meta=context.meta())  # type: ignore[arg-type]

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        from mcp import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await stack.enter_async_context(Client(await self._target(stack)))
                self._tools = await self._discover(client)
                self._client = client
                ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not self._stop.is_set():
                log.error("MCP server %s: the connection failed: %s", self.name, _describe(exc))
        finally:
            self._client = None
            if not ready.done():  # cancelled while connecting
                ready.set_exception(McpUnavailable("stopped while connecting"))

    async def _target(self, stack: contextlib.AsyncExitStack) -> Any:
        """What the SDK's Client connects to: stdio parameters, or an HTTP transport."""
        config = self.config
        if config.command is not None:
            from mcp.client.stdio import StdioServerParameters, get_default_environment

            cwd = self._base_dir
            if config.cwd is not None:
                cwd = (self._base_dir or Path()) / config.cwd
            return StdioServerParameters(
                command=config.command,
                args=config.args,
                env={**get_default_environment(), **config.env},
                cwd=cwd,
            )
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert config.url is not None
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=config.headers, timeout=httpx2.Timeout(30.0, read=300.0))
        )
        return streamable_http_client(config.url, http_client=http)

    async def _discover(self, client: Client) -> list[McpTool]:
        found: list[McpTool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            for info in page.tools:
                try:
                    found.append(McpTool(self, info))
                except ToolDefinitionError as exc:
                    log.error("MCP server %s: tool %s left out: %s", self.name, info.name, exc)
            cursor = page.next_cursor
            if cursor is None:
                break
        return found


class McpTool(Tool):
    """One tool of an MCP server; calling it is ``tools/call`` on the server's session."""

    kind = "mcp"

    def __init__(self, connection: McpConnection, info: McpToolInfo) -> None:
        config = connection.config
        hints = info.annotations
        read_only = bool(hints and hints.read_only_hint)
        policy = ToolPolicy(
            config.timeout_s,
            config.phrase,
            config.timeout_phrase,
            ToolEffect.READ_ONLY if read_only else ToolEffect.MUTATING,
            read_only or bool(hints and hints.idempotent_hint),
            config.says,
            False if read_only else config.confirm,  # a look changes nothing: no readback
        )
        name = config.tool_prefix + info.name
        parameters = schema.compact(schema.checked(name, info.input_schema))
        super().__init__(tool_spec(name, info.description or "", parameters), policy)
        self.connection = connection
        self.remote_name = info.name

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return schema.validate_arguments(self.name, self.spec.parameters, arguments)

    async def invoke(self, arguments: dict[str, Any], context: CallContext) -> ToolOutput:
        from mcp.shared.exceptions import MCPError
        from mcp_types import TextContent

        try:
            result = await self.connection.call(self.remote_name, arguments, context)
        except MCPError as exc:
            raise ToolFailed(f"MCP server {self.connection.name}: {exc.error.message}") from exc
        text: list[JsonValue] = [b.text for b in result.content if isinstance(b, TextContent)]
        if result.is_error:
            raise ToolFailed("\n".join(map(str, text)) or f"{self.name} failed")
        if result.structured_content is not None:
            return result.structured_content
        others: list[JsonValue] = [b.type for b in result.content if b.type != "text"]
        if others:  # images, audio, resources: the model is told they exist
            return {"text": text, "other_content": others}
        return text[0] if len(text) == 1 else text


def _describe(exc: BaseException) -> str:
    """The one error under the SDK's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
