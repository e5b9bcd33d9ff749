"""Tool calls of the Qwen2.5/Qwen3 family (Hermes format), as its chat template writes them.

The template (``tokenizer.chat_template`` in the GGUF) appends a ``# Tools`` block with one
JSON line per tool to the first system message, has the assistant answer a call as
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, and gives results back in
a user turn, one ``<tool_response>`` block per result. The prompt text here is that
template's, character for character, so the model sees what it was trained on (the engine
renders the GGUF's own template, ``llama_template.py``; the text here is what the tool
evaluation and the tests compare with). :data:`QWEN` is the family (``tool_family.py``).
The grammar, the steps and the scanner below serve every family: they take its keys.

What the model writes after ``<tool_call>`` is constrained by llama.cpp grammars built with
llama.cpp's own JSON-schema converter: the name is one of the tools' (:func:`name_grammar`),
each argument valid for its schema, and the JSON around them written by the engine
(:func:`call_steps`, each value under its own :func:`value_grammar`), so a call always
parses. The engine writes :data:`CALL_PREFIX` itself. Whether the
model calls at all is decided before the grammar starts (see ``llama_llm.py``), so a plain
answer streams with no grammar and no extra latency.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from voxpipe.engines.base import ToolCallRequest, ToolSpec, new_tool_call_id
from voxpipe.engines.tool_family import ToolFamily, native_chat

DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
TOOLS_HEADER = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
CALL_PREFIX = '\n{"name": "'  # what follows <tool_call>, up to the name: written, not sampled
NAME_TO_ARGUMENTS = '", "arguments": '


MARKUP = (CALL_OPEN, CALL_CLOSE, "<tool_response>", "</tool_response>")

QWEN = ToolFamily(
    name="qwen",
    call_open=CALL_OPEN,
    call_prefix=CALL_PREFIX,
    call_close="\n" + CALL_CLOSE,
    markup=MARKUP,
    starts=(CALL_OPEN,),
    chat=native_chat,
)


class ToolCallParseError(ValueError):
    """The model's text is not a complete call of a known tool."""


def _tojson(value: Any) -> str:
    """Jinja's ``tojson`` as Hugging Face's chat templates define it."""
    return json.dumps(value, ensure_ascii=False)


def system_with_tools(system: str | None, tools: Sequence[ToolSpec]) -> str:
    """The first system message's text with the tools block (Qwen's default if none)."""
    lines = "".join("\n" + _tojson(tool.openai()) for tool in tools)
    return (DEFAULT_SYSTEM if system is None else system) + TOOLS_HEADER + lines + TOOLS_FOOTER


def call_body(call: ToolCallRequest) -> str:
    """One call as the template writes it inside ``<tool_call>`` ... ``</tool_call>``."""
    return f'\n{{"name": "{call.name}", "arguments": {_tojson(dict(call.arguments))}}}\n'


def tool_response(content: str) -> str:
    """One result as the template writes it in the user turn that carries results."""
    return f"\n<tool_response>\n{content}\n</tool_response>"


# -- the grammar ---------------------------------------------------------------------------


def _literal(text: str) -> str:
    return _tojson(text)  # a JSON string is a valid GBNF literal (same escapes)


@dataclass(frozen=True)
class CallStep:
    """Fixed text the engine writes (evaluated in one batch, never sampled), then a value
    the model samples under ``grammar``, which ends on ``delimiter`` (None: the call is
    complete after ``fixed``)."""

    fixed: str
    grammar: str | None = None
    delimiter: str = ""


def call_steps(tool: ToolSpec, name_to_arguments: str = NAME_TO_ARGUMENTS) -> tuple[CallStep, ...]:
    """How a call of ``tool`` is written after its name: the JSON's keys, quotes and commas
    are fixed by the schema, so only the values are sampled (a token sampled costs about as
    much as ten evaluated in one batch on a CPU). Each value's grammar ends with the
    character the model writes after it, ``,`` or ``}``, so the model says where the value
    ends. An object with optional or unusual properties is sampled whole, under its own
    grammar (:func:`value_grammar`)."""
    schema = dict(tool.parameters)
    properties: dict[str, Any] = dict(schema.get("properties") or {})
    required = list(schema.get("required") or ())
    if not properties:
        return (CallStep(name_to_arguments + "{}}"),)
    simple = set(required) == set(properties) and "$defs" not in schema
    if not simple:  # the object's own closing brace ends it
        opening = name_to_arguments.rstrip()
        return (CallStep(opening, value_grammar(schema, ""), "}"), CallStep("}"))
    steps = []
    for i, name in enumerate(properties):
        last = i == len(properties) - 1
        key = f"{_tojson(name)}:"  # the space after it is the value's: ' "' is one token
        fixed = name_to_arguments + "{" + key if i == 0 else " " + key
        delimiter = "}" if last else ","
        steps.append(CallStep(fixed, value_grammar(properties[name], delimiter), delimiter))
    steps.append(CallStep("}"))  # the call's own brace
    return tuple(steps)


def value_grammar(schema: Mapping[str, Any], delimiter: str) -> str:
    """GBNF for one JSON value of ``schema`` followed by ``delimiter``, after an optional
    space: the model writes the space and the value's first character as one token, as in
    its training (fixed text that ends in the space leaves it a token it rarely saw there,
    and its values go wrong: "stringsmith" for Smith)."""
    from llama_cpp.llama_grammar import SchemaConverter

    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    rule = converter.visit(converter.resolve_refs(dict(schema), "value"), "value")
    end = f" {_literal(delimiter)}" if delimiter else ""
    return f'{converter.format_grammar()}\nroot ::= " "? {rule}{end}\n'


def name_grammar(tools: Sequence[ToolSpec]) -> str:
    """GBNF for a tool's name and the quote that closes it."""
    names = " | ".join(_literal(tool.name) for tool in tools)
    return f'root ::= ( {names} ) "\\""\n'


# -- reading what the model wrote ------------------------------------------------------------


class ArgumentsScanner:
    """Follows a call's text as it is generated (from :data:`CALL_PREFIX` on) and hands out
    the arguments' text as it arrives, so a client can show it live; tells when the call's
    JSON object is complete (the rest, ``\\n</tool_call>``, is fixed and need not be
    generated)."""

    KEY = '"arguments":'

    def __init__(self, prefix: str = CALL_PREFIX, key: str = KEY) -> None:
        self.prefix, self.key = prefix, key
        self.text = ""
        self._args_start = -1  # index in text where the arguments' value begins
        self._scanned = 0  # characters of text looked at by the JSON depth count
        self._depth = 0  # of the whole call object, which CALL_PREFIX opens
        self._in_string = False
        self._escaped = False
        self._args_end = -1  # index just past the arguments' closing brace
        self.complete = False

    @property
    def name(self) -> str:
        """The tool's name once written in full, else ""."""
        start = len(self.prefix)
        end = self.text.find('"', start)
        return self.text[start:end] if end >= 0 and self.text.startswith(self.prefix) else ""

    def push(self, piece: str) -> str:
        """Take more generated text; return the new part of the arguments' text, if any."""
        before = self._emitted()
        self.text += piece
        while self._scanned < len(self.text) and not self.complete:
            self._step(self._scanned)
            self._scanned += 1
        if self._args_start < 0:
            key = self.text.find(self.key)
            if key >= 0:
                start = key + len(self.key)
                while start < len(self.text) and self.text[start] == " ":
                    start += 1
                if start < len(self.text):
                    self._args_start = start
        return self._emitted()[len(before) :]

    def value_ended(self, delimiter: str) -> bool:
        """The text so far ends a value of the call's arguments with ``delimiter``: ``,``
        between two of them, ``}`` closing the arguments (:class:`CallStep`)."""
        depth = 2 if delimiter == "," else 1
        return self.text.endswith(delimiter) and not self._in_string and self._depth == depth

    def _step(self, i: int) -> None:
        c = self.text[i]
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif c == "\\":
                self._escaped = True
            elif c == '"':
                self._in_string = False
        elif c == '"':
            self._in_string = True
        elif c in "{[":
            self._depth += 1
        elif c in "}]":
            self._depth -= 1
            if self._depth == 1 and self._args_end < 0 and c == "}":
                self._args_end = i + 1
            if self._depth == 0:
                self.complete = True

    def _emitted(self) -> str:
        if self._args_start < 0:
            return ""
        end = self._args_end if self._args_end >= 0 else self._scanned
        return self.text[self._args_start : max(self._args_start, end)]

    @property
    def arguments_json(self) -> str:
        return self._emitted()


def parse_call(
    text: str, tools: Sequence[ToolSpec], call_id: str | None = None, family: ToolFamily = QWEN
) -> ToolCallRequest:
    """The call in ``text``: what the model wrote after ``<tool_call>``, with or without the
    closing tag. Raises :class:`ToolCallParseError` for anything but one JSON object with a
    known tool's ``name`` and an object of ``arguments`` that has the schema's required
    properties (the grammar guarantees it; this also guards output made without one)."""
    body = text.strip()
    for start in family.starts:
        body = body.removeprefix(start)
    body = body.removesuffix(family.call_close.strip()).strip()
    try:
        call, end = json.JSONDecoder().raw_decode(body)
    except ValueError as exc:
        raise ToolCallParseError(f"the tool call is not JSON: {exc}") from None
    if body[end:].strip():
        raise ToolCallParseError("text follows the tool call's JSON")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ToolCallParseError('a tool call is an object with a "name"')
    by_name = {tool.name: tool for tool in tools}
    tool = by_name.get(call["name"])
    if tool is None:
        raise ToolCallParseError(f"no tool is called {call['name']!r}")
    arguments = call.get(family.arguments_key, {})
    if not isinstance(arguments, dict):
        raise ToolCallParseError(f"{tool.name}: arguments must be a JSON object")
    missing = tool.missing_arguments(arguments)
    if missing:
        raise ToolCallParseError(f"{tool.name}: missing arguments {', '.join(missing)}")
    raw = _arguments_text(body, arguments, family.arguments_marker)
    return ToolCallRequest(call_id or new_tool_call_id(), tool.name, arguments, raw)


def _arguments_text(body: str, arguments: Mapping[str, Any], marker: str) -> str:
    """The arguments' JSON exactly as written in ``body`` (a call object that parsed)."""
    key = body.find(marker)
    if key < 0:  # spaced differently, or absent: the canonical form
        return _tojson(dict(arguments))
    start = key + len(marker)
    while body[start].isspace():
        start += 1
    _, end = json.JSONDecoder().raw_decode(body, start)
    return body[start:end]


class MarkupFilter:
    """Takes Qwen's tool markup out of a text reply as it streams. Shown a tool's result
    (``<tool_response>…</tool_response>``), the small model often writes the tags around
    its answer: they are no words to say. A tail that may begin a tag is held back until
    the next piece tells."""

    def __init__(self, markup: Sequence[str] = MARKUP) -> None:
        self._held = ""
        self._markup = tuple(markup)

    def push(self, text: str) -> str:
        text = self._held + text
        for tag in self._markup:
            text = text.replace(tag, "")
        start = text.rfind("<")
        self._held = ""
        if start != -1 and any(tag.startswith(text[start:]) for tag in self._markup):
            text, self._held = text[:start], text[start:]
        return text

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held
