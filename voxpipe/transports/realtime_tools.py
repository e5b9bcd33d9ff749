"""A Realtime client's own tools: ``session.tools`` and ``tool_choice``, checked and held.

As with OpenAI, a client may declare function tools. The model may call them; the call
goes out to the client (``response.function_call_arguments.*``), which runs it and sends
the result back (``conversation.item.create`` with a ``function_call_output``). They are
checked strictly at ``session.update`` (a name OpenAI would accept, an object parameters
schema that is a valid JSON schema nesting at most ``schema.MAX_DEPTH`` levels, no MCP
tools) so that a bad one is refused there, not found out by a failing turn. The server's own
tools (its agent's) are not listed: a client sees what it declared. Whether a tool may take
its name (no server tool has it) and whether all of them fit the model's context is the
session's to say (``tool_ledger.py``, ``prompt_budget.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from voxpipe.agent.schema import checked
from voxpipe.engines.base import ToolSpec
from voxpipe.transports.realtime_client_events import FunctionToolIn
from voxpipe.transports.realtime_wire import RealtimeError

MAX_TOOLS = 128
CHOICES = ("auto", "none", "required")  # or a tool's name


@dataclass(frozen=True)
class ClientTools:
    """The function tools a client declared, and how the model may choose among them."""

    specs: tuple[ToolSpec, ...] = ()
    choice: str = "auto"  # auto | none | required | the name of one of ``specs``

    def updated(self, tools: list[Any] | None, choice: Any, choice_given: bool) -> ClientTools:
        """These tools with a ``session.update``'s ``tools`` (None: unchanged) and
        ``tool_choice`` (when ``choice_given``) applied; a RealtimeError if either is bad."""
        try:
            specs = self.specs if tools is None else _specs(tools)
        except RealtimeError as error:
            error.warn = True  # a bad tool: the first of a connection is logged
            raise
        name = _choice(choice) if choice_given else self.choice
        if name not in CHOICES and name not in {spec.name for spec in specs}:
            raise RealtimeError(
                "invalid_value",
                f"tool_choice names the function '{name}', which is not in session.tools",
                "session.tool_choice",
            )
        return ClientTools(specs, name)

    def wire_tools(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "name": spec.name,
                "description": spec.description,
                "parameters": dict(spec.parameters),
            }
            for spec in self.specs
        ]

    def wire_choice(self) -> str | dict[str, str]:
        return self.choice if self.choice in CHOICES else {"type": "function", "name": self.choice}


def _specs(tools: list[Any]) -> tuple[ToolSpec, ...]:
    if len(tools) > MAX_TOOLS:
        raise RealtimeError(
            "invalid_value", f"at most {MAX_TOOLS} tools; got {len(tools)}", "session.tools"
        )
    specs: list[ToolSpec] = []
    for i, raw in enumerate(tools):
        where = f"session.tools.{i}"
        kind = raw.get("type", "function") if isinstance(raw, dict) else "function"
        if kind != "function":
            raise RealtimeError(
                "invalid_value",
                f"tools of type '{str(kind)[:32]}' are not supported; declare function tools",
                f"{where}.type",
            )
        try:
            tool = FunctionToolIn.model_validate(raw)
        except ValidationError as exc:
            raise RealtimeError.of(exc, where) from None
        if tool.name in {spec.name for spec in specs}:
            raise RealtimeError(
                "invalid_value", f"two tools are named '{tool.name}'", f"{where}.name"
            )
        parameters = tool.parameters or {"type": "object", "properties": {}}
        try:
            specs.append(ToolSpec(tool.name, tool.description, checked(tool.name, parameters)))
        except ValueError as exc:
            raise RealtimeError("invalid_value", str(exc), f"{where}.parameters") from None
    return tuple(specs)


def _choice(choice: Any) -> str:
    """A mode, or the tool to call: ``{"type": "function", "name": …}`` (GA), or the bare
    name (what some beta clients send); :meth:`ClientTools.updated` checks the name."""
    if isinstance(choice, str) and choice:
        return choice
    if (
        isinstance(choice, dict)
        and set(choice) == {"type", "name"}
        and choice["type"] == "function"
        and isinstance(choice["name"], str)
    ):
        return choice["name"]
    raise RealtimeError(
        "invalid_value",
        "tool_choice must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": …}",
        "session.tool_choice",
    )
