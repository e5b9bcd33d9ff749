"""Tool calls for any other chat model: one JSON object, written under a grammar.

A template that knows no tools (Gemma's, Phi's, most small models') gets them as text in
the system message, with the one format we ask for: ``{"name": ..., "arguments": {...}}``
and nothing else. Past calls are that JSON in the assistant's words, and results a user
turn that names the tool (many templates accept only user and assistant turns, in turn).
The grammar makes the call valid whatever the model knows of the format; whether it calls
is decided on the first token, from the probability of a ``{``, as for the other families.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from voxpipe.engines.base import ChatMessage, ToolSpec
from voxpipe.engines.tool_family import ToolFamily

TOOLS_INTRO = (
    "\n\nYou can call these functions. To call one, reply with only a JSON object "
    '{"name": <function name>, "arguments": <arguments object>} and nothing else:'
)


def tools_text(tools: Sequence[ToolSpec]) -> str:
    """The tools block appended to the system message."""
    return TOOLS_INTRO + "".join("\n" + json.dumps(t.openai(), ensure_ascii=False) for t in tools)


def text_chat(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], template_tools: bool
) -> tuple[list[dict[str, Any]], None]:
    """Tools, calls and results as plain turns any template renders."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for m in messages:
        if m.role == "tool":
            line = f"Result of {names.get(m.tool_call_id, 'the function')}: {m.content}"
            if out and out[-1].get("from_tools"):
                out[-1]["content"] += "\n" + line
            else:
                out.append({"role": "user", "content": line, "from_tools": True})
            continue
        content = m.content
        if m.tool_calls:
            calls = [GENERIC.call_text(c.name, c.arguments) for c in m.tool_calls]
            names.update((c.call_id, c.name) for c in m.tool_calls)
            content = "\n".join([content, *calls] if content else calls)
        out.append({"role": m.role, "content": content})
    if tools:
        if out and out[0]["role"] == "system":
            out[0]["content"] += tools_text(tools)
        else:
            out.insert(0, {"role": "system", "content": tools_text(tools).lstrip()})
    for item in out:
        item.pop("from_tools", None)
    return out, None


GENERIC = ToolFamily(name="json", chat=text_chat)
