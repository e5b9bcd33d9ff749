"""The toolbox: every tool an agent offers, and the one way a tool call is run.

:meth:`Toolbox.run` answers every :class:`~voxpipe.agent.tools.ToolCall` with a
:class:`~voxpipe.agent.tools.ToolResult`, whatever happens: a name the model made up,
arguments the schema refuses, the tool raising, running past its timeout or returning
something JSON cannot carry. Nothing a tool does escapes as an exception, so a bad tool
costs one answer, never the call. The one exception is cancellation: a cancelled run
re-raises, and whoever cancelled it records :meth:`ToolResult.cancelled`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping

from voxpipe.agent.call_context import NO_CALL, CallContext
from voxpipe.agent.hooks import AgentHooks
from voxpipe.agent.tools import (
    InvalidArguments,
    Tool,
    ToolCall,
    ToolDefinitionError,
    ToolFailed,
    ToolResult,
    ToolStatus,
)
from voxpipe.engines.base import ToolSpec

log = logging.getLogger("voxpipe.agent")


class Toolbox:
    """Tools by name. Two tools with one name are a definition error (the model could not
    tell them apart)."""

    def __init__(self, tools: Iterable[Tool] = (), hooks: AgentHooks | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ToolDefinitionError(f"two tools are named {tool.name}")
            self._tools[tool.name] = tool
        self._hooks = hooks or AgentHooks()

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self._tools.values()]

    def openai_tools(self) -> list[dict[str, object]]:
        """The ``tools`` list of an OpenAI chat-completions request."""
        return [tool.spec.openai() for tool in self._tools.values()]

    async def run(self, call: ToolCall, context: CallContext = NO_CALL) -> ToolResult:
        """Run one call under its tool's timeout, for the call ``context`` names (the
        server's, never the model's); always a result (module docstring)."""
        started = time.monotonic()
        await self._hooks.tool_started(call)
        try:
            result = await self._run(call, context, started)
        except asyncio.CancelledError:
            await self._hooks.tool_ended(call, ToolResult.cancelled(call, _since(started)))
            raise
        log.info(
            "tool %s call %s: %s in %.0f ms",
            call.name,
            call.call_id,
            result.status,
            result.duration_s * 1000,
        )
        await self._hooks.tool_ended(call, result)
        return result

    async def _run(self, call: ToolCall, context: CallContext, started: float) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            message = f"there is no tool named {call.name!r} (tools: {known})"
            return ToolResult.failed(call, ToolStatus.ERROR, message)
        try:
            if not isinstance(call.arguments, Mapping):
                raise InvalidArguments(call.name, ["the arguments must be a JSON object"])
            arguments = tool.validate(call.arguments)
        except InvalidArguments as exc:
            return ToolResult.failed(call, ToolStatus.ERROR, str(exc), _since(started))
        except Exception as exc:  # a validator's own bug: still only this call's error
            log.exception("tool %s: validating the arguments failed", call.name)
            return ToolResult.failed(call, ToolStatus.ERROR, _describe(exc), _since(started))
        deadline = asyncio.timeout(tool.policy.timeout_s)
        try:
            async with deadline:
                output = await tool.invoke(arguments, context)
        except TimeoutError as exc:
            if not deadline.expired():  # the tool's own timeout (an HTTP read, say)
                return ToolResult.failed(call, ToolStatus.ERROR, _describe(exc), _since(started))
            message = f"{call.name} did not finish within {tool.policy.timeout_s:g} s"
            return ToolResult.failed(call, ToolStatus.TIMEOUT, message, _since(started))
        except Exception as exc:
            expected = isinstance(exc, ToolFailed)
            log.warning(
                "tool %s call %s failed: %s",
                call.name,
                call.call_id,
                _describe(exc),
                exc_info=not expected,
            )
            return ToolResult.failed(call, ToolStatus.ERROR, _describe(exc), _since(started))
        try:
            json.dumps(output)
        except (TypeError, ValueError) as exc:
            message = f"{call.name} returned a value JSON cannot carry: {exc}"
            return ToolResult.failed(call, ToolStatus.ERROR, message, _since(started))
        return ToolResult(call.call_id, call.name, ToolStatus.OK, output, _since(started))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ToolFailed | InvalidArguments):
        return str(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _since(started: float) -> float:
    return time.monotonic() - started
