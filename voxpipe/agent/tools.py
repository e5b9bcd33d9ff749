"""What a tool is, what calling it looks like, and what comes back.

Three kinds of tool (a Python function, an HTTP webhook, an MCP server's tool) share one
shape: a :class:`ToolSpec` the LLM is shown, a :class:`ToolPolicy` that says how a voice
call treats it, and two methods, ``validate`` and ``invoke``. The :class:`Toolbox`
(``toolbox.py``) runs them all the same way and always answers with a :class:`ToolResult`,
so the conversation never sees a tool's exception.

The policy is what makes a tool safe on a phone line:

- ``effect``: a ``READ_ONLY`` tool may be cancelled when the caller barges in; a
  ``MUTATING`` one (it books, cancels, transfers) runs to completion and its result is kept,
  so it is never run a second time. Mutating is the default: assuming a tool is harmless
  when it is not double-books a table; the other mistake only costs a little wasted work.
- ``idempotent``: running it twice does what running it once does, so a call whose worker
  died mid-execution may be retried; any other is reported as ``UNKNOWN_OUTCOME``.
- ``confirm``: the call is read back and runs only on the caller's yes in the next turn;
  a free-text argument the caller never said is asked for first.
- ``phrase``, said while a tool runs past about 300 ms, and ``timeout_phrase``, said when it
  runs past ``timeout_s``: the caller never sits in silence.
"""

from __future__ import annotations

import enum
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from pydantic import JsonValue

from voxpipe.agent.call_context import CallContext
from voxpipe.engines.base import ToolSpec

ToolOutput = JsonValue
"""What a tool gives back: anything JSON can carry, shown to the model as JSON."""

DEFAULT_TIMEOUT_S = 8.0
DEFAULT_PHRASE = "One moment."
DEFAULT_TIMEOUT_PHRASE = "Sorry, that is taking too long. Let's try something else."


class ToolEffect(enum.StrEnum):
    """Whether running the tool changes anything outside the call."""

    READ_ONLY = "read_only"
    MUTATING = "mutating"


class ToolStatus(enum.StrEnum):
    """How a call ended. ``UNKNOWN_OUTCOME``: it started on a worker that died before it
    recorded an end, so whether it took effect is not known (never retried unless the tool
    is idempotent)."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    UNKNOWN_OUTCOME = "unknown_outcome"


class ToolDefinitionError(ValueError):
    """A tool that cannot be offered as defined (a bad signature, schema or name): raised
    at start, before any call reaches it."""


class InvalidArguments(ValueError):
    """Arguments the tool's schema refuses; ``problems`` name each field and the rule."""

    def __init__(self, tool: str, problems: list[str]) -> None:
        super().__init__(f"invalid arguments for {tool}: " + "; ".join(problems))
        self.tool = tool
        self.problems = problems


class ToolFailed(Exception):
    """What a tool raises for a failure it expected (an HTTP 404, an MCP error result): the
    message goes to the model as the call's error, with no traceback in the log."""


def tool_spec(name: str, description: str, parameters: Mapping[str, Any] | None = None) -> ToolSpec:
    """The LLM's view of a tool (``engines.base.ToolSpec``, the one every engine renders),
    its mistakes raised as :class:`ToolDefinitionError`, at start."""
    try:
        spec = (
            ToolSpec(name, description)
            if parameters is None
            else ToolSpec(name, description, parameters)
        )
    except ValueError as exc:
        raise ToolDefinitionError(str(exc)) from exc
    if spec.parameters.get("type") != "object":
        raise ToolDefinitionError(f"tool {name}: its parameters must be a JSON object")
    return spec


@dataclass(frozen=True)
class ToolPolicy:
    """How a voice call treats a tool (module docstring)."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    phrase: str = DEFAULT_PHRASE
    timeout_phrase: str = DEFAULT_TIMEOUT_PHRASE
    effect: ToolEffect = ToolEffect.MUTATING
    idempotent: bool = False
    says: str = ""
    """A field of the tool's result that is the answer, said as it is: the model is not
    asked again. A small model shown a result often repeats its greeting, reads the record
    out or calls again; a sentence the tool wrote is right, and a model round sooner."""

    confirm: bool | str | Callable[[dict[str, Any]], str] = False
    """Read the call back and act only on the caller's yes in the next turn
    (``conversation/confirmation.py``): True (every argument said in words), the readback
    as a template over the model's arguments ("A table for {party_size} {date} at {time},
    under {name}. Shall I book it?") or a function of the validated arguments that returns
    it. For what cannot be undone on a misheard word: a booking, a cancellation, a
    payment."""

    only_if_caller_said: Callable[[str], bool] | None = None
    """A gate on the caller's words of the turn: a call made when they fail it is dropped
    (not run, not kept in the history) and the model answers without tools. For a tool a
    small model reaches for too readily, where a wrong call costs the call itself
    (``end_call`` hangs up only after a goodbye)."""

    implied_by_reply: Callable[[str], bool] | None = None
    """For a tool with no required arguments and an ``only_if_caller_said`` gate: a reply
    the model gave in words, with no call, that passes this stands for the call, when the
    caller's words pass the gate. A small model may answer "Bye!" with "Goodbye!" and no
    ``end_call``, and a call left open after both sides said goodbye is a caller hanging up
    on silence."""

    def says_in(self, output: object) -> str | None:
        """The sentence this tool's ``output`` says, if it has one."""
        if not self.says or not isinstance(output, dict):
            return None
        said = output.get(self.says)
        return said.strip() or None if isinstance(said, str) else None

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ToolDefinitionError(f"timeout_s must be positive, not {self.timeout_s}")
        if self.implied_by_reply is not None and self.only_if_caller_said is None:
            raise ToolDefinitionError(
                "implied_by_reply needs only_if_caller_said: a reply alone never makes a call"
            )


class PolicyOptions(TypedDict, total=False):
    """A ``ToolPolicy``'s fields as keywords, for the decorator that passes them on
    (``python_tools.tool``), which takes ``effect`` as a string too."""

    timeout_s: float
    phrase: str
    timeout_phrase: str
    idempotent: bool
    says: str
    confirm: bool | str | Callable[[dict[str, Any]], str]
    only_if_caller_said: Callable[[str], bool] | None
    implied_by_reply: Callable[[str], bool] | None


class Tool(ABC):
    """One tool, whatever runs it. ``validate`` and ``invoke`` are called by the
    :class:`~voxpipe.agent.toolbox.Toolbox`, which adds the timeout and turns every way a
    call can end into a :class:`ToolResult`."""

    kind: str = "tool"
    """Which kind of tool: ``python``, ``http`` or ``mcp`` (shown by ``voxpipe agent``)."""

    def __init__(self, spec: ToolSpec, policy: ToolPolicy) -> None:
        if policy.implied_by_reply is not None and spec.parameters.get("required"):
            raise ToolDefinitionError(
                f"tool {spec.name}: implied_by_reply is for a tool that takes no arguments"
            )
        read_only = policy.effect is ToolEffect.READ_ONLY
        self.spec = replace(spec, read_only=read_only) if spec.read_only != read_only else spec
        self.policy = policy

    @property
    def name(self) -> str:
        return self.spec.name

    @abstractmethod
    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the tool takes them; raises :class:`InvalidArguments`."""

    @abstractmethod
    async def invoke(self, arguments: dict[str, Any], context: CallContext) -> ToolOutput:
        """Run the tool on validated arguments, for the call ``context`` names (who is
        calling: ``call_context.py``). An exception means the call failed."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.policy.effect}>"


@dataclass(frozen=True)
class ToolCall:
    """The model asked for a tool. ``call_id`` names this one call everywhere: in the
    history, in the store, and across a reconnect or a failover."""

    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(str(data["call_id"]), str(data["name"]), dict(data.get("arguments") or {}))


@dataclass(frozen=True)
class ToolResult:
    """How one call ended and what it gave back. For anything but ``OK`` the output is
    ``{"error": "..."}``, which the model is shown like any other result."""

    call_id: str
    name: str
    status: ToolStatus
    output: ToolOutput
    duration_s: float = 0.0

    @classmethod
    def failed(
        cls, call: ToolCall, status: ToolStatus, message: str, duration_s: float = 0.0
    ) -> ToolResult:
        return cls(call.call_id, call.name, status, {"error": message}, duration_s)

    @classmethod
    def cancelled(cls, call: ToolCall, duration_s: float = 0.0) -> ToolResult:
        """For whoever cancelled a read-only call (the toolbox re-raises the cancel)."""
        return cls.failed(call, ToolStatus.CANCELLED, "cancelled: the caller spoke", duration_s)

    @classmethod
    def unknown_outcome(cls, call: ToolCall) -> ToolResult:
        """A call that started on a worker that died before it recorded an end."""
        message = "the call was interrupted; whether it took effect is unknown"
        return cls.failed(call, ToolStatus.UNKNOWN_OUTCOME, message)

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.OK

    def content(self) -> str:
        """The result as the model reads it: JSON text."""
        return json.dumps(self.output, ensure_ascii=False, separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "name": self.name,
            "status": self.status.value,
            "output": self.output,
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolResult:
        return cls(
            str(data["call_id"]),
            str(data["name"]),
            ToolStatus(data["status"]),
            data.get("output"),
            float(data.get("duration_s", 0.0)),
        )
