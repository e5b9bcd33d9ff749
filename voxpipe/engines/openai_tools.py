"""Tool calls in the OpenAI chat-completions format: the history's tool turns as the API
wants them, and the streamed ``delta.tool_calls`` pieces put back together.

A streamed call comes in fragments keyed by ``index``: the first usually carries the call's
``id`` and ``function.name``, the rest pieces of ``function.arguments`` (a JSON text), and
several calls may interleave. Each argument fragment is passed on at once as a
:class:`ToolCallDelta`; the calls are complete, and checked, only when the stream ends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from voxpipe.engines.base import (
    ChatMessage,
    ToolCallDelta,
    ToolCallRequest,
    ToolSpec,
    new_tool_call_id,
)


def openai_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.tool_calls:
        calls = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call in message.tool_calls
        ]
        return {"role": "assistant", "content": message.content or None, "tool_calls": calls}
    return {"role": message.role, "content": message.content}


@dataclass
class _Partial:
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ToolCallAssembler:
    """The tool calls of one streamed reply, from their ``delta.tool_calls`` fragments."""

    def __init__(self) -> None:
        self._calls: dict[int, _Partial] = {}

    def __bool__(self) -> bool:
        return bool(self._calls)

    def push(self, fragments: Sequence[Mapping[str, Any]]) -> list[ToolCallDelta]:
        """Take one chunk's ``delta.tool_calls``; return the argument pieces it carried."""
        deltas = []
        for fragment in fragments:
            index = fragment.get("index")
            part = self._calls.setdefault(index if isinstance(index, int) else 0, _Partial())
            part.call_id = part.call_id or str(fragment.get("id") or "")
            function = fragment.get("function") or {}
            part.name = part.name or str(function.get("name") or "")  # some servers repeat it
            pieces = function.get("arguments")
            if isinstance(pieces, dict):  # a server that sends the arguments parsed
                pieces = json.dumps(pieces)
            if pieces:
                part.call_id = part.call_id or new_tool_call_id()
                part.arguments.append(str(pieces))
                deltas.append(ToolCallDelta(part.call_id, part.name, str(pieces)))
        return deltas

    def calls(self, tools: Sequence[ToolSpec]) -> list[ToolCallRequest]:
        """The complete calls in index order, each checked against ``tools``: one that
        cannot be run as it stands carries the reason in ``error``."""
        by_name = {tool.name: tool for tool in tools}
        calls = []
        for _, part in sorted(self._calls.items()):
            text = "".join(part.arguments) or "{}"
            arguments: Any = {}
            try:
                arguments = json.loads(text)
                error = "" if isinstance(arguments, dict) else "arguments must be a JSON object"
            except ValueError as exc:
                error = f"arguments are not JSON: {exc}"
            if not isinstance(arguments, dict):
                arguments = {}
            tool = by_name.get(part.name)
            if tool is None:
                error = f"no tool is called {part.name!r}"
            elif not error and (missing := tool.missing_arguments(arguments)):
                error = f"missing arguments {', '.join(missing)}"
            call_id = part.call_id or new_tool_call_id()
            calls.append(ToolCallRequest(call_id, part.name, arguments, text, error))
        return calls
