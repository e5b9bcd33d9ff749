"""How a model family writes tool calls, and which family a GGUF belongs to.

The engine (``llama_llm.py``, ``llama_tools.py``) decides to call from the logits of the
reply's first token and writes the call itself under a grammar; what differs between
families is only text: the token that opens a call, the JSON around the name and the
arguments, and how the conversation shows tools, calls and results to the model. That text
is a :class:`ToolFamily`, one per module: ``qwen_tools.py`` (Hermes ``<tool_call>``),
``llama3_tools.py`` (Llama 3.x's JSON calls), ``json_tools.py`` (any other chat model:
a JSON object under a grammar, the tools described in the system message).

:func:`~voxpipe.engines.llama_tools.choose_family` picks one from the GGUF's metadata;
``llm.tool_family`` overrides it, and ``none`` marks a model that must not be offered tools.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from voxpipe.engines.base import ChatMessage, EngineError, ToolSpec


class ToolsUnsupportedError(EngineError):
    """Tools were offered to a model that cannot call them."""

    code = "tools_unsupported"


def _tojson(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True, kw_only=True)
class ToolFamily:
    """A family's tool-call text. A call is written as ``call_open`` (a special token, or
    nothing), then ``call_prefix``, the name, ``'", "' + arguments_key + '": '``, the
    arguments' JSON, ``}`` and ``call_close``. The defaults are a bare JSON call,
    ``{"name": ..., "arguments": {...}}``, with no token or tag around it: a family module
    names only what its model writes otherwise."""

    name: str
    call_open: str = ""  # a single special token's text, or "" when calls open with JSON
    call_prefix: str = '{"name": "'  # after call_open, up to the tool's name: written, not sampled
    arguments_key: str = "arguments"  # or Llama 3's "parameters"
    call_close: str = ""  # after the call's JSON (not generated: the engine stops at the brace)
    markup: tuple[str, ...] = ()  # tags a spoken reply must not say
    starts: tuple[str, ...] = ()  # special tokens that begin a call, where the vocabulary has them
    # The conversation as the model's template takes it: OpenAI-style dicts, and the tools
    # for the template's ``tools`` variable (None: they are in the messages' text).
    chat: Callable[
        [Sequence[ChatMessage], Sequence[ToolSpec], bool],
        tuple[list[dict[str, Any]], list[dict[str, Any]] | None],
    ]

    @property
    def name_to_arguments(self) -> str:
        return f'", "{self.arguments_key}": '

    @property
    def arguments_marker(self) -> str:
        return f'"{self.arguments_key}":'

    def call_text(self, name: str, arguments: Mapping[str, Any]) -> str:
        """One call as this family writes it, ``call_open`` included."""
        body = f"{self.call_prefix}{name}{self.name_to_arguments}{_tojson(dict(arguments))}}}"
        return self.call_open + body + self.call_close


def native_chat(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], template_tools: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """For templates that render tools, calls and results themselves (Qwen's, Llama 3's):
    calls as OpenAI ``tool_calls`` with the arguments as an object, results as ``tool``
    messages."""
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            item["tool_calls"] = [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": dict(c.arguments)},
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id:
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return out, ([t.openai() for t in tools] if tools else None)
