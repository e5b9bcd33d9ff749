"""An agent's optional hooks: its own code, run at the edges of a call and of each tool call.

A hook is the agent author's code, so it is fenced: its exception is logged and dropped,
and the call goes on (a broken audit hook must not hang up on a caller).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from voxpipe.agent.tools import ToolCall, ToolResult

log = logging.getLogger("voxpipe.agent")


@dataclass(frozen=True)
class CallInfo:
    """Which phone call a call hook is about."""

    session_id: str
    transport: str


CallHook = Callable[[CallInfo], Awaitable[None]]
ToolStartHook = Callable[[ToolCall], Awaitable[None]]
ToolEndHook = Callable[[ToolCall, ToolResult], Awaitable[None]]


@dataclass(frozen=True)
class AgentHooks:
    """``on_call_start``/``on_call_end``: a call began or ended; ``on_tool_start``/
    ``on_tool_end``: the toolbox is about to run a tool call, or has its result."""

    on_call_start: CallHook | None = None
    on_call_end: CallHook | None = None
    on_tool_start: ToolStartHook | None = None
    on_tool_end: ToolEndHook | None = None

    async def call_started(self, call: CallInfo) -> None:
        await _fenced("on_call_start", self.on_call_start, call)

    async def call_ended(self, call: CallInfo) -> None:
        await _fenced("on_call_end", self.on_call_end, call)

    async def tool_started(self, call: ToolCall) -> None:
        await _fenced("on_tool_start", self.on_tool_start, call)

    async def tool_ended(self, call: ToolCall, result: ToolResult) -> None:
        await _fenced("on_tool_end", self.on_tool_end, call, result)


async def _fenced(name: str, hook: Callable[..., Awaitable[None]] | None, *args: Any) -> None:
    if hook is None:
        return
    try:
        await hook(*args)
    except Exception:
        log.exception("agent hook %s failed; the call goes on", name)
